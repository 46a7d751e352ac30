package reconciler

import (
	"context"
	"fmt"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/prune"
	"github.com/converge-go/converge/tables"
)

// setupStep is one run's setup step (WithSetup): how many times the run
// called the setup function and the last call's error. The zero value is
// a step not yet tried. The loop's goroutine owns it; it is not safe for
// concurrent use.
type setupStep struct {
	attempts int
	err      error // the last attempt's error; nil before the first ends
}

// setUp runs WithSetup's function before the loop's first round: until it
// returns nil no operation or prune starts, as the loop has not begun.
// Changes to the table wait in the change feed, opened before, and are
// read by the first round. A failed attempt is tried again after the retry
// backoff (or the delay of RetryAfter); Pause holds the next attempt until
// Resume, as it holds operations. It returns false if ctx ended first.
func (r *reconciler[Obj]) setUp(ctx context.Context, s *setupStep, p *prune.Schedule) bool {
	if r.opts.setup == nil {
		return true
	}
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	var due <-chan time.Time // nil: an attempt now
	for {
		paused, changed := r.gate.State()
		r.reportSetup(s, p, paused)
		if !paused && due == nil {
			if !r.gate.Enter() { // paused meanwhile: look again
				continue
			}
			txn := r.db.ReadTxn()
			err := r.call(ctx, "setup", func(ctx context.Context) error {
				r.gate.Entered()
				return r.opts.setup(ctx, txn)
			})
			s.attempts++
			if ctx.Err() != nil {
				return false
			}
			if err == nil {
				if s.err != nil {
					r.log.Info("Reconciler setup succeeded", "attempts", s.attempts)
				}
				s.err = nil
				return true
			}
			if s.err == nil {
				r.log.Warn("Reconciler setup failed; operations wait until it succeeds", "error", err)
			}
			s.err = err
			delay, ok := retryAfter(err)
			if !ok {
				delay = backoff(s.attempts, r.opts.retryMin, r.opts.retryMax, r.opts.retryJitter, r.clock.rand())
			}
			retry.Reset(delay)
			due = retry.C
			r.reportSetup(s, p, paused)
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		case <-due:
			due = nil
		}
	}
}

// reportSetup says, while the setup step has not succeeded, that the
// reconciler is setting up, or that setup fails (Degraded, with its
// error), or that it is paused, in health and the reconcilers table. The
// first round reports anew.
func (r *reconciler[Obj]) reportSetup(s *setupStep, p *prune.Schedule, paused bool) {
	state := tables.StateSettingUp
	switch {
	case paused:
		state = tables.StatePaused
		r.rep.health.OK("Paused")
	case s.err != nil:
		r.rep.health.Degraded(fmt.Sprintf("setup failing: %d attempt(s)", s.attempts), fmt.Errorf("setup failing: %w", s.err))
	default:
		r.rep.health.OK("Setting up")
	}
	if r.rep.info != nil {
		txn := r.db.ReadTxn()
		lc := r.keys.lifecycles
		row := r.infoRow(p, state, r.objects.table.NumObjects(txn), lc.Figures().Retrying, 0, 0, lc.Lows().Since)
		row.SetupAttempts = s.attempts
		if s.err != nil {
			row.SetupError = s.err.Error()
		}
		r.rep.info.Write(row)
	}
}

// WithSetup has setup called each time the reconcile job starts (every
// start of the hive), once the tables of [WithStartAfter] are initialized,
// before any operation or prune: for reading the target's state into the
// operations (IDs, reference counts) before they first write to it.
// Until setup returns nil no Update, Delete, batch or Prune starts;
// writes to the table are not held, and once setup succeeds every change
// made meanwhile converges (the latest version of each object, every
// delete), and [Reconciler.WaitUntilReconciled] counts none of them done
// before. A failing setup is tried again after the retry backoff
// ([WithRetry], [WithRetryJitter]; [RetryAfter] sets the delay), every
// error alike; health is Degraded ("setup failing") and the reconcilers
// table's row is in state setting-up with the error and the attempts so
// far. setup's ctx ends when the hive stops and obeys
// [WithOperationTimeout]; a panic is recovered into an error unless
// [WithoutPanicRecovery]. Pause holds setup as it holds operations.
// Failures of setup do not count towards [WithCircuitBreaker]. The default,
// nil, has no setup step.
func WithSetup(setup func(ctx context.Context, txn statedb.ReadTxn) error) Option {
	return func(o *options) {
		o.by = "WithSetup"
		o.setup = setup
	}
}

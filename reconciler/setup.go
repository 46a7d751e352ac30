package reconciler

import (
	"context"
	"fmt"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/backoff"
	"github.com/converge-go/converge/reconciler/internal/prune"
	"github.com/converge-go/converge/reconciler/internal/setup"
	"github.com/converge-go/converge/reconciler/internal/work"
	"github.com/converge-go/converge/tables"
)

// setUp runs WithSetup's function before the loop's first round (see
// package setup): until it returns nil no operation or prune starts.
// Changes to the table wait in the change feed, opened before, and are
// read by the first round. It returns false if ctx ended first.
func (r *reconciler[Obj]) setUp(ctx context.Context, s *setup.Step, p *prune.Schedule) bool {
	if r.opts.setup == nil {
		return true
	}
	return s.Run(ctx, setup.Config{
		Gate: r.gate,
		Attempt: func(ctx context.Context) error {
			txn := r.db.ReadTxn()
			return r.call(ctx, "setup", func(ctx context.Context) error {
				r.gate.Entered()
				return r.opts.setup(ctx, txn)
			})
		},
		Backoff: func(attempts int) time.Duration {
			return backoff.Wait(attempts, r.opts.retryMin, r.opts.retryMax, r.opts.retryJitter, r.clock.rand())
		},
		RetryAfter: work.RetryDelay,
		Report:     func(s setup.Step, paused bool) { r.reportSetup(s, p, paused) },
		Log:        r.log,
	})
}

// reportSetup says, while the setup step has not succeeded, that the
// reconciler is setting up, or that setup fails (Degraded, with its
// error), or that it is paused, in health and the reconcilers table. The
// first round reports anew.
func (r *reconciler[Obj]) reportSetup(s setup.Step, p *prune.Schedule, paused bool) {
	state := tables.StateSettingUp
	switch {
	case paused:
		state = tables.StatePaused
		r.rep.health.OK("Paused")
	case s.Err != nil:
		r.rep.health.Degraded(fmt.Sprintf("setup failing: %d attempt(s)", s.Attempts), fmt.Errorf("setup failing: %w", s.Err))
	default:
		r.rep.health.OK("Setting up")
	}
	if r.rep.info != nil {
		txn := r.db.ReadTxn()
		lc := r.queue
		row := r.infoRow(p, state, r.objects.Table.NumObjects(txn), lc.Figures().Retrying, 0, 0, lc.Lows().Since)
		row.SetupAttempts = s.Attempts
		if s.Err != nil {
			row.SetupError = s.Err.Error()
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

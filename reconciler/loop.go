package reconciler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
)

// loop is the state of the reconcile job while it runs. What outlives a
// stop (the keys' lifecycles, the change iterator) belongs to the
// reconciler; the loop holds the reading position and the figures.
type loop[Obj any] struct {
	r      *reconciler[Obj]
	exec   *executor[Obj]
	prune  pruneSchedule
	health healthReporter

	own   ownWrites       // revisions of the statuses commits wrote
	watch <-chan struct{} // closed when the table has changes not read
	work  []op[Obj]       // collect's buffer

	limiterErr error           // why the round limiter's last Wait failed, or nil
	gateErr    error           // why the loop started before its tables were initialized
	gateWatch  <-chan struct{} // while gateErr is set: closed when one of those tables is
	wasPaused  bool            // whether the last round ran paused

	reported struct{ failing, inFlight int } // as last given to the metrics
	figures  commitFigures                   // of the last commit
	totals   totals                          // since the loop started, for the reconcilers table
	failLog  failLog
}

// run is the reconcile job: it waits for something to do and runs a round,
// until ctx ends. It returns nil on a normal stop.
func (r *reconciler[Obj]) run(ctx context.Context, health cell.Health) error {
	opened, err := r.changes.open()
	if err != nil {
		return fmt.Errorf("reading the changes of table %q: %w", r.table.Name(), err)
	}
	if !r.started {
		r.started, r.backlog = true, opened // what the table holds now waits behind fresh changes
	}
	l := &loop[Obj]{r: r, watch: closedChan,
		health: healthReporter{health: health}, prune: newPruneSchedule(r)}
	r.gate.setStopping(false)
	l.exec = newExecutor(ctx, r)
	defer l.stopped()
	defer l.prune.stop()
	retry := retryTimer{}
	defer retry.stop()
	if !l.startGate(ctx, health) {
		return nil
	}
	for {
		paused, pauseChanged := r.gate.state()
		watch, retryC := l.watch, retry.C()
		if l.exec.room() <= 0 || paused {
			watch, retryC = nil, nil // read nothing new; commit what finishes
		}
		if paused != l.wasPaused || (watch != nil && len(r.keys.queued) > 0) {
			pauseChanged = closedChan // a round now
		}
		select {
		case <-ctx.Done():
			return nil
		case <-pauseChanged:
		case <-watch:
		case <-retryC:
		case <-l.exec.finished():
		case <-l.prune.initialized():
			l.prune.setInitialized()
		case <-l.prune.tick():
			l.prune.request()
		case <-l.prune.retry():
			l.prune.request()
		case <-r.pruneRequests:
			l.prune.request()
		case <-l.gateWatch:
			l.gateWatch = nil // checkGate sets it again if need be
		}
		if paused, _ = r.gate.state(); !paused {
			l.waitForLimiter(ctx)
		}
		if ctx.Err() != nil {
			return nil
		}
		l.round(ctx, paused)
		l.wasPaused = paused
		retry.set(r, l.exec.room() > 0)
	}
}

// round runs the stages once, in order. While paused it collects nothing
// and does not prune: it commits what finished and reports.
func (l *loop[Obj]) round(ctx context.Context, paused bool) {
	now, txn := l.r.now(), l.r.db.ReadTxn()
	room := l.exec.room()
	if paused {
		room = 0
	}
	work := l.collect(txn, now, room)                                    // 1. queued, fresh, retries, deferred
	finished := l.exec.operate(ctx, txn, work)                           // 2. started at the gate; what finished
	outcome := l.commit(cutShort(finished, ctx.Err() != nil), l.r.now()) // 3. statuses written, keys settled
	if !paused {
		l.pruneIfDue(ctx) // 4. no operation starts meanwhile
	}
	l.report(txn, work, outcome, l.r.now(), paused) // 5. progress, metrics, tables, health
}

// stopped ends a run of the loop: it stops the executor, commits what
// finished and queues what did not for the next start (the feed has moved
// past those changes), closes the feed, and marks the reconciler stopped.
func (l *loop[Obj]) stopped() {
	r := l.r
	r.gate.setStopping(true)
	left := l.exec.stop() // waits for the operations under way to return
	l.commit(cutShort(left, true), r.now())
	r.progress.update(l.progressRev(), r.keys.retryLowWatermark())
	r.changes.close()
	if r.info != nil {
		txn := r.db.ReadTxn()
		r.info.write(r.db, l.info(StateStopped, r.table.NumObjects(txn), r.keys.retrying, 0, r.keys.oldestSince()), r.keys.changes())
	}
}

// cutShort returns ops, with the failures marked as not run if cut: ops
// cut short by a stop fail because of it, which is not an outcome, and
// are queued for the next start with their attempts kept.
func cutShort[Obj any](ops []op[Obj], cut bool) []op[Obj] {
	for i := range ops {
		if cut && ops[i].err != nil {
			ops[i].ran = false
		}
	}
	return ops
}

// waitForLimiter paces rounds with the round limiter, if any. A limiter
// whose Wait fails for any reason but ctx (its owner made it unusable while
// the reconciler runs) does not stop the reconciler: the round goes ahead
// unpaced and health reports the error until the limiter works again.
func (l *loop[Obj]) waitForLimiter(ctx context.Context) {
	lim := l.r.opts.roundLimiter
	if lim == nil {
		return
	}
	err := lim.Wait(ctx)
	if err != nil && ctx.Err() != nil {
		return
	}
	if err != nil && l.limiterErr == nil {
		l.r.log.Error("Round limiter fails; rounds go on without it", "error", err)
	}
	if err != nil {
		err = errors.Join(errRoundLimiter, err)
	}
	l.limiterErr = err
}

var errRoundLimiter = errors.New("round limiter")

// retryTimer wakes the loop when the earliest retry is due.
type retryTimer struct{ t *time.Timer }

func (t *retryTimer) C() <-chan time.Time {
	if t.t == nil {
		return nil
	}
	return t.t.C
}

// set arms the timer for the earliest retry, if any can be taken. While
// the executor has no room no retry could be started, so the timer is left
// off; the next finished operation wakes the loop instead. The timer fires
// a jitter window past the earliest retry, so that retries spread by jitter
// are taken in few rounds, not one each.
func (t *retryTimer) set(r interface {
	nextRetry() (time.Duration, bool)
}, canTake bool) {
	if t.t != nil {
		t.t.Stop()
	}
	d, ok := r.nextRetry()
	if !ok || !canTake {
		return
	}
	if t.t == nil {
		t.t = time.NewTimer(d)
		return
	}
	t.t.Reset(d)
}

func (t *retryTimer) stop() {
	if t.t != nil {
		t.t.Stop()
	}
}

// nextRetry returns how long until the retry timer should fire.
func (r *reconciler[Obj]) nextRetry() (time.Duration, bool) {
	due, ok := r.keys.nextDue()
	if !ok {
		return 0, false
	}
	window := durationOf(float64(r.opts.retryMin) * r.opts.retryJitter)
	return durationOf(float64(due) - float64(r.now().UnixNano()) + float64(window)), true
}

// startGate waits, before the loop's first round, for the tables of
// WithStartAfter to be initialized. It returns false if ctx ended. If it
// gave up waiting, l.gateErr says why until the tables are initialized.
func (l *loop[Obj]) startGate(ctx context.Context, health cell.Health) bool {
	r := l.r
	if !r.opts.startAfter {
		return true
	}
	var timeout <-chan time.Time
	if r.opts.startTimeout > 0 {
		t := time.NewTimer(r.opts.startTimeout)
		defer t.Stop()
		timeout = t.C
	}
	for {
		waiting, watch := l.uninitialized(r.db.ReadTxn())
		if len(waiting) == 0 {
			return true
		}
		health.OK("Waiting for tables to be initialized: " + strings.Join(waiting, ", "))
		select {
		case <-ctx.Done():
			return false
		case <-watch:
		case <-timeout:
			l.gateWatch = watch
			l.gateErr = fmt.Errorf("started after %s without waiting any longer for tables to be initialized: %s",
				r.opts.startTimeout, strings.Join(waiting, ", "))
			r.log.Warn("Reconciler started before its tables were initialized", "tables", waiting, "waited", r.opts.startTimeout)
			return true
		}
	}
}

// uninitialized returns the names of the tables of WithStartAfter not yet
// initialized in txn, and a channel closed when the first of them is.
func (l *loop[Obj]) uninitialized(txn statedb.ReadTxn) ([]string, <-chan struct{}) {
	var (
		names []string
		watch <-chan struct{}
	)
	tables := append([]statedb.TableMeta{l.r.table}, l.r.opts.startTables...)
	for _, t := range tables {
		if ok, w := t.Initialized(txn); !ok {
			names = append(names, t.Name())
			if watch == nil {
				watch = w
			}
		}
	}
	return names, watch
}

// checkGate clears l.gateErr once the tables it names are initialized;
// until then l.gateWatch wakes the loop when one of them is.
func (l *loop[Obj]) checkGate(txn statedb.ReadTxn) {
	if l.gateErr == nil {
		return
	}
	waiting, watch := l.uninitialized(txn)
	if len(waiting) == 0 {
		l.gateErr, l.gateWatch = nil, nil
		return
	}
	l.gateWatch = watch
}

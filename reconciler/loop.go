package reconciler

import (
	"context"
	"errors"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
)

// loop is the state of the reconcile job. Every wake-up runs one round of
// four stages, in this order, on the job's goroutine:
//
//  1. collect: read the table's changes and the retries that are due;
//  2. operate: apply them (see operator: inline, or on workers);
//  3. commit: write the outcome of finished operations back to the table
//     and queue failures for retry;
//  4. report: progress for WaitUntilReconciled, metrics and health.
//
// Between commit and report a prune runs when one is due (see
// pruneSchedule).
type loop[Obj any] struct {
	r       *reconciler[Obj]
	changes statedb.ChangeIterator[Obj]
	op      operator[Obj]
	prune   pruneSchedule
	health  healthReporter

	work     []op[Obj]          // collected this round
	deferred deferredQueue[Obj] // changes taken after fresh ones
	backlog  statedb.Revision   // changes up to this revision were in the table at the first start
	lastRev  statedb.Revision   // last change read
	own      ownWrites          // revisions of the statuses commits wrote
	watch    <-chan struct{}    // closed when the table has new changes

	limiterErr error           // why the round limiter's last Wait failed, or nil
	gateErr    error           // why the loop started before its tables were initialized
	gateWatch  <-chan struct{} // while gateErr is set: closed when one of those tables is

	interrupted []op[Obj] // returned by operate when the job was stopped
	wasPaused   bool      // whether the last round ran paused

	// reported holds the figures last given to the metrics.
	reported struct{ failing, inFlight int }

	adds, retried int           // taken for work this round, and of those, retries
	figures       commitFigures // of the last commit
	totals        totals        // since the loop started, for the reconcilers table
	failLog       failLog
}

// loop runs until ctx ends. It returns nil on a normal stop.
func (r *reconciler[Obj]) loop(ctx context.Context, health cell.Health) error {
	l := &loop[Obj]{
		r:       r,
		changes: r.changes,
		health:  healthReporter{health: health},
		prune:   newPruneSchedule(r),
		watch:   closedChan,
	}
	if !r.startedOnce {
		r.startedOnce = true
		r.backlog = r.table.Revision(r.db.ReadTxn())
	}
	l.backlog = r.backlog
	l.op = newOperator(ctx, r)
	defer l.stopped()
	defer l.carryOver()
	defer l.prune.stop()

	retryTimer := retryTimer[Obj]{r: r}
	defer retryTimer.stop()
	if !l.startGate(ctx, health) {
		return nil
	}

	for {
		paused, pauseChanged := r.pause.state()
		watch, retry := l.watch, retryTimer.C()
		if !l.op.hasRoom() {
			watch = nil // read no more changes until work drains
		}
		if paused {
			watch, retry = nil, nil // start nothing; commit what finishes
		}
		if paused != l.wasPaused {
			pauseChanged = closedChan // report the change with a round now
		}
		select {
		case <-ctx.Done():
			return nil
		case <-pauseChanged:
		case <-watch:
		case <-retry:
		case <-l.op.finished():
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
		if paused, _ = r.pause.state(); !paused {
			l.waitForLimiter(ctx)
		}
		if ctx.Err() != nil {
			return nil
		}
		l.round(ctx, paused)
		l.wasPaused = paused
		if ctx.Err() != nil {
			return nil
		}
		retryTimer.set(l.op.hasRoom())
	}
}

// round runs the four stages once. While paused it collects nothing and
// does not prune: it only commits what finished and reports.
func (l *loop[Obj]) round(ctx context.Context, paused bool) {
	r := l.r
	txn := r.db.ReadTxn()

	// 1. Collect.
	l.work, l.adds, l.retried = l.work[:0], 0, 0
	budget := l.op.room()
	if paused {
		budget = 0
	}
	l.collect(txn, r.now(), budget)

	// 2. Operate: returns the operations whose outcome is known, which with
	// workers are those finished since the last round.
	done := l.op.operate(ctx, txn, l.work)
	if ctx.Err() != nil {
		l.interrupted = done // some may not have run: carried over
		return
	}

	// 3. Commit.
	failed := l.commit(done, r.now())
	l.op.release(done)
	clear(l.work) // drop object references until the next round
	l.work = l.work[:0]

	if l.prune.due() && !paused {
		// A snapshot taken now, not the round's: the commit may have
		// marked Done an object written back after the round began, and
		// the prune must not remove it from the target.
		ptxn := r.db.ReadTxn()
		l.op.pruning(ptxn)
		l.prune.run(ctx, ptxn)
	}

	// 4. Report.
	l.report(txn, len(done), failed, r.now(), paused)
}

// stopped marks the reconciler stopped in the reconcilers table.
func (l *loop[Obj]) stopped() {
	r := l.r
	if r.info == nil {
		return
	}
	txn := r.db.ReadTxn()
	failing := r.retries.len()
	r.info.write(r.db, l.info(StateStopped, r.table.NumObjects(txn), failing, 0, r.retries.oldestSince()), r.retries.changes())
}

// carryOver stops the operator and deals with the work that it and an
// interrupted round had not committed: operations that succeeded are
// committed now, so that they are not redone; the rest is kept for the next
// run of the loop if the job starts again (hive stop, then start), since
// the change iterator has moved past those changes. A retry among them
// stops counting as running until it is taken again.
func (l *loop[Obj]) carryOver() {
	r := l.r
	left := l.op.stop() // waits for operations in flight to return
	left = append(left, l.interrupted...)
	l.interrupted = nil
	succeeded := 0
	for i := range left {
		if left[i].ran && left[i].err == nil {
			left[succeeded], left[i] = left[i], left[succeeded]
			succeeded++
		}
	}
	l.commit(left[:succeeded], r.now())
	for l.deferred.len() > 0 {
		d := l.deferred.pop() // carried work is checked again when taken
		st := r.getStatus(d.obj)
		key := r.keyOf(d.obj)
		if c, ok := r.carried[key]; ok && c.rev > d.rev {
			continue
		}
		left = append(left, op[Obj]{key: key, obj: d.obj, rev: d.rev, statusID: st.ID(), since: st.UpdatedAt})
	}
	for i := range left[succeeded:] {
		o := &left[succeeded+i]
		if o.key == "" {
			o.key = r.keyOf(o.obj)
		}
		if o.attempts > 0 {
			r.retries.settle(o.key)
		}
		if r.carried == nil {
			r.carried = map[string]*retry[Obj]{}
		}
		if c, ok := r.carried[o.key]; ok && c.rev > o.rev {
			continue // a newer version of the object is carried already
		}
		r.carried[o.key] = &retry[Obj]{
			key: o.key, obj: o.obj, rev: o.rev, delete: o.delete,
			statusID: o.statusID, since: o.since, attempts: o.attempts,
			err: o.err, first: o.since,
		}
	}
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
type retryTimer[Obj any] struct {
	r *reconciler[Obj]
	t *time.Timer
}

func (t *retryTimer[Obj]) C() <-chan time.Time {
	if t.t == nil {
		return nil
	}
	return t.t.C
}

// set arms the timer for the earliest retry, if any can be taken. While
// every worker slot is taken no retry could be dispatched, so the timer is
// left off; the next finished operation wakes the loop instead. The timer
// fires a jitter window past the earliest retry, so that retries spread by
// jitter are taken in few rounds, not one each.
func (t *retryTimer[Obj]) set(canTake bool) {
	r := t.r
	if t.t != nil {
		t.t.Stop()
	}
	at, ok := r.retries.next()
	if !ok || !canTake {
		return
	}
	d := at.Sub(r.now()) + time.Duration(float64(r.opts.retryMin)*r.opts.retryJitter)
	if t.t == nil {
		t.t = time.NewTimer(d)
		return
	}
	t.t.Reset(d)
}

func (t *retryTimer[Obj]) stop() {
	if t.t != nil {
		t.t.Stop()
	}
}

// closedChan is a closed channel: receiving from it never blocks.
var closedChan = func() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

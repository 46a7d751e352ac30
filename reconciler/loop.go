package reconciler

import (
	"context"
	"iter"
	"runtime"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
)

// loop is the state of the reconcile job. A round has four stages: collect
// work from the table's changes and from due retries; run the operations;
// commit their outcome (statuses, retries); report progress, health and
// metrics. With one worker the stages run in order on this goroutine. With
// more, run hands work to a workerPool, and commit takes whatever finished.
type loop[Obj any] struct {
	r    *reconciler[Obj]
	exec executor[Obj]
	pool *workerPool[Obj] // nil with concurrency 1

	work     []op[Obj] // collected this round, not yet run or dispatched
	lastRev  statedb.Revision
	needKeys bool // ops carry their primary key (worker mode)

	health   healthReporter
	coalesce time.Duration // how long after the earliest retry to wake
}

func (l *loop[Obj]) add(o op[Obj]) { l.work = append(l.work, o) }

// loop runs until ctx ends. It returns nil on a normal stop.
func (r *reconciler[Obj]) loop(ctx context.Context, health cell.Health) error {
	changes := r.changes
	defer changes.Close()

	l := &loop[Obj]{
		r:        r,
		exec:     executor[Obj]{r: r},
		health:   healthReporter{health: health},
		coalesce: time.Duration(float64(r.opts.retryMin) * r.opts.retryJitter),
	}
	if r.opts.concurrency > 1 {
		l.pool = newWorkerPool(ctx, r)
		l.needKeys = true
		defer l.pool.stop()
	}

	var pruneTick <-chan time.Time
	if r.opts.pruneInterval > 0 {
		t := time.NewTicker(r.opts.pruneInterval)
		defer t.Stop()
		pruneTick = t.C
	}
	retryTimer := time.NewTimer(time.Hour)
	retryTimer.Stop()
	defer retryTimer.Stop()
	// A failed prune is tried again after the retry backoff, so that the
	// target and health recover without waiting for the prune interval.
	pruneRetry := time.NewTimer(time.Hour)
	pruneRetry.Stop()
	defer pruneRetry.Stop()
	pruneFailures := 0

	_, initWatch := r.table.Initialized(r.db.ReadTxn())
	initialized, prune := false, false
	changesWatch := closedChan

	for {
		var results <-chan struct{}
		watch := changesWatch
		if l.pool != nil {
			results = l.pool.finished
			if l.pool.full() {
				watch = nil // read no more changes until work drains
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-watch:
		case <-retryTimer.C:
		case <-results:
		case <-initWatch:
			initialized, initWatch = true, nil
			prune = prune || r.opts.pruneInterval > 0
		case <-pruneTick:
			prune = true
		case <-r.pruneRequests:
			prune = true
		case <-pruneRetry.C:
			prune = true
		}
		if lim := r.opts.roundLimiter; lim != nil {
			if err := lim.Wait(ctx); err != nil {
				return nil
			}
		}

		txn := r.db.ReadTxn()
		now := r.now()
		var failed int
		if l.pool == nil {
			failed, changesWatch = l.roundInline(ctx, txn, changes, now)
		} else {
			failed, changesWatch, txn = l.roundWorkers(changes, now)
		}
		if ctx.Err() != nil {
			return nil
		}
		if prune && initialized {
			// Prune runs here, between rounds, even with workers: the
			// operations in flight are all for objects in txn's snapshot,
			// and no new ones start until it returns, so it cannot remove
			// what an operation is applying for a newer object.
			prune = false
			r.lastPruneErr = r.prune(ctx, txn)
			pruneRetry.Stop()
			if r.lastPruneErr == nil {
				pruneFailures = 0
			} else {
				pruneFailures++
				pruneRetry.Reset(backoff(pruneFailures, r.opts.retryMin, r.opts.retryMax, r.opts.retryJitter, r.rand()))
			}
		}
		l.report(txn, failed)

		retryTimer.Stop()
		// With every worker slot taken, due retries cannot be dispatched;
		// the next finished operation wakes the loop instead of the timer.
		if at, ok := r.retries.next(); ok && (l.pool == nil || !l.pool.full()) {
			// Wait a jitter window past the earliest retry so that retries
			// spread by jitter are still taken in few rounds, not one each.
			retryTimer.Reset(at.Sub(r.now()) + l.coalesce)
		}
	}
}

// roundInline runs one round with operations on the loop's goroutine.
func (l *loop[Obj]) roundInline(ctx context.Context, txn statedb.ReadTxn, changes statedb.ChangeIterator[Obj], now time.Time) (int, <-chan struct{}) {
	r := l.r
	l.work = l.work[:0]
	seq, watch := changes.Next(txn)
	budget := r.opts.roundSize
	budget -= l.collectChanges(seq, budget, now)
	l.collectRetries(txn, now, budget)

	l.exec.run(ctx, txn, l.work)
	if ctx.Err() != nil {
		return 0, watch
	}
	failed := r.commit(l.work, nil, r.now())
	clear(l.work) // drop object references until the next round
	r.progress.update(l.lastRev, r.retries.lowWatermark())
	return failed, watch
}

// roundWorkers commits what the workers finished and hands them new work.
// It returns the snapshot it read changes from, for the rest of the round.
func (l *loop[Obj]) roundWorkers(changes statedb.ChangeIterator[Obj], now time.Time) (int, <-chan struct{}, statedb.ReadTxn) {
	r, p := l.r, l.pool
	// Let workers that are about to finish do so first, so that one write
	// transaction commits several results rather than one each. A few
	// yields cost under a microsecond when nothing else is runnable; with 64
	// busy workers they raised throughput by a third (go run ./benchmarks
	// -workloads slow).
	for range gatherYields {
		runtime.Gosched()
	}
	done := p.takeFinished()
	failed := r.commit(done, p.superseded, r.now())
	l.work = l.work[:0]
	p.release(done, l.add)
	clear(done)

	// Read changes in a snapshot taken after the commit, so that the objects
	// just committed are seen with their new status and not as still pending.
	txn := r.db.ReadTxn()
	watch := closedChan
	if budget := p.room(); budget > 0 {
		var seq iter.Seq2[statedb.Change[Obj], statedb.Revision]
		seq, watch = changes.Next(txn)
		budget -= l.collectChanges(seq, budget, now)
		l.collectRetries(txn, now, budget)
	}
	p.dispatch(l.work)
	clear(l.work)

	rev := l.lastRev
	if low, busy := p.lowestInFlight(); busy {
		rev = min(rev, low-1)
	}
	r.progress.update(rev, r.retries.lowWatermark())
	return failed, watch, txn
}

// gatherYields is how many times a worker round yields before taking the
// finished operations.
const gatherYields = 3

// closedChan is a closed channel: receiving from it never blocks.
var closedChan = func() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

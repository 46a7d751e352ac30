package reconciler

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tracing"
)

// refreshBatch is how many objects one write transaction marks Refreshing.
const refreshBatch = 1000

// refreshLoop periodically marks Done objects whose status is older than the
// refresh interval as Refreshing, so the reconcile job updates them again.
// It reads its settings from Configure's (settings.refreshing), not r.opts,
// and sweeps at once when they change.
func (r *reconciler[Obj]) refreshLoop(ctx context.Context, health cell.Health) error {
	var last statedb.Revision
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		set, changed := r.settings.refreshing()
		if set.interval <= 0 {
			// The job runs anyway, so that the health tree has the same
			// children as the StateDB reconciler's, whose refresh is on by
			// default: scripts and dashboards read it by job name.
			// Configure may turn it on.
			health.OK("Refreshing is off")
			select {
			case <-ctx.Done():
				return nil
			case <-changed:
				timer.Reset(0)
				continue
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-changed: // Configure: sweep now, with the new settings
			timer.Reset(0)
			continue
		}
		if !r.waitWhilePaused(ctx, health) {
			return nil
		}
		sweepCtx, span := ctx, tracing.Span(nil)
		if r.opts.tracer != nil {
			sweepCtx, span = r.startSpan(ctx, tracing.Start{Kind: tracing.Refresh})
		}
		wait, marked, err := r.refreshSweep(sweepCtx, &last, set)
		if span != nil {
			span.End(tracing.End{Err: err, Marked: marked})
		}
		if ctx.Err() != nil {
			return nil
		}
		r.rep.info.refreshed(r.clock.now())
		timer.Reset(wait)
		if err != nil {
			// The limiter was made unusable while running: the sweep
			// stopped where it was and goes on at the next one.
			r.log.Error("Refresh limiter fails; refresh sweeps stop early", "error", err)
			health.Degraded(fmt.Sprintf("Refresh limiter failing; next refresh in %s", wait.Round(time.Millisecond)), err)
			continue
		}
		health.OK(fmt.Sprintf("Next refresh in %s", wait.Round(time.Millisecond)))
	}
}

// waitWhilePaused returns once the reconciler is not paused (true), or ctx
// ended (false).
func (r *reconciler[Obj]) waitWhilePaused(ctx context.Context, health cell.Health) bool {
	for {
		paused, changed := r.gate.State()
		if !paused {
			return true
		}
		health.OK("Paused")
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
}

type refreshCandidate[Obj any] struct {
	obj Obj
	rev statedb.Revision
}

// dueRechecks takes the re-checks due at now (Unix ns, see
// keyqueue.Rechecks) and returns those whose object still carries the Done
// status they were asked with, as txn holds it, for markRefreshing. A
// changed or deleted object has had, or has, its own turn.
func (r *reconciler[Obj]) dueRechecks(txn statedb.ReadTxn, now int64) (due []refreshCandidate[Obj]) {
	for _, c := range r.keys.lifecycles.Take(keyqueue.Rechecks, math.MaxInt, now, nil) {
		cur, rev, found := r.objects.lookup(txn, c.Obj)
		if !found {
			continue
		}
		if st := r.objects.getStatus(cur); st.Kind == status.KindDone && st.ID() == c.StatusID {
			due = append(due, refreshCandidate[Obj]{cur, rev})
		}
	}
	return due
}

// refreshSweep walks the objects in revision order from last+1, marking the
// stale Done ones Refreshing, and returns when to sweep next. Objects are
// visited in the order they were last written, so the walk stops at the
// first one that is not yet stale. It returns how many it marked, and an
// error if the limiter's Wait failed for another reason than ctx ending.
func (r *reconciler[Obj]) refreshSweep(ctx context.Context, last *statedb.Revision, set refreshSettings) (wait time.Duration, marked int, err error) {
	interval := set.interval
	wait = interval
	now := r.clock.now()
	var batch []refreshCandidate[Obj]
	txn := r.db.ReadTxn()
	for obj, rev := range r.objects.table.LowerBound(txn, statedb.ByRevision[Obj](*last+1)) {
		st := r.objects.getStatus(obj)
		if age := now.Sub(st.UpdatedAt); age < interval {
			wait = interval - age
			break
		}
		*last = rev
		if st.Kind != status.KindDone {
			continue
		}
		if lim := set.limiter; lim != nil && !lim.Allow() {
			marked += r.markRefreshing(batch)
			batch = batch[:0]
			if err := lim.Wait(ctx); err != nil {
				*last = rev - 1 // this object is still to be marked
				if ctx.Err() != nil {
					return wait, marked, nil
				}
				return min(wait, set.retryMax), marked, fmt.Errorf("refresh limiter: %w", err)
			}
		}
		batch = append(batch, refreshCandidate[Obj]{obj, rev})
		if len(batch) == refreshBatch {
			marked += r.markRefreshing(batch)
			batch = batch[:0]
		}
	}
	return wait, marked + r.markRefreshing(batch), nil
}

// markRefreshing sets the candidates that have not changed since they were
// read to Refreshing, in one write transaction, and returns how many.
func (r *reconciler[Obj]) markRefreshing(batch []refreshCandidate[Obj]) int {
	if len(batch) == 0 {
		return 0
	}
	now := r.clock.now()
	wtxn := r.db.WriteTxn(r.objects.table)
	marked := 0
	for _, c := range batch {
		obj := r.objects.withStatus(c.obj, status.RefreshingAt(now))
		switch _, had, err := r.objects.table.CompareAndSwap(wtxn, c.rev, obj); {
		case err == nil && had:
			marked++
		case err == nil: // StateDB stored nothing: obj has no primary key
			r.noKey("a refresh mark (setStatus removed it)", obj)
		}
	}
	wtxn.Commit()
	if marked > 0 && r.rep.metrics.refresh != nil {
		r.rep.metrics.refresh.RefreshMarked(r.moduleID, r.opts.name, marked)
	}
	return marked
}

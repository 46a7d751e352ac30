package operate

import (
	"context"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler/internal/work"
	"github.com/converge-go/converge/tracing"
)

// runBatches applies ops with the batch operations: deletes first, then
// updates, or both in one ProcessBatch call (Config.Processor). The
// Batcher binds each result to its op, whatever order the implementation
// leaves the entries in.
func (e *Runner[Obj]) runBatches(ctx context.Context, txn statedb.ReadTxn, ops []work.Op[Obj]) {
	c := &e.cfg
	for i := range ops {
		o := &ops[i]
		if o.Delete {
			e.deletes = append(e.deletes, o)
		} else {
			o.Updated = c.Objects.Clone(o.Obj)
			if c.Drift.Applies(o.Refresh, o.Delete) && !e.checkEntry(ctx, txn, o) {
				continue // WithDriftCheck: it leaves the batch
			}
			e.upserts = append(e.upserts, o)
		}
	}
	if c.Processor {
		e.batch(ctx, txn, ProcessBatch, e.deletes, e.upserts)
	} else {
		e.batch(ctx, txn, DeleteBatch, e.deletes, nil)
		e.batch(ctx, txn, UpdateBatch, nil, e.upserts)
	}
	clear(e.deletes) // drop references to objects until the next call
	clear(e.upserts)
	e.deletes, e.upserts = e.deletes[:0], e.upserts[:0]
}

// batch makes one batch call with the ops of deleted and upserted
// (DeleteBatch takes only the former, UpdateBatch only the latter) and
// records each one's outcome. Its duration is reported as metrics.OpUpdate
// if it has updates, else as metrics.OpDelete.
func (e *Runner[Obj]) batch(ctx context.Context, txn statedb.ReadTxn, call Call, deleted, upserted []*work.Op[Obj]) {
	n := len(deleted) + len(upserted)
	if n == 0 || ctx.Err() != nil {
		return
	}
	c := &e.cfg
	start := time.Now()
	started := start.UnixNano()
	for _, o := range deleted {
		o.Started = started
	}
	for _, o := range upserted {
		o.Started = started
	}
	defer c.Batch.Drop()
	ok, probe := e.enter()
	if !ok {
		return
	}
	name, what, kind := metrics.OpUpdate, "update batch", tracing.UpdateBatch
	switch {
	case call == DeleteBatch:
		name, what, kind = metrics.OpDelete, "delete batch", tracing.DeleteBatch
	case call == ProcessBatch:
		what, kind = "process batch", tracing.ProcessBatch
		if len(upserted) == 0 {
			name = metrics.OpDelete
		}
	}
	reports := e.callContext()
	ctx = reports
	var span tracing.Span
	if c.Tracer != nil {
		s := tracing.Start{Kind: kind, Objects: n}
		if call == ProcessBatch {
			s.Deletes = len(deleted)
		}
		ctx, span = e.startSpan(ctx, s)
	}
	err := c.Caller.Call(ctx, what, func(ctx context.Context) error {
		c.Gate.Entered()
		if err := c.Batch.Call(ctx, txn, call, deleted, upserted); err != nil {
			return err
		}
		return batchTimeout(ctx)
	})
	c.Metrics.ReconciliationDuration(c.Module, c.Name, name, time.Since(start))
	drift, _ := reports.Reports.Close() // batches ask for re-checks with BatchEntry.RecheckAfter
	if ctx.Err() != nil && err == nil {
		// Cut short by a stop: an entry it never got to has a nil Result
		// and did not run. Nothing is known; all are tried again.
		if span != nil {
			span.End(tracing.End{Outcome: metrics.OutcomeError, Err: ctx.Err()})
		}
		return
	}
	c.Batch.Bind(err)
	var refreshed *work.Op[Obj]
	failed := 0
	for _, ops := range [2][]*work.Op[Obj]{deleted, upserted} {
		for _, o := range ops {
			if !o.Ran {
				o.Err, o.Ran = work.ErrEntryLost, true
			}
			if refreshed == nil && o.Refresh && !o.Delete {
				refreshed = o
			}
			if o.Err != nil {
				failed++
			}
		}
	}
	if span != nil {
		span.End(tracing.End{Outcome: work.Outcome(err, c.Caller.Timeout), Err: err, Failed: failed})
	}
	// Drift reported by a batch counts if the batch refreshed anything: its
	// first refresh carries it.
	if drift > 0 && refreshed != nil {
		refreshed.Drift += drift
	}
	if c.Breaker != nil {
		for _, ops := range [2][]*work.Op[Obj]{deleted, upserted} {
			for _, o := range ops {
				e.recordOutcome(ctx, o, probe)
			}
		}
	}
}

// checkEntry runs the drift check for o, an update of a batch being built
// (which applies), as one start of its own at the gate, and reports
// whether o goes into the batch: it drifted and is to be repaired. One
// that does not has its outcome, or never ran (the gate closed) and goes
// back to the queue.
func (e *Runner[Obj]) checkEntry(ctx context.Context, txn statedb.ReadTxn, o *work.Op[Obj]) bool {
	if ctx.Err() != nil {
		return false
	}
	ok, probe := e.enter()
	if !ok {
		return false
	}
	o.Started = time.Now().UnixNano()
	call := e.callContext()
	update, err := e.checkOne(call, txn, o)
	call.Reports.Close()
	o.Err, o.Ran = err, true
	if e.cfg.Breaker != nil {
		e.recordOutcome(ctx, o, probe) // may put it back: held
	}
	if update && o.Ran {
		o.Ran = false // the batch's to run
		return true
	}
	return false
}

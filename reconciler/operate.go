package reconciler

import (
	"context"
	"errors"
	"runtime/debug"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler/internal/breaker"
	"github.com/converge-go/converge/reconciler/internal/drift"
	"github.com/converge-go/converge/reconciler/internal/executor"
	"github.com/converge-go/converge/reconciler/internal/opreport"
	"github.com/converge-go/converge/reconciler/internal/work"
	"github.com/converge-go/converge/tracing"
)

// runner calls the operations, with the context of the loop's run, and
// records in each op what its call reported (ReportRepaired,
// RecheckAfter). The loop has one and so does every worker;
// its buffers are reused from one call to the next.
type runner[Obj any] struct {
	r       *reconciler[Obj]
	ctx     context.Context
	calls   opreport.Contexts
	updates []BatchEntry[Obj]
	deletes []BatchEntry[Obj]
	ops     []*work.Op[Obj] // the ops of the batch running, in the order given
}

func newRunner[Obj any](ctx context.Context, r *reconciler[Obj]) *runner[Obj] {
	return &runner[Obj]{r: r, ctx: ctx}
}

// callContext returns the context of one operation or batch call: the
// run's, carrying that call's reports (see opreport.Contexts).
func (e *runner[Obj]) callContext() *opreport.Context { return e.calls.Next(e.ctx) }

// run applies ops, recording each outcome. Each operation starts only if
// the gate allows it then; the ops it does not start (the gate closed, or
// the run's context ended) keep ran == false.
func (e *runner[Obj]) run(txn statedb.ReadTxn, ops []work.Op[Obj]) {
	ctx := e.ctx
	if e.r.target.batchOps != nil {
		e.runBatches(ctx, txn, ops)
		return
	}
	r := e.r
	// One clock read per operation: each operation's end is the next one's
	// start.
	start := time.Now()
	for i := range ops {
		o := &ops[i]
		if !o.Delete {
			o.Updated = r.objects.Clone(o.Obj)
		}
		if ctx.Err() != nil {
			return
		}
		ok, probe := r.enter()
		if !ok {
			return
		}
		o.Started = start.UnixNano()
		name, kind := metrics.OpUpdate, tracing.Update
		if o.Delete {
			name, kind = metrics.OpDelete, tracing.Delete
		}
		call := e.callContext()
		opCtx, span := context.Context(call), tracing.Span(nil)
		if r.opts.tracer != nil {
			opCtx, span = r.startSpan(call, tracing.Start{Kind: kind, Key: r.objects.OpKey(o), Revision: o.Rev, Attempt: max(o.Attempt, 1)})
		}
		switch {
		case o.Delete:
			o.Err = r.call(opCtx, name, func(ctx context.Context) error {
				r.gate.Entered()
				return r.target.ops.Delete(ctx, txn, o.Rev, o.Obj)
			})
		case r.target.drift != nil && !r.checkFirst(opCtx, txn, o):
			// WithDriftCheck: in sync or drift left; o.Err is the check's error
		default:
			o.Err = r.call(opCtx, name, func(ctx context.Context) error {
				if o.Checked == drift.NotChecked {
					r.gate.Entered()
				}
				return r.target.ops.Update(ctx, txn, o.Rev, o.Updated)
			})
		}
		o.Ran = true
		drift, recheck := call.Reports.Close()
		if span != nil {
			span.End(tracing.End{Outcome: work.Outcome(o.Err, r.opts.operationTimeout), Err: o.Err})
		}
		if drift > 0 && o.Refresh && !o.Delete {
			o.Drift = drift
		}
		if recheck > 0 && o.Err == nil && !o.Delete {
			o.Recheck = recheck
		}
		if r.breaker != nil {
			r.recordOutcome(ctx, o, probe)
		}
		end := time.Now()
		r.rep.metrics.ReconciliationDuration(r.moduleID, r.opts.name, name, end.Sub(start))
		start = end
	}
}

// enter asks the gate for the start of one operation, batch call or drift
// check, as it is made; with a circuit breaker, one the gate refuses may
// start as the breaker's probe.
func (r *reconciler[Obj]) enter() (ok, probe bool) {
	if r.gate.Enter() {
		return true, false
	}
	if r.breaker != nil && r.gate.EnterProbe() {
		return true, true
	}
	return false, false
}

// runBatches applies ops with BatchOperations: deletes first, then updates,
// or both in one ProcessBatch call if the batch operations implement
// BatchProcessor. Each entry carries its op, so results are matched to
// objects whatever order the implementation leaves the entries in.
func (e *runner[Obj]) runBatches(ctx context.Context, txn statedb.ReadTxn, ops []work.Op[Obj]) {
	r := e.r
	for i := range ops {
		o := &ops[i]
		if o.Delete {
			e.deletes = append(e.deletes, BatchEntry[Obj]{Object: o.Obj, Revision: o.Rev, original: o})
		} else {
			o.Updated = r.objects.Clone(o.Obj)
			if r.target.drift.Applies(o.Refresh, o.Delete) && !e.checkEntry(ctx, txn, o) {
				continue // WithDriftCheck: it leaves the batch
			}
			e.updates = append(e.updates, BatchEntry[Obj]{Object: o.Updated, Revision: o.Rev, original: o})
		}
	}
	if r.target.processor != nil {
		e.batch(ctx, txn, processBatch, e.deletes, e.updates)
	} else {
		e.batch(ctx, txn, deleteBatch, e.deletes, nil)
		e.batch(ctx, txn, updateBatch, nil, e.updates)
	}
	clear(e.deletes) // drop references to objects until the next call
	clear(e.updates)
	e.deletes, e.updates = e.deletes[:0], e.updates[:0]
}

// batch makes one batch call with the entries of deleted and upserted
// (DeleteBatch takes only the former, UpdateBatch only the latter) and
// records each entry's outcome in its op. Its duration is reported as
// metrics.OpUpdate if it has updates, else as metrics.OpDelete.
func (e *runner[Obj]) batch(ctx context.Context, txn statedb.ReadTxn, call batchCall, deleted, upserted []BatchEntry[Obj]) {
	n := len(deleted) + len(upserted)
	if n == 0 || ctx.Err() != nil {
		return
	}
	r := e.r
	// The implementation may reorder or overwrite the entries: keep the
	// ops as given.
	ops := e.ops[:0]
	start := time.Now()
	started := start.UnixNano()
	for i := range deleted {
		ops = append(ops, deleted[i].original)
		deleted[i].original.Started = started
	}
	for i := range upserted {
		ops = append(ops, upserted[i].original)
		upserted[i].original.Started = started
	}
	defer func() { clear(ops); e.ops = ops[:0] }()
	ok, probe := r.enter()
	if !ok {
		return
	}
	name, what, kind := metrics.OpUpdate, "update batch", tracing.UpdateBatch
	switch {
	case call == deleteBatch:
		name, what, kind = metrics.OpDelete, "delete batch", tracing.DeleteBatch
	case call == processBatch:
		what, kind = "process batch", tracing.ProcessBatch
		if len(upserted) == 0 {
			name = metrics.OpDelete
		}
	}
	reports := e.callContext()
	ctx = reports
	var span tracing.Span
	if r.opts.tracer != nil {
		s := tracing.Start{Kind: kind, Objects: n}
		if call == processBatch {
			s.Deletes = len(deleted)
		}
		ctx, span = r.startSpan(ctx, s)
	}
	err := r.call(ctx, what, func(ctx context.Context) error {
		r.gate.Entered()
		if err := r.target.batch(ctx, txn, call, deleted, upserted); err != nil {
			return err
		}
		return batchTimeout(ctx)
	})
	r.rep.metrics.ReconciliationDuration(r.moduleID, r.opts.name, name, time.Since(start))
	drift, _ := reports.Reports.Close() // batches ask for re-checks with BatchEntry.RecheckAfter
	if ctx.Err() != nil && err == nil {
		// Cut short by a stop: an entry it never got to has a nil Result
		// and did not run. Nothing is known; all are tried again.
		if span != nil {
			span.End(tracing.End{Outcome: metrics.OutcomeError, Err: ctx.Err()})
		}
		return
	}
	bind(deleted, err)
	bind(upserted, err)
	var refreshed *work.Op[Obj]
	failed := 0
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
	if span != nil {
		span.End(tracing.End{Outcome: work.Outcome(err, r.opts.operationTimeout), Err: err, Failed: failed})
	}
	// Drift reported by a batch counts if the batch refreshed anything: its
	// first refresh carries it.
	if drift > 0 && refreshed != nil {
		refreshed.Drift += drift
	}
	if r.breaker != nil {
		for _, o := range ops {
			r.recordOutcome(ctx, o, probe)
		}
	}
}

// recordOutcome gives the outcome of o, which ran (as the probe if probe
// is set) with the run's context ctx, to the circuit breaker. A failure the
// breaker holds is no outcome: o goes back to the queue as if it had not
// started; one it spares counts no attempt. A failure once ctx ended is the stop's doing (commit takes it
// for no outcome), and says nothing of the target.
func (r *reconciler[Obj]) recordOutcome(ctx context.Context, o *work.Op[Obj], probe bool) {
	if o.Err != nil && ctx.Err() != nil {
		return
	}
	key := func() string {
		if o.Key != "" {
			return o.Key
		}
		k, _ := r.objects.KeyOf(o.Obj)
		return k
	}
	again := o.Err != nil && o.LastErr != nil && o.Err.Error() == o.LastErr.Error()
	lost := o.Err == work.ErrEntryLost
	switch r.breaker.Record(key, breaker.Outcome{Err: o.Err, Lost: lost, Again: again, Probe: probe}, r.clock.now()) {
	case breaker.Held:
		o.Ran, o.Err, o.Recheck = false, nil, 0
	case breaker.Spared:
		o.Spared = true
	}
}

// bind records the outcome of each entry still bound to its op (see
// BatchEntry) in that op, the first time the op is met: its Result, or the
// batch call's err if it has none; and an update's object as the call left
// it, with the re-check it asked for if it succeeded.
func bind[Obj any](entries []BatchEntry[Obj], err error) {
	for i := range entries {
		if o := entries[i].original; o != nil && !o.Ran {
			o.Err, o.Ran = entryErr(entries[i].Result, err), true
			if !o.Delete {
				o.Updated = entries[i].Object
				if o.Err == nil {
					o.Recheck = entries[i].RecheckAfter
				}
			}
		}
	}
}

// call invokes one operation, named what for the log, with the operation
// timeout and, unless disabled, turns a panic into an error wrapping
// ErrPanic, logged with its stack. fn does not escape, so the closures the
// callers pass do not allocate.
func (r *reconciler[Obj]) call(ctx context.Context, what string, fn func(context.Context) error) (err error) {
	if r.opts.operationTimeout > 0 {
		parent := ctx
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.opts.operationTimeout)
		defer cancel()
		defer func() {
			// Mark an error of an operation whose own timeout expired,
			// to tell it from one of a deadline of the operation's own.
			if err != nil && ctx.Err() == context.DeadlineExceeded && parent.Err() == nil {
				err = work.Timeout(err)
			}
		}()
	}
	if r.opts.recoverPanics {
		defer func() {
			if v := recover(); v != nil {
				err = r.recovered(what, v)
			}
		}()
	}
	return fn(ctx)
}

// recovered logs a recovered panic with its stack and returns it as an
// error wrapping ErrPanic. It must be called from the deferred function.
func (r *reconciler[Obj]) recovered(what string, v any) error {
	r.log.Error("Reconciler operation panicked; recorded as its error",
		"operation", what, "panic", v, "stack", string(debug.Stack()))
	return work.Panicked(v)
}

// batchTimeout returns ctx's error if it ran out while a batch ran, so that
// call marks it as the batch's timeout; nil otherwise. Entries the batch
// did not get to then fail with it.
func batchTimeout(ctx context.Context) error {
	if ctx.Err() == context.DeadlineExceeded {
		return ctx.Err()
	}
	return nil
}

// entryErr is the outcome of a batch entry: its Result, or the batch's
// error (a panic, a timeout, or what ProcessBatch returned) if it has
// none. When the batch timed out, an entry that failed with its context's
// deadline timed out too.
func entryErr(result, batchErr error) error {
	switch {
	case result == nil:
		return batchErr
	case batchErr != nil && errors.Is(result, context.DeadlineExceeded) && work.IsTimeout(batchErr):
		return work.Timeout(result)
	}
	return result
}

// ReportRepaired lets an operation say that it repaired n pieces of drift:
// Prune counting what it removed from the target that should not have been
// there, or Update counting what it had to put right in the target for an
// object marked Refreshing. Call it with the context the operation was
// given, any number of times before it returns. The counts go to the
// metrics (drift repaired, by source "prune" or "refresh"; see
// [metrics.PruneStats] and [metrics.CommitStats]) and to the reconcilers
// table. With a context that does not come from a reconciler, or once the
// operation has returned, it does nothing. It is safe for concurrent use
// and does not allocate.
func ReportRepaired(ctx context.Context, n int) {
	if r := opreport.From(ctx); r != nil {
		r.Repaired(n)
	}
}

// RecheckAfter lets Update ask for its object to be reconciled again d
// after it succeeds, for targets that drift, leases that expire or state
// that must be polled: the object is recorded Done as usual, and once d
// has passed it is marked Refreshing (as [WithRefreshing] marks it) if it
// still carries that Done status, so Update is called for it again. A
// newer version of the object, or its delete, replaces the re-check; so
// does a later call, the last one made during the operation counting.
// A failing Update asks for nothing: its retry does. Call it with the
// context Update was given, before Update returns; with any other context,
// or once Update has returned, it does nothing.
// UpdateBatch (and ProcessBatch) asks per entry with
// [BatchEntry.RecheckAfter] instead.
//
// Re-checks wait in the reconciler's memory: they survive a stop and a
// start of the hive's jobs but not the process, and a reconciler paused
// when one falls due marks the object on Resume. d <= 0 asks for nothing.
// It is safe for concurrent use and does not allocate.
func RecheckAfter(ctx context.Context, d time.Duration) {
	if r := opreport.From(ctx); r != nil {
		r.RecheckAfter(d)
	}
}

// checkOne runs the drift check for o (which applies) with ctx, the
// context of its call, as r.call runs an operation, once the caller has
// passed the gate (the check ends the start: gate.entered), and records
// its verdict in o. It reports whether Update must follow (the object
// drifted and is to be repaired) and the check's error.
func (r *reconciler[Obj]) checkOne(ctx context.Context, txn statedb.ReadTxn, o *work.Op[Obj]) (update bool, err error) {
	var v drift.Verdict
	err = r.call(ctx, "drift check", func(ctx context.Context) (err error) {
		r.gate.Entered()
		v, update, err = r.target.drift.Run(ctx, txn, o.Rev, o.Obj, o.Unapplied)
		return err
	})
	if err != nil {
		return false, err
	}
	o.Checked = v
	return update, nil
}

// checkFirst runs the drift check (WithDriftCheck) for o, an op of the
// inline loop or a worker that passed the gate, if it applies, and reports
// whether Update follows; if not, o.Err is the check's error, if any.
func (r *reconciler[Obj]) checkFirst(ctx context.Context, txn statedb.ReadTxn, o *work.Op[Obj]) (update bool) {
	if !r.target.drift.Applies(o.Refresh, o.Delete) {
		return true
	}
	update, o.Err = r.checkOne(ctx, txn, o)
	return update
}

// checkEntry runs the drift check for o, an update of a batch being built
// (which applies), as one start of its own at the gate, and reports
// whether o goes into the batch: it drifted and is to be repaired. One
// that does not has its outcome, or never ran (the gate closed) and goes
// back to the queue.
func (e *runner[Obj]) checkEntry(ctx context.Context, txn statedb.ReadTxn, o *work.Op[Obj]) bool {
	r := e.r
	if ctx.Err() != nil {
		return false
	}
	ok, probe := r.enter()
	if !ok {
		return false
	}
	o.Started = time.Now().UnixNano()
	call := e.callContext()
	update, err := r.checkOne(call, txn, o)
	call.Reports.Close()
	o.Err, o.Ran = err, true
	if r.breaker != nil {
		r.recordOutcome(ctx, o, probe) // may put it back: held
	}
	if update && o.Ran {
		o.Ran = false // the batch's to run
		return true
	}
	return false
}

// newExecutor returns the operate stage of one run of the loop (see
// package executor): r's ops, run by runners with ctx, the run's context,
// each starting when r's gate allows.
func newExecutor[Obj any](ctx context.Context, r *reconciler[Obj]) *executor.Executor[work.Op[Obj]] {
	return executor.New(executor.Config[work.Op[Obj]]{
		Concurrency: r.opts.concurrency, // bounded by validate
		RoundSize:   r.opts.roundSize,
		Batch:       r.target.batchOps != nil,
		Gate:        r.gate,
		Inline:      func() func(statedb.ReadTxn, []work.Op[Obj]) { return newRunner(ctx, r).run },
		Worker: func() func([]work.Op[Obj]) {
			run := newRunner(ctx, r)
			return func(ops []work.Op[Obj]) { run.run(r.db.ReadTxn(), ops) }
		},
	})
}

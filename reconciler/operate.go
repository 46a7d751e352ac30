package reconciler

import (
	"context"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/executor"
	"github.com/converge-go/converge/reconciler/internal/operate"
	"github.com/converge-go/converge/reconciler/internal/opreport"
	"github.com/converge-go/converge/reconciler/internal/work"
	"github.com/converge-go/converge/tracing"
)

// newExecutor returns the operate stage of one run of the loop (see
// packages executor and operate): r's ops, run by runners with ctx, the
// run's context, each starting when r's gate allows.
func newExecutor[Obj any](ctx context.Context, r *reconciler[Obj]) *executor.Executor[work.Op[Obj]] {
	return executor.New(executor.Config[work.Op[Obj]]{
		Concurrency: r.opts.concurrency, // bounded by validate
		RoundSize:   r.opts.roundSize,
		Batch:       r.target.batchOps != nil,
		Gate:        r.gate,
		Inline:      func() func(statedb.ReadTxn, []work.Op[Obj]) { return r.newRunner(ctx).Run },
		Worker: func() func([]work.Op[Obj]) {
			run := r.newRunner(ctx)
			return func(ops []work.Op[Obj]) { run.Run(r.db.ReadTxn(), ops) }
		},
	})
}

// newRunner returns a runner of r's operations with ctx, the run's
// context: the loop's, or a worker's.
func (r *reconciler[Obj]) newRunner(ctx context.Context) *operate.Runner[Obj] {
	cfg := operate.Config[Obj]{
		Objects: &r.objects, Drift: r.target.drift, Gate: r.gate, Breaker: r.breaker,
		Caller: r.caller(), Now: r.clock.now, Tracer: r.opts.tracer,
		Metrics: r.rep.metrics.Metrics, Module: r.moduleID, Name: r.opts.name,
	}
	if r.target.batchOps != nil {
		cfg.Batch, cfg.Processor = &batcher[Obj]{t: &r.target}, r.target.processor != nil
	} else {
		cfg.Ops = r.target.ops
	}
	return operate.New(ctx, cfg)
}

// caller calls the operations with the operation timeout and, unless
// WithoutPanicRecovery, recovers their panics.
func (r *reconciler[Obj]) caller() operate.Caller {
	return operate.Caller{Timeout: r.opts.operationTimeout, Recover: r.opts.recoverPanics, Log: r.log}
}

// call invokes one operation of r, named what for the log (see
// operate.Caller.Call).
func (r *reconciler[Obj]) call(ctx context.Context, what string, fn func(context.Context) error) error {
	return r.caller().Call(ctx, what, fn)
}

// recovered logs a recovered panic with its stack and returns it as an
// error wrapping ErrPanic. It must be called from the deferred function.
func (r *reconciler[Obj]) recovered(what string, v any) error { return r.caller().Recovered(what, v) }

// startSpan starts a span of the reconciler's tracer, which must be set.
func (r *reconciler[Obj]) startSpan(ctx context.Context, s tracing.Start) (context.Context, tracing.Span) {
	s.Module, s.Name = r.moduleID.String(), r.opts.name
	return r.opts.tracer.Start(ctx, s)
}

// batcher makes a runner's batch calls (operate.Batcher): each op of a
// call is one BatchEntry, which carries the op so that its result is
// bound to it whatever order the implementation leaves the entries in.
// Its buffers are reused from one call to the next.
type batcher[Obj any] struct {
	t                 *target[Obj]
	deleted, upserted []BatchEntry[Obj]
}

func (b *batcher[Obj]) Call(ctx context.Context, txn statedb.ReadTxn, call operate.Call, deleted, upserted []*work.Op[Obj]) error {
	for _, o := range deleted {
		b.deleted = append(b.deleted, BatchEntry[Obj]{Object: o.Obj, Revision: o.Rev, original: o})
	}
	for _, o := range upserted {
		b.upserted = append(b.upserted, BatchEntry[Obj]{Object: o.Updated, Revision: o.Rev, original: o})
	}
	return b.t.batch(ctx, txn, call, b.deleted, b.upserted)
}

func (b *batcher[Obj]) Bind(err error) {
	bind(b.deleted, err)
	bind(b.upserted, err)
}

func (b *batcher[Obj]) Drop() {
	clear(b.deleted) // drop references to objects until the next call
	clear(b.upserted)
	b.deleted, b.upserted = b.deleted[:0], b.upserted[:0]
}

// bind records the outcome of each entry still bound to its op (see
// BatchEntry) in that op, the first time the op is met: its Result, or the
// batch call's err if it has none; and an update's object as the call left
// it, with the re-check it asked for if it succeeded.
func bind[Obj any](entries []BatchEntry[Obj], err error) {
	for i := range entries {
		if o := entries[i].original; o != nil && !o.Ran {
			o.Err, o.Ran = operate.EntryErr(entries[i].Result, err), true
			if !o.Delete {
				o.Updated = entries[i].Object
				if o.Err == nil {
					o.Recheck = entries[i].RecheckAfter
				}
			}
		}
	}
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

package operate

import (
	"context"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler/internal/drift"
	"github.com/converge-go/converge/reconciler/internal/work"
	"github.com/converge-go/converge/tracing"
)

// Run applies ops, recording each outcome. Each operation starts only if
// the gate allows it then; the ops it does not start (the gate closed, or
// the run's context ended) keep Ran false.
func (e *Runner[Obj]) Run(txn statedb.ReadTxn, ops []work.Op[Obj]) {
	ctx := e.ctx
	if e.cfg.Batch != nil {
		e.runBatches(ctx, txn, ops)
		return
	}
	c := &e.cfg
	// One clock read per operation: each operation's end is the next one's
	// start.
	start := time.Now()
	for i := range ops {
		o := &ops[i]
		if !o.Delete {
			o.Updated = c.Objects.Clone(o.Obj)
		}
		if ctx.Err() != nil {
			return
		}
		ok, probe := e.enter()
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
		if c.Tracer != nil {
			opCtx, span = e.startSpan(call, tracing.Start{Kind: kind, Key: c.Objects.OpKey(o), Revision: o.Rev, Attempt: max(o.Attempt, 1)})
		}
		switch {
		case o.Delete:
			o.Err = c.Caller.Call(opCtx, name, func(ctx context.Context) error {
				c.Gate.Entered()
				return c.Ops.Delete(ctx, txn, o.Rev, o.Obj)
			})
		case c.Drift != nil && !e.checkFirst(opCtx, txn, o):
			// WithDriftCheck: in sync or drift left; o.Err is the check's error
		default:
			o.Err = c.Caller.Call(opCtx, name, func(ctx context.Context) error {
				if o.Checked == drift.NotChecked {
					c.Gate.Entered()
				}
				return c.Ops.Update(ctx, txn, o.Rev, o.Updated)
			})
		}
		o.Ran = true
		drift, recheck := call.Reports.Close()
		if span != nil {
			span.End(tracing.End{Outcome: work.Outcome(o.Err, c.Caller.Timeout), Err: o.Err})
		}
		if drift > 0 && o.Refresh && !o.Delete {
			o.Drift = drift
		}
		if recheck > 0 && o.Err == nil && !o.Delete {
			o.Recheck = recheck
		}
		if c.Breaker != nil {
			e.recordOutcome(ctx, o, probe)
		}
		end := time.Now()
		c.Metrics.ReconciliationDuration(c.Module, c.Name, name, end.Sub(start))
		start = end
	}
}

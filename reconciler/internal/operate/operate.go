// Package operate is the second stage of a reconciler's round: it calls
// the user's operations for a round's work, one at a time or in batches,
// each as the gate allows it to start, and records in each op what its
// call returned and reported (see [Runner]). The loop has a Runner, and so
// does every worker of package executor: this is where the reconciler's
// concurrent calls are made, with their timeouts, panics and spans.
package operate

import (
	"context"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler/internal/breaker"
	"github.com/converge-go/converge/reconciler/internal/drift"
	"github.com/converge-go/converge/reconciler/internal/gate"
	"github.com/converge-go/converge/reconciler/internal/opreport"
	"github.com/converge-go/converge/reconciler/internal/work"
	"github.com/converge-go/converge/tracing"
)

// Ops is the user's operations on one object (reconciler.Operations).
type Ops[Obj any] interface {
	Update(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, obj Obj) error
	Delete(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, obj Obj) error
}

// Batcher makes the user's batch calls (reconciler.BatchOperations) for a
// Runner: Call hands the batch operation of kind call the objects of
// deleted and upserted as its entries, Bind then records each entry's
// outcome in its op (those the call did not say are left not Ran), and
// Drop lets go of the entries. A Batcher belongs to one Runner.
type Batcher[Obj any] interface {
	Call(ctx context.Context, txn statedb.ReadTxn, call Call, deleted, upserted []*work.Op[Obj]) error
	Bind(err error)
	Drop()
}

// Call is the batch operation a batch call makes.
type Call uint8

const (
	DeleteBatch  Call = iota // BatchOperations.DeleteBatch
	UpdateBatch              // BatchOperations.UpdateBatch
	ProcessBatch             // BatchProcessor.ProcessBatch
)

// Config is what a Runner works with, set by New. All but Ops or Batch,
// Drift, Breaker and Tracer are required.
type Config[Obj any] struct {
	Objects *work.Objects[Obj]
	Ops     Ops[Obj]     // the operations on one object; nil with batches
	Batch   Batcher[Obj] // the batch operations; nil without
	// Processor says that Batch makes one ProcessBatch call of a batch's
	// deletes and updates, instead of a DeleteBatch and an UpdateBatch.
	Processor bool
	Drift     *drift.Check[Obj] // WithDriftCheck's; nil without
	Gate      *gate.Gate
	Breaker   *breaker.Breaker // nil without
	Caller    Caller
	Now       func() time.Time // the breaker's clock
	Tracer    tracing.Tracer   // nil without
	Metrics   metrics.Metrics  // each call's duration
	Module    cell.FullModuleID
	Name      string // the reconciler's
}

// Runner runs ops with the context of the loop's run, and records in each
// op what its call returned and reported (ReportRepaired, RecheckAfter).
// Make one with New; its buffers are reused from one Run to the next. A
// Runner is not safe for concurrent use: each worker has its own.
type Runner[Obj any] struct {
	cfg     Config[Obj]
	ctx     context.Context
	calls   opreport.Contexts
	deletes []*work.Op[Obj] // the batch being built
	upserts []*work.Op[Obj]
}

// New returns a Runner of cfg's operations with ctx, the run's context.
func New[Obj any](ctx context.Context, cfg Config[Obj]) *Runner[Obj] {
	return &Runner[Obj]{cfg: cfg, ctx: ctx}
}

// callContext returns the context of one operation or batch call: the
// run's, carrying that call's reports (see opreport.Contexts).
func (e *Runner[Obj]) callContext() *opreport.Context { return e.calls.Next(e.ctx) }

// startSpan starts a span of the tracer, which must be set.
func (e *Runner[Obj]) startSpan(ctx context.Context, s tracing.Start) (context.Context, tracing.Span) {
	s.Module, s.Name = e.cfg.Module.String(), e.cfg.Name
	return e.cfg.Tracer.Start(ctx, s)
}

// enter asks the gate for the start of one operation, batch call or drift
// check, as it is made; with a circuit breaker, one the gate refuses may
// start as the breaker's probe.
func (e *Runner[Obj]) enter() (ok, probe bool) {
	g := e.cfg.Gate
	if g.Enter() {
		return true, false
	}
	if e.cfg.Breaker != nil && g.EnterProbe() {
		return true, true
	}
	return false, false
}

// recordOutcome gives the outcome of o, which ran (as the probe if probe
// is set) with the run's context ctx, to the circuit breaker. A failure the
// breaker holds is no outcome: o goes back to the queue as if it had not
// started; one it spares counts no attempt. A failure once ctx ended is
// the stop's doing (commit takes it for no outcome), and says nothing of
// the target.
func (e *Runner[Obj]) recordOutcome(ctx context.Context, o *work.Op[Obj], probe bool) {
	if o.Err != nil && ctx.Err() != nil {
		return
	}
	key := func() string {
		if o.Key != "" {
			return o.Key
		}
		k, _ := e.cfg.Objects.KeyOf(o.Obj)
		return k
	}
	again := o.Err != nil && o.LastErr != nil && o.Err.Error() == o.LastErr.Error()
	lost := o.Err == work.ErrEntryLost
	switch e.cfg.Breaker.Record(key, breaker.Outcome{Err: o.Err, Lost: lost, Again: again, Probe: probe}, e.cfg.Now()) {
	case breaker.Held:
		o.Ran, o.Err, o.Recheck = false, nil, 0
	case breaker.Spared:
		o.Spared = true
	}
}

// checkOne runs the drift check for o (which applies) with ctx, the
// context of its call, as Caller.Call runs an operation, once the caller
// has passed the gate (the check ends the start: Gate.Entered), and
// records its verdict in o. It reports whether Update must follow (the
// object drifted and is to be repaired) and the check's error.
func (e *Runner[Obj]) checkOne(ctx context.Context, txn statedb.ReadTxn, o *work.Op[Obj]) (update bool, err error) {
	var v drift.Verdict
	err = e.cfg.Caller.Call(ctx, "drift check", func(ctx context.Context) (err error) {
		e.cfg.Gate.Entered()
		v, update, err = e.cfg.Drift.Run(ctx, txn, o.Rev, o.Obj, o.Unapplied)
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
func (e *Runner[Obj]) checkFirst(ctx context.Context, txn statedb.ReadTxn, o *work.Op[Obj]) (update bool) {
	if !e.cfg.Drift.Applies(o.Refresh, o.Delete) {
		return true
	}
	update, o.Err = e.checkOne(ctx, txn, o)
	return update
}

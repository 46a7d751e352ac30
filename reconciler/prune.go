package reconciler

import (
	"context"
	"fmt"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/internal/ident"
	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler/internal/backoff"
	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/reconciler/internal/opreport"
	"github.com/converge-go/converge/reconciler/internal/prune"
	"github.com/converge-go/converge/reconciler/internal/work"
	"github.com/converge-go/converge/tracing"
)

// newPruneSchedule returns the prune schedule of one run of the loop (see
// package prune): prunes wait for the table and those of WithStartAfter,
// and a failed prune is tried again after the retry backoff in force.
func newPruneSchedule[Obj any](r *reconciler[Obj]) prune.Schedule {
	return prune.NewSchedule(r.db.ReadTxn(), prune.Config{
		Tables:   append([]statedb.TableMeta{r.objects.Table}, r.opts.startTables...),
		Interval: r.opts.pruneInterval,
		Prune:    r.prune,
		Backoff: func(failures int) time.Duration {
			return backoff.Wait(failures, r.opts.retryMin, r.opts.retryMax, r.opts.retryJitter, r.clock.rand())
		},
	})
}

// pruneNow prunes, the schedule being due, with a snapshot taken once the
// gate is closed: an object the last commit marked Done is in it, and the
// prune must not remove it from the target. In that snapshot every table
// prunes wait for is initialized, or the prune waits until they are. Its
// span is the child of a round's, as a prune is the loop's round of its
// own.
func (r *reconciler[Obj]) pruneNow(ctx context.Context, p *prune.Schedule) {
	if !r.gate.BeginPrune() {
		return // paused since the round began: the prune stays due
	}
	defer r.gate.EndPrune()
	if !r.gate.EnterPrune() {
		return // paused since beginPrune: the prune stays due
	}
	if r.commit.Landed() != nil {
		r.awaitLanded() // the statuses of the rounds before, written with the table's other reconcilers
	}
	txn := r.db.ReadTxn()
	if waiting, watch := p.Tables.Uninitialized(txn); len(waiting) > 0 {
		r.gate.Entered() // no prune: a table was made uninitialized again
		p.Initialized(waiting, watch)
		p.Tables.Wait(waiting, watch)
		return
	}
	cut := ident.Last() // as the snapshot was taken
	if r.opts.tracer != nil {
		var round tracing.Span
		ctx, round = r.startSpan(ctx, tracing.Start{Kind: tracing.Round})
		defer round.End(tracing.End{})
	}
	p.Run(ctx, txn)
	if p.Held() {
		return // WithPruneGuard held it: Prune removed nothing, nothing to mark
	}
	// Marked once Prune returned, as before it: no operation's outcome is
	// committed meanwhile (the loop's goroutine commits).
	r.queue.Add(keyqueue.Change[Obj]{As: keyqueue.Pruned, Absent: func(obj Obj) bool {
		_, _, found := r.objects.Lookup(txn, obj)
		return !found
	}})
	r.collect.SawPrune(txn, cut)
}

// prune hands the whole desired set to Operations.Prune (or the batch
// operations' Prune, see Register) and reports the outcome. A failure is
// returned for health. Nothing asks for a prune when there is no pruner:
// Register refuses periodic pruning then, and Reconciler.Prune does
// nothing.
func (r *reconciler[Obj]) prune(ctx context.Context, txn statedb.ReadTxn) prune.Result {
	var reports opreport.Reports
	ctx = opreport.With(ctx, &reports)
	var span tracing.Span
	if r.opts.tracer != nil {
		ctx, span = r.startSpan(ctx, tracing.Start{Kind: tracing.Prune})
	}
	start := time.Now()
	var hold *prune.Hold
	planning := false
	err := r.call(ctx, "prune", func(ctx context.Context) error {
		r.gate.Entered() // begun with enterPrune
		if g := r.target.guard; g != nil {
			// WithPruneGuard: the plan first, which may hold the prune.
			planning = true
			h, err := g.Check(ctx, txn, r.objects.Table.All(txn), r.log)
			if planning, hold = false, h; hold != nil || err != nil {
				return err
			}
		}
		return r.target.pruner.Prune(ctx, txn, r.objects.Table.All(txn))
	})
	if planning {
		err = fmt.Errorf("plan: %w", err) // the plan panicked
	}
	if hold != nil {
		if span != nil {
			span.End(tracing.End{})
		}
		return prune.Result{Held: hold}
	}
	res := prune.Result{At: start, Duration: time.Since(start), Repaired: reports.TakeRepaired()}
	if span != nil {
		span.End(tracing.End{Outcome: work.Outcome(err, r.opts.operationTimeout), Err: err, Repaired: res.Repaired})
	}
	r.rep.metrics.PruneDuration(r.moduleID, r.opts.name, res.Duration)
	r.rep.metrics.PruneError(r.moduleID, r.opts.name, err)
	if r.rep.metrics.Prune != nil {
		r.rep.metrics.Prune.Pruned(r.moduleID, r.opts.name, metrics.PruneStats{
			Outcome: work.Outcome(err, r.opts.operationTimeout), Repaired: res.Repaired,
		})
	}
	if err != nil {
		r.log.Warn("Reconciler prune failed; trying again after the retry backoff", "error", err)
		res.Err = fmt.Errorf("prune: %w", err)
	}
	return res
}

// Prune implements Reconciler. Without anything to prune with (see
// Register) it does nothing.
func (r *reconciler[Obj]) Prune() {
	if r.target.pruner == nil {
		return
	}
	select {
	case r.pruneRequests <- struct{}{}:
	default:
	}
}

// ConfirmPrune implements Reconciler.
func (r *reconciler[Obj]) ConfirmPrune() {
	if g := r.target.guard; g != nil && g.Confirm() {
		r.Prune() // the held prune, as soon as possible
	}
}

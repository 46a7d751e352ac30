package reconciler

import (
	"context"
	"fmt"
	"iter"
	"math"

	"github.com/cilium/statedb"
)

// WithPruneGuard holds a prune that would remove a large part of the
// target (cilium/cilium#45989: load-balancer backends pruned to zero).
// plan is a dry run of Prune: given the desired set Prune would be given
// (the same transaction and objects), it returns how many entries of the
// target the prune would remove and how many the target holds now, and
// changes nothing. Before each prune the reconciler calls plan, within the
// prune's context, timeout and panic recovery; the prune is held when
// remove > maxRemove (if maxRemove > 0) or remove > maxShare*held (if
// maxShare > 0). A held prune does not call Prune: health is Degraded with
// "prune held: would remove N of M (bound ...)", and the reconciler's row
// of the reconcilers table has PruneHeld, PruneHeldRemove and PruneHeldOf
// set (converge-inspect shows them). It is planned again whenever a prune
// is due again: on the prune interval, on [Reconciler.Prune], and after
// every round that handed changes to the operations, so the desired set
// growing back releases it (plan under the bounds: Prune runs, health
// recovers). [Reconciler.ConfirmPrune] lets the held prune run once,
// whatever the bounds. A plan that fails (or panics) fails the prune as a
// failed Prune does: nothing is removed and it is retried after the retry
// backoff.
//
// Off by default. At least one bound must be set: maxRemove must not be
// negative, maxShare must be in [0, 1] (0: no bound), plan must not be nil
// and the reconciler must be able to prune (see [Register]); otherwise
// Register returns an error wrapping [ErrInvalidConfig], as it does for a
// plan of another object type than the reconciler's.
func WithPruneGuard[Obj any](maxRemove int, maxShare float64,
	plan func(ctx context.Context, txn statedb.ReadTxn, objects iter.Seq2[Obj, statedb.Revision]) (remove, held int, err error)) Option {
	return func(o *options) {
		o.by = "WithPruneGuard"
		o.pruneGuard = func(r any) error {
			rec, ok := r.(*reconciler[Obj])
			switch {
			case !ok:
				return fmt.Errorf("WithPruneGuard: plan is for objects of type %T, the reconciler's are not: %w", *new(Obj), ErrInvalidConfig)
			case maxRemove < 0:
				return fmt.Errorf("WithPruneGuard: maxRemove must not be negative, got %d: %w", maxRemove, ErrInvalidConfig)
			case math.IsNaN(maxShare) || maxShare < 0 || maxShare > 1:
				return fmt.Errorf("WithPruneGuard: maxShare must be in [0, 1], got %v: %w", maxShare, ErrInvalidConfig)
			case maxRemove == 0 && maxShare == 0:
				return fmt.Errorf("WithPruneGuard: set maxRemove or maxShare, or both: %w", ErrInvalidConfig)
			case plan == nil:
				return fmt.Errorf("WithPruneGuard: plan must not be nil: %w", ErrInvalidConfig)
			case rec.target.pruner == nil:
				return fmt.Errorf("WithPruneGuard: the reconciler cannot prune (no Operations, and BatchOperations without a Prune method): %w", ErrInvalidConfig)
			}
			rec.target.guard = &pruneGuard[Obj]{plan: plan, maxRemove: maxRemove, maxShare: maxShare}
			return nil
		}
	}
}

// applyPruneGuard applies WithPruneGuard, if given.
func (r *reconciler[Obj]) applyPruneGuard() error {
	if r.opts.pruneGuard == nil {
		return nil
	}
	return r.opts.pruneGuard(r)
}

// pruneHold is a held prune: what its plan said and why it is held.
type pruneHold struct {
	remove, of int
	err        error // "prune held: ...", for health
}

// over reports whether a prune removing remove of held entries exceeds
// the bounds.
func (g *pruneGuard[Obj]) over(remove, held int) bool {
	return (g.maxRemove > 0 && remove > g.maxRemove) || (g.maxShare > 0 && float64(remove) > g.maxShare*float64(held))
}

// bound describes the bounds, for health.
func (g *pruneGuard[Obj]) bound() string {
	switch {
	case g.maxRemove > 0 && g.maxShare > 0:
		return fmt.Sprintf("at most %d and %v%% of the target", g.maxRemove, 100*g.maxShare)
	case g.maxRemove > 0:
		return fmt.Sprintf("at most %d", g.maxRemove)
	}
	return fmt.Sprintf("at most %v%% of the target", 100*g.maxShare)
}

// check plans the prune about to be made with objects, the desired set of
// txn, and returns the hold if it must wait, nil if Prune may be called
// (within the bounds, confirmed, or no guard). A confirmed hold, or one
// the plan released, ends here: the prune after a confirmed one that
// failed is planned and held anew. An error is the plan's.
func (g *pruneGuard[Obj]) check(ctx context.Context, txn statedb.ReadTxn, objects iter.Seq2[Obj, statedb.Revision]) (hold *pruneHold, confirmed bool, err error) {
	if g == nil {
		return nil, false, nil
	}
	remove, held, err := g.plan(ctx, txn, objects)
	switch {
	case err != nil:
		return nil, false, fmt.Errorf("plan: %w", err)
	case remove < 0 || held < 0:
		return nil, false, fmt.Errorf("plan returned remove=%d held=%d, want counts of zero or more", remove, held)
	}
	id := g.hold.Load()
	if !g.over(remove, held) {
		g.hold.Store(0)
		return nil, false, nil
	}
	if id != 0 && g.confirmed.Load() == id {
		g.hold.Store(0)
		return nil, true, nil
	}
	if id == 0 {
		g.hold.Store(g.holds.Add(1))
	}
	return &pruneHold{remove: remove, of: held,
		err: fmt.Errorf("prune held: would remove %d of %d (bound: %s); Reconciler.ConfirmPrune runs it", remove, held, g.bound())}, false, nil
}

// guardPrune plans the prune about to be made with the desired set of txn
// (see pruneGuard.check) and logs a hold that begins and a confirmed
// prune. It runs on the loop's goroutine, within the prune's call.
func (r *reconciler[Obj]) guardPrune(ctx context.Context, txn statedb.ReadTxn) (*pruneHold, error) {
	g := r.target.guard
	if g == nil {
		return nil, nil
	}
	was := g.hold.Load()
	hold, confirmed, err := g.check(ctx, txn, r.objects.table.All(txn))
	switch {
	case confirmed:
		r.log.Warn("Reconciler runs a held prune, confirmed with ConfirmPrune")
	case hold != nil && was == 0:
		r.log.Warn("Reconciler holds a prune that would remove much of the target; ConfirmPrune runs it",
			"remove", hold.remove, "held", hold.of, "bound", g.bound())
	case hold == nil && err == nil && was != 0:
		r.log.Info("Reconciler releases a held prune: its plan is within the bounds now")
	}
	return hold, err
}

package reconciler

import (
	"context"
	"fmt"
	"iter"
	"math"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/prune"
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
			rec.target.guard = prune.NewGuard(maxRemove, maxShare, plan)
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

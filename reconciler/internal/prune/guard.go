package prune

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"sync/atomic"

	"github.com/cilium/statedb"
)

// Hold is a held prune: what its plan said and why it is held.
type Hold struct {
	Remove, Of int
	Err        error // "prune held: ...", for health
}

// Guard is the guard of WithPruneGuard: its plan and bounds, read-only
// after NewGuard, and the hold in effect. The loop's goroutine plans and
// holds (Check); Confirm, from any goroutine, confirms: the atomics make
// it safe for concurrent use. A nil *Guard guards nothing.
type Guard[Obj any] struct {
	plan      func(ctx context.Context, txn statedb.ReadTxn, objects iter.Seq2[Obj, statedb.Revision]) (remove, held int, err error)
	maxRemove int
	maxShare  float64

	// hold identifies the hold in effect, 0 if none: a prune was held and
	// Prune not called since. Each hold has an identity of its own (from
	// holds), so that a confirmation of an earlier hold, stored as a later
	// one began, confirms nothing. It lasts across stops of the hive.
	hold      atomic.Uint64
	confirmed atomic.Uint64 // the hold Confirm last confirmed
	holds     atomic.Uint64 // holds so far
}

// NewGuard returns a guard holding a prune that plan says would remove
// more than maxRemove entries (if maxRemove > 0) or more than maxShare of
// those the target holds (if maxShare > 0). The caller checks the bounds.
func NewGuard[Obj any](maxRemove int, maxShare float64,
	plan func(ctx context.Context, txn statedb.ReadTxn, objects iter.Seq2[Obj, statedb.Revision]) (remove, held int, err error)) *Guard[Obj] {
	return &Guard[Obj]{plan: plan, maxRemove: maxRemove, maxShare: maxShare}
}

// Confirm lets the hold in effect, if any, run once whatever the bounds,
// and reports whether there was one.
func (g *Guard[Obj]) Confirm() bool {
	if id := g.hold.Load(); id != 0 {
		g.confirmed.Store(id)
		return true
	}
	return false
}

// over reports whether a prune removing remove of held entries exceeds
// the bounds.
func (g *Guard[Obj]) over(remove, held int) bool {
	return (g.maxRemove > 0 && remove > g.maxRemove) || (g.maxShare > 0 && float64(remove) > g.maxShare*float64(held))
}

// bound describes the bounds, for health.
func (g *Guard[Obj]) bound() string {
	switch {
	case g.maxRemove > 0 && g.maxShare > 0:
		return fmt.Sprintf("at most %d and %v%% of the target", g.maxRemove, 100*g.maxShare)
	case g.maxRemove > 0:
		return fmt.Sprintf("at most %d", g.maxRemove)
	}
	return fmt.Sprintf("at most %v%% of the target", 100*g.maxShare)
}

// Check plans the prune about to be made with objects, the desired set
// of txn, and returns the hold if it must wait, nil if Prune may be called
// (within the bounds, confirmed, or no guard); it logs to log a hold that
// begins, one released and a confirmed prune. A confirmed hold, or one the
// plan released, ends here: the prune after a confirmed one that failed
// is planned and held anew. An error is the plan's. It runs on the loop's
// goroutine, within the prune's call.
func (g *Guard[Obj]) Check(ctx context.Context, txn statedb.ReadTxn, objects iter.Seq2[Obj, statedb.Revision], log *slog.Logger) (*Hold, error) {
	if g == nil {
		return nil, nil
	}
	was := g.hold.Load()
	hold, confirmed, err := g.check(ctx, txn, objects)
	switch {
	case confirmed:
		log.Warn("Reconciler runs a held prune, confirmed with ConfirmPrune")
	case hold != nil && was == 0:
		log.Warn("Reconciler holds a prune that would remove much of the target; ConfirmPrune runs it",
			"remove", hold.Remove, "held", hold.Of, "bound", g.bound())
	case hold == nil && err == nil && was != 0:
		log.Info("Reconciler releases a held prune: its plan is within the bounds now")
	}
	return hold, err
}

func (g *Guard[Obj]) check(ctx context.Context, txn statedb.ReadTxn, objects iter.Seq2[Obj, statedb.Revision]) (hold *Hold, confirmed bool, err error) {
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
	return &Hold{Remove: remove, Of: held,
		Err: fmt.Errorf("prune held: would remove %d of %d (bound: %s); Reconciler.ConfirmPrune runs it", remove, held, g.bound())}, false, nil
}

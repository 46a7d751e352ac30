package reconcilertest

import (
	"context"
	"iter"

	"github.com/cilium/statedb"
)

// PlanPrune is a dry run of Prune, for [reconciler.WithPruneGuard]: it
// returns how many keys Prune, given objects, would remove from the target
// and how many the target holds, and changes and records nothing. It
// returns ctx's error if ctx has ended. Safe for concurrent use.
func (t *Target[Obj]) PlanPrune(ctx context.Context, _ statedb.ReadTxn, objects iter.Seq2[Obj, statedb.Revision]) (remove, held int, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	want := map[string]bool{}
	for obj := range objects {
		want[t.key(obj)] = true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.state {
		if !want[k] {
			remove++
		}
	}
	return remove, len(t.state), nil
}

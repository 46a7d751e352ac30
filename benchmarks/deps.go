package main

import (
	"context"
	"fmt"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler"
)

// depsFanout is how many objects each dependency maps to.
const depsFanout = 100

// dependencyTrigger measures WithDependency's throughput: cfg.objects
// objects are in the table, long Done, when the reconciler starts; then
// cfg.objects/depsFanout objects are inserted into a dependency table, in
// transactions of cfg.txnSize, each mapping to depsFanout objects of the
// reconciled table. The figure is the time from the first dependency
// commit until every object has been updated again and written back Done
// ("s"), and its rate ("objects/s"). converge only: the StateDB reconciler
// has no dependencies (users write a refresher of their own).
func dependencyTrigger(ctx context.Context, cfg config, im impl) (measurement, error) {
	m := newMeasurement()
	n := cfg.objects - cfg.objects%depsFanout
	s := setup{impl: im, objects: n, preload: n, deps: true, updateTarget: n, noPrune: true}
	err := runEnv(ctx, cfg, s, func(ctx context.Context, e *env) error {
		t0 := time.Now()
		for from := 0; from < n/depsFanout; from += cfg.txnSize {
			wtxn := e.db.WriteTxn(e.deps)
			for d := from; d < min(from+cfg.txnSize, n/depsFanout); d++ {
				e.deps.Insert(wtxn, &object{id: uint64(d)})
			}
			wtxn.Commit()
		}
		select {
		case <-e.ops.reached:
		case <-ctx.Done():
			return fmt.Errorf("%s: %d of %d objects updated: %w", im, e.ops.updates.Load(), n, ctx.Err())
		}
		if err := e.waitCaughtUp(ctx); err != nil {
			return err
		}
		secs := time.Since(t0).Seconds()
		m.set("s", secs)
		m.set("objects/s", float64(n)/secs)
		return e.checkAllDone(n, t0)
	})
	return m, err
}

// dependents maps dependency d to the objects d*depsFanout and on.
func dependents(d *object, _ bool) []statedb.Query[*object] {
	qs := make([]statedb.Query[*object], depsFanout)
	for i := range qs {
		qs[i] = idIndex.Query(d.id*depsFanout + uint64(i))
	}
	return qs
}

// depsOption is the converge option of a setup with deps.
func (e *env) depsOption() reconciler.Option {
	return reconciler.WithDependency(e.deps, dependents)
}

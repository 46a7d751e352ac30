package reconciler_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"

	convergeindex "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// fixture is a running hive with an items table and a reconciler whose
// operations are ops.
type fixture struct {
	t      testing.TB
	hive   *hive.Hive
	db     *statedb.DB
	table  statedb.RWTable[*item]
	index  statedb.Index[*item, status.Kind]
	rec    reconciler.Reconciler[*item]
	health *cell.SimpleHealth
}

// startFixture starts a hive whose reconciler uses ops and batch (which may
// be nil). The hive is stopped when the test ends, or earlier with stop.
func startFixture(t testing.TB, ops reconciler.Operations[*item], batch reconciler.BatchOperations[*item], opts ...reconciler.Option) *fixture {
	return startFixtureWithSetup(t, nil, ops, batch, opts...)
}

// startFixtureWithTable is startFixture whose setup, if not nil, runs in
// the hive's construction once the items table exists (before the
// reconciler is registered) and returns more options.
func startFixtureWithTable(t testing.TB, setup func(*statedb.DB, statedb.RWTable[*item]) []reconciler.Option, ops reconciler.Operations[*item], opts ...reconciler.Option) *fixture {
	return startFixtureWithSetup(t, setup, ops, nil, opts...)
}

func startFixtureWithSetup(t testing.TB, setup func(*statedb.DB, statedb.RWTable[*item]) []reconciler.Option, ops reconciler.Operations[*item], batch reconciler.BatchOperations[*item], opts ...reconciler.Option) *fixture {
	return startFixtureWithSetter(t, setup, (*item).setStatus, ops, batch, opts...)
}

// startFixtureWithSetter is startFixtureWithSetup with the status setter
// given to the reconciler.
func startFixtureWithSetter(t testing.TB, setup func(*statedb.DB, statedb.RWTable[*item]) []reconciler.Option, setStatus func(*item, status.Status) *item, ops reconciler.Operations[*item], batch reconciler.BatchOperations[*item], opts ...reconciler.Option) *fixture {
	f := &fixture{t: t, index: convergeindex.NewStatusIndex((*item).getStatus)}
	f.hive = hive.New(
		statedb.Cell,
		job.Cell,
		cell.Provide(cell.NewSimpleHealth),
		cell.Module("test", "Test module",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(db *statedb.DB, p reconciler.Params, h *cell.SimpleHealth) error {
				f.db, f.health = db, h
				var err error
				f.table, err = statedb.NewTable(db, "items", itemID, f.index)
				if err != nil {
					return err
				}
				if setup != nil {
					opts = append(slices.Clip(opts), setup(db, f.table)...)
				}
				f.rec, err = reconciler.Register(p, f.table, (*item).clone, setStatus, (*item).getStatus, ops, batch, opts...)
				return err
			}),
		),
	)
	log := hivetest.Logger(t)
	require.NoError(t, f.hive.Start(log, context.Background()))
	t.Cleanup(func() { f.stop() })
	return f
}

func (f *fixture) stop() {
	if f.hive != nil {
		require.NoError(f.t, f.hive.Stop(hivetest.Logger(f.t), context.Background()))
		f.hive = nil
	}
}

// upsert writes objects with a fresh Pending status in one transaction and
// returns the transaction's revision.
func (f *fixture) upsert(objs ...*item) statedb.Revision {
	wtxn := f.db.WriteTxn(f.table)
	for _, o := range objs {
		o.Status = status.Pending()
		_, _, err := f.table.Insert(wtxn, o)
		require.NoError(f.t, err)
	}
	rev := f.table.Revision(wtxn)
	wtxn.Commit()
	return rev
}

func (f *fixture) remove(ids ...string) statedb.Revision {
	wtxn := f.db.WriteTxn(f.table)
	for _, id := range ids {
		_, _, err := f.table.Delete(wtxn, &item{ID: id})
		require.NoError(f.t, err)
	}
	rev := f.table.Revision(wtxn)
	wtxn.Commit()
	return rev
}

// waitReconciled waits for nothing to be Pending or Refreshing.
func (f *fixture) waitReconciled() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(f.t, reconciler.WaitForReconciliation(ctx, f.db, f.table, f.index))
}

// get returns the stored object with id.
func (f *fixture) get(id string) (*item, bool) {
	obj, _, found := f.table.Get(f.db.ReadTxn(), itemID.Query(id))
	return obj, found
}

// waitKind waits until the object with id has a status of kind.
func (f *fixture) waitKind(id string, kind status.Kind) *item {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		obj, _, watch, found := f.table.GetWatch(f.db.ReadTxn(), itemID.Query(id))
		if found && obj.Status.Kind == kind {
			return obj
		}
		select {
		case <-watch:
		case <-ctx.Done():
			f.t.Fatalf("object %q did not reach %s (last: %v)", id, kind, obj)
			return nil
		}
	}
}

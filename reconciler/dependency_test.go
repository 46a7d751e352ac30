package reconciler_test

// WithDependency: objects re-reconciled when what they depend on changes.
// (Which objects, once each, on a change or a delete, keys not in the
// table ignored, Unset objects left alone: testdata/dependency*.txtar;
// refusals: TestRegisterRejectsBadInput.)

import (
	"strings"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
)

// withDeps is a with whose setup creates a deps table, of items too, and
// makes the reconciler depend on it through mapper.
func withDeps(t *testing.T, deps *statedb.RWTable[*item], mapper func(*item, bool) []statedb.Query[*item]) *with {
	return &with{setup: func(f *fixture) []reconciler.Option {
		var err error
		*deps, err = statedb.NewTable(f.db, "deps", itemID)
		require.NoError(t, err)
		return []reconciler.Option{reconciler.WithDependency(*deps, mapper)}
	}}
}

// sameID is a WithDependency mapper: a dep re-reconciles the item of its ID.
func sameID(d *item, _ bool) []statedb.Query[*item] {
	return []statedb.Query[*item]{itemID.Query(d.ID)}
}

// writeDeps inserts objs into deps, or deletes them, in one transaction.
func writeDeps(t *testing.T, f *fixture, deps statedb.RWTable[*item], del bool, objs ...*item) {
	wtxn := f.db.WriteTxn(deps)
	for _, o := range objs {
		var err error
		if del {
			_, _, err = deps.Delete(wtxn, o)
		} else {
			_, _, err = deps.Insert(wtxn, o)
		}
		require.NoError(t, err)
	}
	wtxn.Commit()
}

// A mapper that panics on one change neither stops the program nor loses
// the triggers of other changes; the dependency job's health says so.
func TestDependencyMapperPanicIsRecovered(t *testing.T) {
	tg := newTarget()
	var deps statedb.RWTable[*item]
	f := startFixture(t, tg, withDeps(t, &deps, func(d *item, _ bool) []statedb.Query[*item] {
		if d.Value == "boom" {
			panic("mapper bug")
		}
		return []statedb.Query[*item]{itemID.Query(d.Value)}
	}))
	f.upsert(&item{ID: "a", Value: "1"})
	f.waitReconciled()
	base := len(tg.applied())

	writeDeps(t, f, deps, false, &item{ID: "d1", Value: "boom"}, &item{ID: "d2", Value: "a"})
	require.Eventually(t, func() bool { return len(tg.applied()) == base+1 }, timeout, time.Millisecond,
		"the other change still triggers a")
	f.waitHealth(func(level cell.Level, msg string) bool {
		return level == cell.StatusDegraded && strings.Contains(msg, "mapper bug")
	}, "job-dependency-deps")
}

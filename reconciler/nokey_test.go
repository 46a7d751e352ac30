package reconciler_test

// Objects without a primary key: StateDB v0.9 lets a primary indexer say an
// object has none (item.NoKey here), and then stores nothing for it.

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// An Update that leaves its object without a primary key gets an Error
// status wrapping ErrNoPrimaryKey on the object as it was, and is retried;
// the other objects of the round are reconciled as usual. A dependency mark
// whose setStatus drops the key leaves that object alone, never panics, and
// still marks the others.
func TestObjectWithoutAPrimaryKey(t *testing.T) {
	for _, workers := range []int{1, 3} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			tg := newTarget()
			tg.update = func(_ context.Context, it *item) error {
				if it.ID == "bad" {
					it.NoKey = true // a buggy Update changes what the primary index reads
				}
				return nil
			}
			var dropKeyOf atomic.Value // setStatus drops the key of this object
			dropKeyOf.Store("")
			var deps statedb.RWTable[*item]
			w := withDeps(t, &deps, func(d *item, _ bool) []statedb.Query[*item] { return []statedb.Query[*item]{itemID.Query(d.ID)} })
			w.setStatus = func(o *item, s status.Status) *item {
				o.Status = s
				if o.ID == dropKeyOf.Load() && s.Kind == status.KindRefreshing {
					o.NoKey = true
				}
				return o
			}
			f := startFixture(t, tg, w, reconciler.WithConcurrency(workers), reconciler.WithRetry(time.Hour, time.Hour))
			f.upsert(&item{ID: "a"}, &item{ID: "bad"}, &item{ID: "b"})
			f.waitKind("a", status.KindDone)
			bad := f.waitKind("bad", status.KindError)
			b := f.waitKind("b", status.KindDone)
			assert.Contains(t, bad.Status.Error, reconciler.ErrNoPrimaryKey.Error())
			assert.False(t, bad.NoKey, "the object is stored as it was before Update")

			// A dependency mark of a and b, whose setStatus drops a's key.
			dropKeyOf.Store("a")
			writeDeps(t, f, deps, false, &item{ID: "a"}, &item{ID: "b"})
			f.waitTable("b to be reconciled again after the mark", func(txn statedb.ReadTxn) bool {
				obj, _, found := f.table.Get(txn, itemID.Query("b"))
				return found && obj.Status.Kind == status.KindDone && obj.Status.ID() != b.Status.ID()
			})
			a, found := f.get("a")
			require.True(t, found, "a is still in the table")
			assert.Equal(t, status.KindDone, a.Status.Kind, "a's mark was left out")
		})
	}
}

// A refresh mark whose setStatus drops the key leaves that object alone
// and still refreshes the others.
func TestRefreshMarkWithoutAPrimaryKey(t *testing.T) {
	f := startFixture(t, newTarget(), &with{setStatus: func(o *item, s status.Status) *item {
		o.Status = s
		if o.ID == "a" && s.Kind == status.KindRefreshing {
			o.NoKey = true
		}
		return o
	}}, reconciler.WithRefreshing(10*time.Millisecond, nil))
	f.upsert(&item{ID: "a"}, &item{ID: "b"})
	a := f.waitKind("a", status.KindDone)
	b := f.waitKind("b", status.KindDone)
	for range 3 {
		f.waitTable("b to be refreshed", func(txn statedb.ReadTxn) bool {
			obj, _, found := f.table.Get(txn, itemID.Query("b"))
			if found && obj.Status.Kind == status.KindDone && obj.Status.ID() != b.Status.ID() {
				b = obj
				return true
			}
			return false
		})
	}
	now, found := f.get("a")
	require.True(t, found, "a is still in the table")
	assert.Equal(t, a.Status.ID(), now.Status.ID(), "a was left alone")
}

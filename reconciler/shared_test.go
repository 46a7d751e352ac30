package reconciler_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// Several reconcilers of one table write their statuses together (see
// package reconciler/internal/groupcommit); the tests here pin what that
// must not change.

// withSecond is a with for reconciler "a" of item.Statuses whose setup
// registers reconciler "b" of the same table, with tb as its target.
func withSecond(t *testing.T, tb *target) *with {
	getA, setA := statusOf("a")
	return &with{getStatus: getA, setStatus: setA, setup: func(f *fixture) []reconciler.Option {
		getB, setB := statusOf("b")
		_, err := reconciler.Register(f.params, f.table, (*item).clone, setB, getB, tb, nil, reconciler.WithName("b"))
		require.NoError(t, err)
		return nil
	}}
}

// setItems returns n objects prefix-00000... with an empty status set:
// Pending for every name.
func setItems(prefix string, n int) []*item {
	objs := items(prefix, n, "v")
	for _, o := range objs {
		o.Statuses = status.NewSet()
	}
	return objs
}

// allKind reports whether every object of objs has the status kind for name.
func allKind(f *fixture, txn statedb.ReadTxn, name string, kind status.Kind, objs []*item) bool {
	for _, o := range objs {
		cur, _, found := f.table.Get(txn, itemID.Query(o.ID))
		if !found || cur.Statuses.Get(name).Kind != kind {
			return false
		}
	}
	return true
}

// A reconciler of a table never waits for another's slow operation: while
// b's Update blocks, a's objects become Done, in the round b is in and in
// later ones. Once b's Update returns, b's statuses are written too, and
// none of a's is lost.
func TestAReconcilerIsNotHeldByAnotherOfItsTableBlockedInUpdate(t *testing.T) {
	a, b := newTarget(), newTarget()
	blocked := b.hold("x-00000")
	f := startFixture(t, a, withSecond(t, b), reconciler.WithName("a"))

	first := setItems("x", 20)
	f.insertAs(first...)
	blocked.wait(t) // b is in its round, in Update
	f.waitTable("a's statuses of the first objects", func(txn statedb.ReadTxn) bool {
		return allKind(f, txn, "a", status.KindDone, first)
	})
	later := setItems("y", 20)
	f.insertAs(later...)
	f.waitTable("a's statuses of the later objects", func(txn statedb.ReadTxn) bool {
		return allKind(f, txn, "a", status.KindDone, later)
	})
	x0, _ := f.get("x-00000")
	assert.Equal(t, status.KindPending, x0.Statuses.Get("b").Kind, "b's Update is still blocked")

	blocked.let()
	all := append(first, later...)
	f.waitTable("b's statuses", func(txn statedb.ReadTxn) bool {
		return allKind(f, txn, "b", status.KindDone, all)
	})
	assert.True(t, allKind(f, f.db.ReadTxn(), "a", status.KindDone, all), "a's statuses are kept")
	f.waitReconciled()
}

// Two reconcilers in a round on the same object write it once for both:
// one object write carries both statuses.
func TestReconcilersOfATableInOneRoundWriteAnObjectOnce(t *testing.T) {
	var both sync.WaitGroup
	both.Add(2)
	meet := func(ctx context.Context, it *item) error {
		if it.ID != "x-00000" {
			return nil
		}
		both.Done()
		done := make(chan struct{})
		go func() { both.Wait(); close(done) }()
		select { // both in their round before either commits
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	a, b := newTarget(), newTarget()
	a.update, b.update = meet, meet
	f := startFixture(t, a, withSecond(t, b), reconciler.WithName("a"))
	warm := setItems("w", 1) // both run
	f.insertAs(warm...)
	f.waitTable("both statuses of the first object", func(txn statedb.ReadTxn) bool {
		return allKind(f, txn, "a", status.KindDone, warm) && allKind(f, txn, "b", status.KindDone, warm)
	})

	x := setItems("x", 1)
	inserted := f.insertAs(x...)
	f.waitTable("both statuses", func(txn statedb.ReadTxn) bool {
		return allKind(f, txn, "a", status.KindDone, x) && allKind(f, txn, "b", status.KindDone, x)
	})
	_, rev, _ := f.table.Get(f.db.ReadTxn(), itemID.Query(x[0].ID))
	assert.Equal(t, inserted+1, rev, "one write after the insert")
	assert.Equal(t, inserted+1, f.table.Revision(f.db.ReadTxn()), "and no other")
}

// The reconcilers of a table, each with objects failing now and then,
// reconcile every object for every name, with each one's retries.
func TestReconcilersOfATableEachReconcileEveryObject(t *testing.T) {
	var mu sync.Mutex
	failed := map[string]bool{}
	failOnce := func(name string) func(context.Context, *item) error {
		return func(_ context.Context, it *item) error {
			mu.Lock()
			defer mu.Unlock()
			if k := name + it.ID; it.ID[len(it.ID)-1] == '3' && !failed[k] {
				failed[k] = true
				return assert.AnError
			}
			return nil
		}
	}
	a, b := newTarget(), newTarget()
	a.update, b.update = failOnce("a"), failOnce("b")
	getA, setA := statusOf("a")
	f := startFixture(t, a, &with{getStatus: getA, setStatus: setA, setup: func(f *fixture) []reconciler.Option {
		getB, setB := statusOf("b")
		_, err := reconciler.Register(f.params, f.table, (*item).clone, setB, getB, b, nil,
			reconciler.WithName("b"), reconciler.WithRetry(time.Millisecond, time.Millisecond))
		require.NoError(t, err)
		return nil
	}}, reconciler.WithName("a"), reconciler.WithRetry(time.Millisecond, time.Millisecond))

	var all []*item
	for i := range 5 {
		objs := setItems(string(rune('p'+i)), 200)
		f.insertAs(objs...)
		all = append(all, objs...)
	}
	f.waitTable("every status", func(txn statedb.ReadTxn) bool {
		return allKind(f, txn, "a", status.KindDone, all) && allKind(f, txn, "b", status.KindDone, all)
	})
	f.caughtUp()
	mu.Lock()
	defer mu.Unlock()
	assert.Len(t, failed, 2*5*20, "each name failed each object ending in 3 once")
}

// meetAt returns n Update functions that return for object id only once
// all n are in it: the reconcilers are all in one round for it, and their
// statuses of it go into one write.
func meetAt(id string, n int) func(context.Context, *item) error {
	var all sync.WaitGroup
	all.Add(n)
	return func(ctx context.Context, it *item) error {
		if it.ID != id {
			return nil
		}
		all.Done()
		done := make(chan struct{})
		go func() { all.Wait(); close(done) }()
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// countingSet returns a setter of item.Statuses for WithStatusSet that
// counts its calls per object.
func countingSet(mu *sync.Mutex, calls map[string]int) func(*item, status.Set) *item {
	return func(it *item, s status.Set) *item {
		mu.Lock()
		calls[it.ID]++
		mu.Unlock()
		it.Statuses = s
		return it
	}
}

// Reconcilers that keep their statuses in one set (WithStatusSet) write an
// object version's statuses with one copy of the set for all of them: the
// set is stored once, not once per reconciler.
func TestReconcilersOfOneStatusSetStoreTheSetOnce(t *testing.T) {
	var mu sync.Mutex
	calls := map[string]int{}
	meet := meetAt("x-00000", 3)
	tgs := []*target{newTarget(), newTarget(), newTarget()}
	for _, tg := range tgs {
		tg.update = meet
	}
	f := startFixture(t, tgs[0], &with{inSet: countingSet(&mu, calls), setup: func(f *fixture) []reconciler.Option {
		for i, name := range []string{"b", "c"} {
			_, err := reconciler.Register(f.params, f.table, (*item).clone, nil, nil, tgs[i+1], nil,
				reconciler.WithName(name), reconciler.WithStatusSet(getSet, countingSet(&mu, calls)))
			require.NoError(t, err)
		}
		return nil
	}}, reconciler.WithName("a"))
	warm := setItems("w", 1) // all three run
	f.insertAs(warm...)
	f.waitTable("the first object's statuses", func(txn statedb.ReadTxn) bool {
		return allKind(f, txn, "a", status.KindDone, warm) && allKind(f, txn, "b", status.KindDone, warm) && allKind(f, txn, "c", status.KindDone, warm)
	})

	x := setItems("x", 1)
	inserted := f.insertAs(x...)
	f.waitTable("every status", func(txn statedb.ReadTxn) bool {
		return allKind(f, txn, "a", status.KindDone, x) && allKind(f, txn, "b", status.KindDone, x) && allKind(f, txn, "c", status.KindDone, x)
	})
	assert.Equal(t, inserted+1, f.table.Revision(f.db.ReadTxn()), "one write after the insert")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 1, calls["x-00000"], "the set stored once for the three")
}

// Reconcilers of one table in one write, two keeping their statuses in
// one set and one in another (WithStatusSet of another field), each find
// their own status, and only their own, in the set they keep it in.
func TestReconcilersOfTwoStatusSetsOfATableEachWriteTheirOwn(t *testing.T) {
	meet := meetAt("x-00000", 3)
	tgs := []*target{newTarget(), newTarget(), newTarget()}
	for _, tg := range tgs {
		tg.update = meet
	}
	getOther := func(it *item) status.Set { return it.Other }
	putOther := func(it *item, s status.Set) *item { it.Other = s; return it }
	f := startFixture(t, tgs[0], &with{inSet: putSet, setup: func(f *fixture) []reconciler.Option {
		_, err := reconciler.Register(f.params, f.table, (*item).clone, nil, nil, tgs[1], nil,
			reconciler.WithName("b"), reconciler.WithStatusSet(getSet, putSet))
		require.NoError(t, err)
		_, err = reconciler.Register(f.params, f.table, (*item).clone, nil, nil, tgs[2], nil,
			reconciler.WithName("o"), reconciler.WithStatusSet(getOther, putOther))
		require.NoError(t, err)
		return nil
	}}, reconciler.WithName("a"))

	warm := setItems("w", 1) // all three run
	warm[0].Other = status.NewSet()
	f.insertAs(warm...)
	f.waitTable("the first object's statuses", func(txn statedb.ReadTxn) bool {
		cur, _, _ := f.table.Get(txn, itemID.Query("w-00000"))
		return cur.Other.Get("o").Kind == status.KindDone && allKind(f, txn, "a", status.KindDone, warm) && allKind(f, txn, "b", status.KindDone, warm)
	})

	x := setItems("x", 1)
	x[0].Other = status.NewSet()
	inserted := f.insertAs(x...)
	f.waitTable("every status", func(txn statedb.ReadTxn) bool {
		cur, _, _ := f.table.Get(txn, itemID.Query("x-00000"))
		return cur.Other.Get("o").Kind == status.KindDone &&
			allKind(f, txn, "a", status.KindDone, x) && allKind(f, txn, "b", status.KindDone, x)
	})
	assert.Equal(t, inserted+1, f.table.Revision(f.db.ReadTxn()), "one write after the insert")
	cur, _ := f.get("x-00000")
	var names, others []string
	for name := range cur.Statuses.All() {
		names = append(names, name)
	}
	for name := range cur.Other.All() {
		others = append(others, name)
	}
	assert.Equal(t, []string{"a", "b"}, names)
	assert.Equal(t, []string{"o"}, others)
}

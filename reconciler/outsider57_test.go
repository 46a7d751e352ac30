package reconciler_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/sets"
	"github.com/converge-go/converge/status"
)

// Outsider review of WithStatusSet (h57), written from the documentation
// only: "Several reconcilers of one table", WithStatusSet, Register and
// docs/control.md, "Several reconcilers on one status.Set".

// o57meet makes the Updates of several reconcilers return, for the
// versions of ids it matches, only once n of them are in it: they are in
// one round, so their statuses go into one write. Later attempts of a
// version already met return at once.
type o57meet struct {
	mu    sync.Mutex
	n     int
	match func(*item) bool
	at    map[string]*o57meeting
}

type o57meeting struct {
	arrived int
	all     chan struct{}
}

func newMeet(n int, match func(*item) bool) *o57meet {
	return &o57meet{n: n, match: match, at: map[string]*o57meeting{}}
}

func (m *o57meet) update(ctx context.Context, it *item) error {
	if !m.match(it) {
		return nil
	}
	key := it.ID + "=" + it.Value
	m.mu.Lock()
	mt := m.at[key]
	if mt == nil {
		mt = &o57meeting{all: make(chan struct{})}
		m.at[key] = mt
	}
	mt.arrived++
	if mt.arrived == m.n {
		close(mt.all)
	}
	m.mu.Unlock()
	select {
	case <-mt.all:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// o57register registers a reconciler of name on f's table keeping its
// status in item.Statuses (WithStatusSet).
func o57register(t testing.TB, f *fixture, name string, tg *target, batch bool, opts ...reconciler.Option) reconciler.Reconciler[*item] {
	t.Helper()
	var b reconciler.BatchOperations[*item]
	if batch {
		b = tg
	}
	r, err := reconciler.Register(f.params, f.table, (*item).clone, nil, nil, tg, b,
		append([]reconciler.Option{reconciler.WithName(name), reconciler.WithStatusSet(getSet, putSet)}, opts...)...)
	require.NoError(t, err)
	return r
}

// o57registerOwn registers a reconciler of name with its own getStatus and
// setStatus of its entry of item.Statuses.
func o57registerOwn(t testing.TB, f *fixture, name string, tg *target, batch bool, opts ...reconciler.Option) reconciler.Reconciler[*item] {
	t.Helper()
	var b reconciler.BatchOperations[*item]
	if batch {
		b = tg
	}
	get, set := statusOf(name)
	r, err := reconciler.Register(f.params, f.table, (*item).clone, set, get, tg, b,
		append([]reconciler.Option{reconciler.WithName(name)}, opts...)...)
	require.NoError(t, err)
	return r
}

// o57allDone reports whether every object of the table has a Done status
// for each name in the set get returns.
func o57allDone(f *fixture, txn statedb.ReadTxn, get func(*item) status.Set, names ...string) bool {
	for obj := range f.table.All(txn) {
		for _, n := range names {
			if get(obj).Get(n).Kind != status.KindDone {
				return false
			}
		}
	}
	return true
}

// o57waitDone waits until every object is Done for every name of
// item.Statuses, and logs what is not on failure.
func o57waitDone(t *testing.T, f *fixture, names ...string) {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			for obj := range f.table.All(f.db.ReadTxn()) {
				t.Logf("%s=%s statuses %s other %s", obj.ID, obj.Value, obj.Statuses.String(), obj.Other.String())
			}
		}
	})
	f.waitTable("every object Done for "+strings.Join(names, ","), func(txn statedb.ReadTxn) bool {
		return o57allDone(f, txn, getSet, names...)
	})
}

// o57names returns the names of s's entries.
func o57names(s status.Set) []string {
	var names []string
	for n := range s.All() {
		names = append(names, n)
	}
	return names
}

// o57noDiff checks that each target holds exactly the table.
func o57noDiff(t *testing.T, f *fixture, tgs map[string]*target) {
	t.Helper()
	txn := f.db.ReadTxn()
	for name, tg := range tgs {
		assert.Empty(t, tg.Diff(txn, f.table), "target of %s", name)
	}
}

// Reconcilers of one set mixed with reconcilers that write their entry of
// that set with setStatus of their own, all in one write: each finds its
// own status in the set, for every version, whichever registered first.
func TestOutsider57MixedSetAndOwnStatusInOneWrite(t *testing.T) {
	for _, ownFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("ownFirst=%v", ownFirst), func(t *testing.T) {
			meet := newMeet(4, func(it *item) bool { return it.ID == "x-00000" })
			tgs := map[string]*target{"a": newTarget(), "b": newTarget(), "c": newTarget(), "d": newTarget()}
			for _, tg := range tgs {
				tg.update = meet.update
			}
			getA, _ := statusOf("a")
			f := startFixture(t, tgs["a"], &with{inSet: putSet, getStatus: getA, setup: func(f *fixture) []reconciler.Option {
				if ownFirst {
					o57registerOwn(t, f, "c", tgs["c"], false)
					o57register(t, f, "b", tgs["b"], false)
					o57registerOwn(t, f, "d", tgs["d"], false)
				} else {
					o57register(t, f, "b", tgs["b"], false)
					o57registerOwn(t, f, "c", tgs["c"], false)
					o57registerOwn(t, f, "d", tgs["d"], false)
				}
				return nil
			}}, reconciler.WithName("a"))

			for v := range 4 {
				x := setItems("x", 1)
				x[0].Value = fmt.Sprint("v", v)
				f.insertAs(x...)
				o57waitDone(t, f, "a", "b", "c", "d")
				cur, _ := f.get("x-00000")
				assert.Equal(t, []string{"a", "b", "c", "d"}, o57names(cur.Statuses), "version %d", v)
				for name, tg := range tgs {
					assert.True(t, tg.has("x-00000", x[0].Value), "%s applied version %d", name, v)
				}
			}
			f.caughtUp()
			o57noDiff(t, f, tgs)
		})
	}
}

// Two sets in one object, each with reconcilers of WithStatusSet and of
// their own setStatus, all in one write: each name's entry is in its set
// and only there.
func TestOutsider57TwoSetsMixedEachNameInItsOwnSet(t *testing.T) {
	meet := newMeet(5, func(it *item) bool { return strings.HasPrefix(it.ID, "x-") })
	tgs := map[string]*target{}
	for _, n := range []string{"a", "b", "c", "o", "p"} {
		tgs[n] = newTarget()
		tgs[n].update = meet.update
	}
	getOther := func(it *item) status.Set { return it.Other }
	putOther := func(it *item, s status.Set) *item { it.Other = s; return it }
	getA, _ := statusOf("a")
	f := startFixture(t, tgs["a"], &with{inSet: putSet, getStatus: getA, setup: func(f *fixture) []reconciler.Option {
		o57registerOwn(t, f, "c", tgs["c"], false)
		_, err := reconciler.Register(f.params, f.table, (*item).clone, nil, nil, tgs["o"], nil,
			reconciler.WithName("o"), reconciler.WithStatusSet(getOther, putOther))
		require.NoError(t, err)
		o57register(t, f, "b", tgs["b"], false)
		_, err = reconciler.Register(f.params, f.table, (*item).clone,
			func(it *item, s status.Status) *item { it.Other = it.Other.Set("p", s); return it },
			func(it *item) status.Status { return it.Other.Get("p") }, tgs["p"], nil, reconciler.WithName("p"))
		require.NoError(t, err)
		return nil
	}}, reconciler.WithName("a"))

	for v := range 3 {
		x := setItems("x", 3)
		for _, o := range x {
			o.Value = fmt.Sprint("v", v)
			o.Other = status.NewSet()
		}
		f.insertAs(x...)
		f.waitTable("every status", func(txn statedb.ReadTxn) bool {
			return o57allDone(f, txn, getSet, "a", "b", "c") && o57allDone(f, txn, getOther, "o", "p")
		})
		for obj := range f.table.All(f.db.ReadTxn()) {
			assert.Equal(t, []string{"a", "b", "c"}, o57names(obj.Statuses), "%s: names in Statuses", obj.ID)
			assert.Equal(t, []string{"o", "p"}, o57names(obj.Other), "%s: names in Other", obj.ID)
		}
	}
	f.caughtUp()
	o57noDiff(t, f, tgs)
}

// One name failing an object keeps its Error (with the error's text) in
// the set across its retries while the others' Done stays, and the others
// do not apply the object again for the failing name's writes.
func TestOutsider57FailingNameKeepsItsErrorOthersKeepDone(t *testing.T) {
	tgA, tgB, tgC := newTarget(), newTarget(), newTarget()
	tgA.failIDs("x-00001")
	getA, _ := statusOf("a")
	retry := reconciler.WithRetry(time.Millisecond, 5*time.Millisecond)
	f := startFixture(t, tgA, &with{inSet: putSet, getStatus: getA, setup: func(f *fixture) []reconciler.Option {
		o57register(t, f, "b", tgB, false, retry)
		o57registerOwn(t, f, "c", tgC, false, retry)
		return nil
	}}, reconciler.WithName("a"), retry)

	objs := setItems("x", 5)
	f.insertAs(objs...)
	tgA.waitStarts(t, "a's fifth attempt of x-00001", func() bool { return tgA.attempts(reconcilertest.OpUpdate, "x-00001") >= 5 })
	f.waitTable("b and c Done, a Error on x-00001", func(txn statedb.ReadTxn) bool {
		x1, _, _ := f.table.Get(txn, itemID.Query("x-00001"))
		return o57allDone(f, txn, getSet, "b", "c") && x1.Statuses.Get("a").Kind == status.KindError
	})
	x1, _ := f.get("x-00001")
	assert.Contains(t, x1.Statuses.Get("a").Error, errKitObject.Error())
	tgA.waitStarts(t, "two more attempts", func() bool { return tgA.attempts(reconcilertest.OpUpdate, "x-00001") >= 8 })
	assert.True(t, o57allDone(f, f.db.ReadTxn(), getSet, "b", "c"), "b and c stay Done")

	tgA.recover()
	o57waitDone(t, f, "a", "b", "c")
	f.caughtUp()
	for _, id := range ids(objs) {
		assert.Equal(t, 1, len(tgB.updates(id)), "b applied %s once", id)
		assert.Equal(t, 1, len(tgC.updates(id)), "c applied %s once", id)
	}
}

// With workers, batch operations, failures once per name and object, and
// the table written and deleted from meanwhile, every name converges:
// every object Done for every name, each target holding the table, and
// sets.Table.Wait, WaitForReconciliation and WaitUntilReconciled agree.
func TestOutsider57ChurnConvergesForEveryName(t *testing.T) {
	forVariants(t, variants, func(t *testing.T, v variant) {
		names := []string{"a", "b", "c", "d"}
		tgs := map[string]*target{}
		var mu sync.Mutex
		failed := map[string]bool{}
		for _, n := range names {
			tgs[n] = newTarget()
			tgs[n].setFail(func(op reconcilertest.Op, it *item) error {
				if it == nil || !strings.HasSuffix(it.ID, "7") {
					return nil
				}
				mu.Lock()
				defer mu.Unlock()
				k := n + string(op) + it.ID + it.Value
				if !failed[k] {
					failed[k] = true
					return errKitObject
				}
				return nil
			})
		}
		retry := reconciler.WithRetry(time.Millisecond, 5*time.Millisecond)
		recs := map[string]reconciler.Reconciler[*item]{}
		getA, _ := statusOf("a")
		w := &with{inSet: putSet, getStatus: getA, setup: func(f *fixture) []reconciler.Option {
			more := []reconciler.Option{reconciler.WithConcurrency(v.workers), reconciler.WithPruning(0), retry}
			recs["b"] = o57register(t, f, "b", tgs["b"], v.batch, more...)
			recs["c"] = o57register(t, f, "c", tgs["c"], v.batch, more...)
			recs["d"] = o57registerOwn(t, f, "d", tgs["d"], v.batch, more...)
			return nil
		}}
		f := v.start(t, tgs["a"], w, reconciler.WithName("a"), retry)
		recs["a"] = f.rec
		st, err := sets.Of(f.db, f.table, (*item).clone, getSet, putSet)
		require.NoError(t, err)

		for round := range 6 {
			objs := setItems("o", 40)
			for i, o := range objs {
				o.Value = fmt.Sprintf("r%d-%d", round, i%3)
			}
			// Some keep their old version this round: written with the
			// stored object's set, which is Done.
			wtxn := f.db.WriteTxn(f.table)
			for i, o := range objs {
				if cur, _, found := f.table.Get(wtxn, itemID.Query(o.ID)); found && i%5 == 0 {
					continue
				} else if found && i%4 == 0 {
					// The writer marks every name Pending on its set.
					o.Statuses = cur.Statuses.Pending()
				}
				_, _, err := f.table.Insert(wtxn, o)
				require.NoError(t, err)
			}
			wtxn.Commit()
			if round%2 == 1 {
				var gone []string
				for i := round; i < 40; i += 7 {
					gone = append(gone, fmt.Sprintf("o-%05d", i))
				}
				f.remove(gone...)
			}
		}
		rev := f.table.Revision(f.db.ReadTxn())
		for n, r := range recs {
			reached, _, err := r.WaitUntilReconciled(ctxFor(t, timeout), rev)
			require.NoError(t, err, n)
			assert.GreaterOrEqual(t, reached, rev, n)
		}
		o57waitDone(t, f, names...)
		require.NoError(t, st.Wait(ctxFor(t, timeout), names))
		f.waitReconciled()
		waitUntil(t, "no retries left", func() (bool, <-chan struct{}) {
			ch := make(chan struct{})
			close(ch)
			for _, r := range recs {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				_, low, err := r.WaitUntilReconciled(ctx, rev)
				cancel()
				if err != nil || low != 0 {
					return false, ch
				}
			}
			return true, ch
		})
		o57noDiff(t, f, tgs)
		for obj := range f.table.All(f.db.ReadTxn()) {
			assert.Equal(t, names, o57names(obj.Statuses), "%s", obj.ID)
		}
	})
}

// An object deleted and inserted again while one name's Update of it is
// in flight ends applied in its latest version for every name.
func TestOutsider57DeleteAndReinsertWhileInFlight(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprint("batch=", batch), func(t *testing.T) {
			tgA, tgB, tgC := newTarget(), newTarget(), newTarget()
			held := tgA.holdAfterApply("x-00000", false)
			getA, _ := statusOf("a")
			w := &with{inSet: putSet, getStatus: getA, setup: func(f *fixture) []reconciler.Option {
				o57register(t, f, "b", tgB, batch)
				o57registerOwn(t, f, "c", tgC, batch)
				return nil
			}}
			if batch {
				w.batch = tgA
			}
			f := startFixture(t, tgA, w, reconciler.WithName("a"))
			x := setItems("x", 2)
			f.insertAs(x...)
			held.wait(t)
			f.waitTable("b and c Done", func(txn statedb.ReadTxn) bool { return o57allDone(f, txn, getSet, "b", "c") })
			f.remove("x-00000")
			again := setItems("x", 1)
			again[0].Value = "v2"
			f.insertAs(again...)
			f.waitTable("b and c Done with v2", func(txn statedb.ReadTxn) bool {
				return o57allDone(f, txn, getSet, "b", "c") && tgB.has("x-00000", "v2") && tgC.has("x-00000", "v2")
			})
			held.let()
			o57waitDone(t, f, "a", "b", "c")
			f.caughtUp()
			o57noDiff(t, f, map[string]*target{"a": tgA, "b": tgB, "c": tgC})
			assert.True(t, tgA.has("x-00000", "v2"))
		})
	}
}

// Stopping the hive while one name's Update is in flight, and writing
// meanwhile, loses nothing for any name once it starts again.
func TestOutsider57StopStartLosesNothing(t *testing.T) {
	tgA, tgB, tgC := newTarget(), newTarget(), newTarget()
	held := tgA.hold("x-00003")
	getA, _ := statusOf("a")
	f := startFixture(t, tgA, &with{inSet: putSet, getStatus: getA, setup: func(f *fixture) []reconciler.Option {
		o57register(t, f, "b", tgB, false, reconciler.WithConcurrency(2))
		o57registerOwn(t, f, "c", tgC, true)
		return nil
	}}, reconciler.WithName("a"))
	f.insertAs(setItems("x", 10)...)
	held.wait(t)
	f.waitTable("b and c Done", func(txn statedb.ReadTxn) bool { return o57allDone(f, txn, getSet, "b", "c") })
	f.stop()

	more := setItems("y", 5)
	f.insertAs(more...)
	f.remove("x-00001", "x-00003")
	changed := setItems("x", 1)
	changed[0].Value = "v2"
	f.insertAs(changed...)

	f.start()
	o57waitDone(t, f, "a", "b", "c")
	f.caughtUp()
	o57noDiff(t, f, map[string]*target{"a": tgA, "b": tgB, "c": tgC})
}

// A reconciler of the set registered while the hive runs, with writes
// going on, reconciles every object, and the others do not apply again
// objects that did not change.
func TestOutsider57LateJoinerOfTheSet(t *testing.T) {
	tgA, tgB, tgJ := newTarget(), newTarget(), newTarget()
	getA, _ := statusOf("a")
	f := startFixture(t, tgA, &with{inSet: putSet, getStatus: getA, setup: func(f *fixture) []reconciler.Option {
		o57register(t, f, "b", tgB, false)
		return nil
	}}, reconciler.WithName("a"))
	old := setItems("old", 50)
	f.insertAs(old...)
	o57waitDone(t, f, "a", "b")

	j := o57register(t, f, "j", tgJ, false, reconciler.WithConcurrency(3))
	fresh := setItems("new", 50)
	for i := 0; i < len(fresh); i += 10 {
		f.insertAs(fresh[i : i+10]...)
	}
	o57waitDone(t, f, "a", "b", "j")
	_, _, err := j.WaitUntilReconciled(ctxFor(t, timeout), f.table.Revision(f.db.ReadTxn()))
	require.NoError(t, err)
	for _, id := range ids(old) {
		assert.Len(t, tgA.updates(id), 1, "a applied %s once", id)
		assert.Len(t, tgB.updates(id), 1, "b applied %s once", id)
	}
	o57noDiff(t, f, map[string]*target{"a": tgA, "b": tgB, "j": tgJ})
}

// Retiring a name nobody serves (sets.Table.Retire), also while an
// operation of another name is in flight, removes only its entries: the
// others stay Done, are not applied again, and sets.Table.Wait and
// WaitForReconciliation agree with the table.
func TestOutsider57RetireWhileInFlightLeavesTheOthersAlone(t *testing.T) {
	tgA, tgB := newTarget(), newTarget()
	getA, _ := statusOf("a")
	f := startFixture(t, tgA, &with{inSet: putSet, getStatus: getA, setup: func(f *fixture) []reconciler.Option {
		o57register(t, f, "b", tgB, false)
		return nil
	}}, reconciler.WithName("a"))
	st, err := sets.Of(f.db, f.table, (*item).clone, getSet, putSet)
	require.NoError(t, err)

	objs := setItems("x", 20)
	for _, o := range objs {
		o.Statuses = o.Statuses.Pending("a", "b", "gone")
	}
	f.insertAs(objs...)
	require.NoError(t, st.Wait(ctxFor(t, timeout), []string{"a", "b"}))
	assert.True(t, o57allDone(f, f.db.ReadTxn(), getSet, "a", "b"))

	// A new version of x-00004 whose a Update is held while "gone" retires.
	held := tgA.hold("x-00004")
	v2 := setItems("x", 5)[4]
	v2.Value = "v2"
	v2.Statuses = v2.Statuses.Pending("a", "b", "gone")
	f.insertAs(v2)
	held.wait(t)
	n, err := st.Retire(ctxFor(t, timeout), "gone")
	require.NoError(t, err)
	assert.Equal(t, 20, n)
	held.let()

	require.NoError(t, st.Wait(ctxFor(t, timeout), []string{"a", "b"}))
	f.waitReconciled()
	f.caughtUp()
	for obj := range f.table.All(f.db.ReadTxn()) {
		assert.Equal(t, []string{"a", "b"}, o57names(obj.Statuses), "%s", obj.ID)
		assert.Equal(t, status.KindDone, obj.Statuses.Get("a").Kind, "%s", obj.ID)
		assert.Equal(t, status.KindDone, obj.Statuses.Get("b").Kind, "%s", obj.ID)
	}
	for _, id := range ids(objs) {
		want := 1
		if id == "x-00004" {
			want = 2
		}
		assert.Len(t, tgA.updates(id), want, "a's updates of %s", id)
		assert.Len(t, tgB.updates(id), want, "b's updates of %s", id)
	}
	o57noDiff(t, f, map[string]*target{"a": tgA, "b": tgB})
}

// WaitUntilReconciled of each reconciler of the set returns only once its
// statuses are in the table, and WaitForObject agrees with the table.
func TestOutsider57WaitsAgreeWithTheTable(t *testing.T) {
	tgA, tgB, tgC := newTarget(), newTarget(), newTarget()
	slow := newMeet(3, func(it *item) bool { return strings.HasSuffix(it.ID, "0") })
	tgA.update, tgB.update, tgC.update = slow.update, slow.update, slow.update
	recs := map[string]reconciler.Reconciler[*item]{}
	getA, _ := statusOf("a")
	f := startFixture(t, tgA, &with{inSet: putSet, getStatus: getA, setup: func(f *fixture) []reconciler.Option {
		recs["b"] = o57register(t, f, "b", tgB, true, reconciler.WithConcurrency(2))
		recs["c"] = o57register(t, f, "c", tgC, false)
		return nil
	}}, reconciler.WithName("a"))
	recs["a"] = f.rec
	for round := range 5 {
		objs := setItems(fmt.Sprint("r", round), 30)
		rev := f.insertAs(objs...)
		for n, r := range recs {
			_, _, err := r.WaitUntilReconciled(ctxFor(t, timeout), rev)
			require.NoError(t, err)
			txn := f.db.ReadTxn()
			assert.True(t, allKind(f, txn, n, status.KindDone, objs), "round %d: %s's statuses in the table once WaitUntilReconciled returns", round, n)
		}
		for _, n := range []string{"a", "b", "c"} {
			obj, err := reconciler.WaitForObject(ctxFor(t, timeout), f.db, f.table, itemID.Query(objs[7].ID),
				func(it *item) status.Status { return it.Statuses.Get(n) })
			require.NoError(t, err)
			assert.Equal(t, status.KindDone, obj.Statuses.Get(n).Kind)
		}
	}
}

// Objects written with the zero Set (not NewSet) are reconciled for every
// name, and again when written again with a zero Set, after a delete too.
// (Names missing from a zero Set read as Pending without identity, so a
// name may apply a version more than once; only convergence is checked.)
func TestOutsider57ZeroSetObjectsAreReconciledEachTime(t *testing.T) {
	tgA, tgB := newTarget(), newTarget()
	getA, _ := statusOf("a")
	f := startFixture(t, tgA, &with{inSet: putSet, getStatus: getA, setup: func(f *fixture) []reconciler.Option {
		o57register(t, f, "b", tgB, false)
		return nil
	}}, reconciler.WithName("a"))
	tgs := map[string]*target{"a": tgA, "b": tgB}
	for v := range 3 {
		f.insertAs(&item{ID: "z", Value: fmt.Sprint("v", v)})
		o57waitDone(t, f, "a", "b")
		f.caughtUp()
		o57noDiff(t, f, tgs)
	}
	f.remove("z")
	f.insertAs(&item{ID: "z", Value: "v2"})
	o57waitDone(t, f, "a", "b")
	f.caughtUp()
	o57noDiff(t, f, tgs)
	for n, tg := range tgs {
		got := slices.Compact(tg.updates("z"))
		assert.Equal(t, []string{"v0", "v1", "v2", "v2"}[:len(got)], got, "%s applied each write of z in order", n)
		assert.GreaterOrEqual(t, len(got), 3, n)
	}
}

// Objects written with NewSet are applied once per write and name: a
// name reading another's status write in the set costs nothing.
func TestOutsider57NewSetObjectsAreAppliedOncePerWrite(t *testing.T) {
	tgA, tgB, tgC := newTarget(), newTarget(), newTarget()
	getA, _ := statusOf("a")
	f := startFixture(t, tgA, &with{inSet: putSet, getStatus: getA, setup: func(f *fixture) []reconciler.Option {
		o57register(t, f, "b", tgB, false)
		o57registerOwn(t, f, "c", tgC, false)
		return nil
	}}, reconciler.WithName("a"))
	tgs := map[string]*target{"a": tgA, "b": tgB, "c": tgC}
	for v := range 4 {
		f.insertAs(&item{ID: "z", Value: fmt.Sprint("v", v), Statuses: status.NewSet()})
		o57waitDone(t, f, "a", "b", "c")
		f.caughtUp()
		o57noDiff(t, f, tgs)
	}
	f.remove("z")
	f.insertAs(&item{ID: "z", Value: "v3", Statuses: status.NewSet()})
	o57waitDone(t, f, "a", "b", "c")
	f.caughtUp()
	o57noDiff(t, f, tgs)
	for n, tg := range tgs {
		assert.Equal(t, []string{"v0", "v1", "v2", "v3", "v3"}, tg.updates("z"), "%s applied each write of z once", n)
	}
}

// A writer that marks only one name Pending gets only that name's
// reconciler to apply the object; the others keep their Done.
func TestOutsider57OnlyTheNameMarkedPendingApplies(t *testing.T) {
	tgA, tgB, tgC := newTarget(), newTarget(), newTarget()
	getA, _ := statusOf("a")
	f := startFixture(t, tgA, &with{inSet: putSet, getStatus: getA, setup: func(f *fixture) []reconciler.Option {
		o57register(t, f, "b", tgB, false)
		o57registerOwn(t, f, "c", tgC, false)
		return nil
	}}, reconciler.WithName("a"))
	f.insertAs(setItems("x", 3)...)
	o57waitDone(t, f, "a", "b", "c")
	for i, name := range []string{"b", "c", "a"} {
		cur, _ := f.get("x-00001")
		next := cur.clone()
		next.Statuses = next.Statuses.Set(name, status.Pending())
		f.insertAs(next)
		o57waitDone(t, f, "a", "b", "c")
		f.caughtUp()
		for j, n := range []string{"b", "c", "a"} {
			want := 1
			if j <= i {
				want = 2
			}
			assert.Len(t, map[string]*target{"a": tgA, "b": tgB, "c": tgC}[n].updates("x-00001"), want, "after %s marked: %s's updates", name, n)
		}
	}
}

// A set function that returns another object (not the clone it was
// given) works as one that modifies the clone.
func TestOutsider57SetFunctionReturningAnotherObject(t *testing.T) {
	fresh := func(it *item, s status.Set) *item { c := *it; c.Statuses = s; return &c }
	tgA, tgB := newTarget(), newTarget()
	meet := newMeet(2, func(it *item) bool { return true })
	tgA.update, tgB.update = meet.update, meet.update
	getA, _ := statusOf("a")
	f := startFixture(t, tgA, &with{inSet: fresh, getStatus: getA, setup: func(f *fixture) []reconciler.Option {
		_, err := reconciler.Register(f.params, f.table, (*item).clone, nil, nil, tgB, nil,
			reconciler.WithName("b"), reconciler.WithStatusSet(getSet, fresh))
		require.NoError(t, err)
		return nil
	}}, reconciler.WithName("a"))
	f.insertAs(setItems("x", 10)...)
	o57waitDone(t, f, "a", "b")
	f.caughtUp()
	o57noDiff(t, f, map[string]*target{"a": tgA, "b": tgB})
}

// A set function that drops the object's primary key for one object
// leaves that object alone without a panic; every other object converges
// for every name, the shared write included.
func TestOutsider57SetFunctionDroppingTheKeyLeavesOthersAlone(t *testing.T) {
	dropBad := func(it *item, s status.Set) *item {
		it.Statuses = s
		if it.ID == "bad" {
			it.NoKey = true
		}
		return it
	}
	tgA, tgB, tgC := newTarget(), newTarget(), newTarget()
	meet := newMeet(3, func(it *item) bool { return true })
	tgA.update, tgB.update, tgC.update = meet.update, meet.update, meet.update
	getA, _ := statusOf("a")
	f := startFixture(t, tgA, &with{inSet: dropBad, getStatus: getA, setup: func(f *fixture) []reconciler.Option {
		_, err := reconciler.Register(f.params, f.table, (*item).clone, nil, nil, tgB, nil,
			reconciler.WithName("b"), reconciler.WithStatusSet(getSet, dropBad))
		require.NoError(t, err)
		o57registerOwn(t, f, "c", tgC, false)
		return nil
	}}, reconciler.WithName("a"))
	objs := setItems("x", 6)
	objs = append(objs, &item{ID: "bad", Value: "v", Statuses: status.NewSet()})
	f.insertAs(objs...)
	f.waitTable("every good object Done for every name", func(txn statedb.ReadTxn) bool {
		return allKind(f, txn, "a", status.KindDone, objs[:6]) && allKind(f, txn, "b", status.KindDone, objs[:6]) &&
			allKind(f, txn, "c", status.KindDone, objs[:6])
	})
	bad, found := f.get("bad")
	require.True(t, found, "the bad object stays in the table")
	assert.NotEqual(t, status.KindDone, bad.Statuses.Get("a").Kind, "a's status of bad is not written")
	assert.NotEqual(t, status.KindDone, bad.Statuses.Get("b").Kind, "b's status of bad is not written")
	// More work after it flows for every name.
	f.insertAs(setItems("y", 5)...)
	f.waitTable("later objects Done", func(txn statedb.ReadTxn) bool {
		later := setItems("y", 5)
		return allKind(f, txn, "a", status.KindDone, later) && allKind(f, txn, "b", status.KindDone, later) &&
			allKind(f, txn, "c", status.KindDone, later)
	})
}

// Two reconcilers registered under one name on one set (two modules that
// both call their reconciler "routes") must not panic or hang: Register
// either refuses the second with ErrInvalidConfig or both converge.
func TestOutsider57DuplicateNameOnOneSet(t *testing.T) {
	tgA, tgA2, tgB := newTarget(), newTarget(), newTarget()
	var dupErr error
	getA, _ := statusOf("a")
	f := startFixture(t, tgA, &with{inSet: putSet, getStatus: getA, setup: func(f *fixture) []reconciler.Option {
		o57register(t, f, "b", tgB, false)
		require.NotPanics(t, func() {
			_, dupErr = reconciler.Register(f.params, f.table, (*item).clone, nil, nil, tgA2, nil,
				reconciler.WithName("a"), reconciler.WithStatusSet(getSet, putSet))
		})
		return nil
	}}, reconciler.WithName("a"))
	if dupErr != nil {
		assert.ErrorIs(t, dupErr, reconciler.ErrInvalidConfig)
	}
	f.insertAs(setItems("x", 10)...)
	o57waitDone(t, f, "a", "b")
	f.caughtUp()
}

// Every misuse of WithStatusSet that Register documents returns an error
// wrapping ErrInvalidConfig and never panics.
func TestOutsider57RegisterRefusesMisusedStatusSet(t *testing.T) {
	f := newFixture(t, newTarget(), &with{register: byTheTest})
	tg := newTarget()
	var nilGet func(*item) status.Set
	var nilPut func(*item, status.Set) *item
	get, set := statusOf("a")
	type call struct {
		setStatus func(*item, status.Status) *item
		getStatus func(*item) status.Status
		ops       reconciler.Operations[*item]
		batch     reconciler.BatchOperations[*item]
		opts      []reconciler.Option
	}
	opt := func(opts ...reconciler.Option) call { return call{ops: tg, opts: opts} }
	cases := map[string]call{
		"typed nil get":            opt(reconciler.WithName("a"), reconciler.WithStatusSet(nilGet, putSet)),
		"typed nil set":            opt(reconciler.WithName("a"), reconciler.WithStatusSet(getSet, nilPut)),
		"both nil":                 opt(reconciler.WithName("a"), reconciler.WithStatusSet(nilGet, nilPut)),
		"empty name":               opt(reconciler.WithName(""), reconciler.WithStatusSet(getSet, putSet)),
		"name after an empty one":  opt(reconciler.WithStatusSet(getSet, putSet), reconciler.WithName("")),
		"of any":                   opt(reconciler.WithName("a"), reconciler.WithStatusSet(func(any) status.Set { return status.Set{} }, func(o any, _ status.Set) any { return o })),
		"of the value type":        opt(reconciler.WithName("a"), reconciler.WithStatusSet(func(item) status.Set { return status.Set{} }, func(o item, _ status.Set) item { return o })),
		"of a pointer to pointer":  opt(reconciler.WithName("a"), reconciler.WithStatusSet(func(**item) status.Set { return status.Set{} }, func(o **item, _ status.Set) **item { return o })),
		"setStatus given":          {setStatus: set, ops: tg, opts: []reconciler.Option{reconciler.WithName("a"), reconciler.WithStatusSet(getSet, putSet)}},
		"getStatus given":          {getStatus: get, ops: tg, opts: []reconciler.Option{reconciler.WithName("a"), reconciler.WithStatusSet(getSet, putSet)}},
		"both given":               {setStatus: set, getStatus: get, ops: tg, opts: []reconciler.Option{reconciler.WithName("a"), reconciler.WithStatusSet(getSet, putSet)}},
		"no ops at all":            {opts: []reconciler.Option{reconciler.WithName("a"), reconciler.WithStatusSet(getSet, putSet)}},
		"batch alone, pruning on":  {batch: tg, opts: []reconciler.Option{reconciler.WithName("a"), reconciler.WithStatusSet(getSet, putSet)}},
		"without name, no get/set": opt(reconciler.WithStatusSet(getSet, putSet)),
		"name with space":          opt(reconciler.WithName("a b"), reconciler.WithStatusSet(getSet, putSet)),
		"nil option among them":    opt(reconciler.WithName("a"), nil, reconciler.WithStatusSet(getSet, putSet)),
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var err error
			var r reconciler.Reconciler[*item]
			require.NotPanics(t, func() {
				r, err = reconciler.Register(f.params, f.table, (*item).clone, c.setStatus, c.getStatus, c.ops, c.batch, c.opts...)
			})
			if name == "batch alone, pruning on" && err == nil {
				// tg has a Prune method: batch operations prune with it.
				return
			}
			require.Error(t, err)
			assert.Nil(t, r)
			assert.ErrorIs(t, err, reconciler.ErrInvalidConfig)
		})
	}
	t.Run("batch alone is fine", func(t *testing.T) {
		r, err := reconciler.Register(f.params, f.table, (*item).clone, nil, nil, nil, tg,
			reconciler.WithName("q"), reconciler.WithStatusSet(getSet, putSet))
		require.NoError(t, err)
		assert.NotNil(t, r)
	})
	t.Run("given twice", func(t *testing.T) {
		require.NotPanics(t, func() {
			_, err := reconciler.Register(f.params, f.table, (*item).clone, nil, nil, tg, nil,
				reconciler.WithName("twice"), reconciler.WithStatusSet(getSet, putSet), reconciler.WithStatusSet(getSet, putSet))
			if err != nil {
				assert.ErrorIs(t, err, reconciler.ErrInvalidConfig)
			}
		})
	})
}

// o57countingSet is a set function of item.Statuses that counts its calls
// per object version ("id=value").
type o57countingSet struct {
	mu    sync.Mutex
	calls map[string]int
}

func (c *o57countingSet) put(it *item, s status.Set) *item {
	c.mu.Lock()
	c.calls[it.ID+"="+it.Value]++
	c.mu.Unlock()
	it.Statuses = s
	return it
}

func (c *o57countingSet) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[key]
}

// In one write with reconcilers of their own setStatus on the same set,
// the reconcilers of WithStatusSet still store the set once per version,
// and the object is written once for all of them.
func TestOutsider57MixedWriteStoresTheSetOnce(t *testing.T) {
	for _, own := range []int{0, 1, 2} {
		t.Run(fmt.Sprint("own=", own), func(t *testing.T) {
			cs := &o57countingSet{calls: map[string]int{}}
			meet := newMeet(2+own, func(it *item) bool { return it.ID == "x-00000" })
			tgs := map[string]*target{"a": newTarget(), "b": newTarget(), "c": newTarget(), "d": newTarget()}
			for _, tg := range tgs {
				tg.update = meet.update
			}
			names := []string{"a", "b", "c", "d"}[:2+own]
			getA, _ := statusOf("a")
			f := startFixture(t, tgs["a"], &with{inSet: cs.put, getStatus: getA, setup: func(f *fixture) []reconciler.Option {
				if own > 0 {
					o57registerOwn(t, f, "c", tgs["c"], false)
				}
				_, err := reconciler.Register(f.params, f.table, (*item).clone, nil, nil, tgs["b"], nil,
					reconciler.WithName("b"), reconciler.WithStatusSet(getSet, cs.put))
				require.NoError(t, err)
				if own > 1 {
					o57registerOwn(t, f, "d", tgs["d"], false)
				}
				return nil
			}}, reconciler.WithName("a"))
			// A first object, so that every reconciler has run a round (as
			// the project's own tests of one write do).
			warm := setItems("w", 1)
			f.insertAs(warm...)
			o57waitDone(t, f, names...)
			for v := range 3 {
				x := setItems("x", 1)
				x[0].Value = fmt.Sprint("v", v)
				inserted := f.insertAs(x...)
				o57waitDone(t, f, names...)
				assert.Equal(t, inserted+1, f.table.Revision(f.db.ReadTxn()), "version %d: one write after the insert", v)
				assert.Equal(t, 1, cs.count("x-00000="+x[0].Value), "version %d: the set stored once for a and b", v)
			}
		})
	}
}

// Retiring the name of a reconciler still running (documented: it reads
// the missing entry as Pending and reconciles again) has that reconciler
// apply every object again, and only it.
func TestOutsider57RetireARunningNameReconcilesItAgain(t *testing.T) {
	tgA, tgB, tgC := newTarget(), newTarget(), newTarget()
	getA, _ := statusOf("a")
	f := startFixture(t, tgA, &with{inSet: putSet, getStatus: getA, setup: func(f *fixture) []reconciler.Option {
		o57register(t, f, "b", tgB, true, reconciler.WithConcurrency(2))
		o57registerOwn(t, f, "c", tgC, false)
		return nil
	}}, reconciler.WithName("a"))
	st, err := sets.Of(f.db, f.table, (*item).clone, getSet, putSet)
	require.NoError(t, err)
	objs := setItems("x", 30)
	f.insertAs(objs...)
	require.NoError(t, st.Wait(ctxFor(t, timeout), []string{"a", "b", "c"}))

	n, err := st.Retire(ctxFor(t, timeout), "b")
	require.NoError(t, err)
	assert.Equal(t, 30, n)
	f.waitTable("b Done again", func(txn statedb.ReadTxn) bool { return allKind(f, txn, "b", status.KindDone, objs) })
	require.NoError(t, st.Wait(ctxFor(t, timeout), []string{"a", "b", "c"}))
	f.caughtUp()
	for _, id := range ids(objs) {
		assert.Len(t, tgA.updates(id), 1, "a's updates of %s", id)
		assert.Len(t, tgB.updates(id), 2, "b's updates of %s", id)
		assert.Len(t, tgC.updates(id), 1, "c's updates of %s", id)
	}
}

// sets.Retired in the hive removes a name nobody serves from every object,
// also from those written later, while the reconcilers of WithStatusSet
// keep theirs and settle every object.
func TestOutsider57RetiredCellWithStatusSetReconcilers(t *testing.T) {
	tgA, tgB := newTarget(), newTarget()
	var ff *fixture
	getA, _ := statusOf("a")
	w := &with{inSet: putSet, getStatus: getA, setup: func(f *fixture) []reconciler.Option {
		ff = f
		o57register(t, f, "b", tgB, false)
		return nil
	}}
	w.last = []cell.Cell{cell.Module("retirer", "Retires gone",
		cell.ProvidePrivate(job.Registry.NewGroup),
		cell.ProvidePrivate(func() (*sets.Table[*item], error) {
			return sets.Of(ff.db, ff.table, (*item).clone, getSet, putSet)
		}),
		sets.Retired[*item]("gone"),
	)}
	f := newFixture(t, tgA, w, reconciler.WithName("a"))
	before := setItems("x", 10)
	for _, o := range before {
		o.Statuses = o.Statuses.Pending("a", "b", "gone")
	}
	f.insertAs(before...)
	f.start()
	for round := range 3 {
		later := setItems(fmt.Sprint("y", round), 10)
		for _, o := range later {
			o.Statuses = o.Statuses.Pending("a", "b", "gone")
		}
		f.insertAs(later...)
	}
	f.waitTable("every object Done for a and b, without gone", func(txn statedb.ReadTxn) bool {
		if !o57allDone(f, txn, getSet, "a", "b") {
			return false
		}
		for obj := range f.table.All(txn) {
			if !slices.Equal(o57names(obj.Statuses), []string{"a", "b"}) {
				return false
			}
		}
		return true
	})
	f.caughtUp()
	o57noDiff(t, f, map[string]*target{"a": tgA, "b": tgB})
	for obj := range f.table.All(f.db.ReadTxn()) {
		assert.Len(t, tgA.updates(obj.ID), 1, "a applied %s once", obj.ID)
		assert.Len(t, tgB.updates(obj.ID), 1, "b applied %s once", obj.ID)
	}
}

// A paused reconciler of the set, while the others write, converges on
// Resume; the others' statuses stay.
func TestOutsider57PauseOneNameOfTheSet(t *testing.T) {
	tgA, tgB := newTarget(), newTarget()
	var b reconciler.Reconciler[*item]
	getA, _ := statusOf("a")
	f := startFixture(t, tgA, &with{inSet: putSet, getStatus: getA, setup: func(f *fixture) []reconciler.Option {
		b = o57register(t, f, "b", tgB, false)
		return nil
	}}, reconciler.WithName("a"))
	b.Pause()
	objs := setItems("x", 20)
	f.insertAs(objs...)
	f.remove("x-00003")
	f.waitTable("a Done", func(txn statedb.ReadTxn) bool { return o57allDone(f, txn, getSet, "a") })
	f.caughtUp()
	assert.Empty(t, tgB.updates("x-00001"), "b is paused")
	b.Resume()
	o57waitDone(t, f, "a", "b")
	f.caughtUp()
	o57noDiff(t, f, map[string]*target{"a": tgA, "b": tgB})
}

// sets.Table.Refresh of one name of WithStatusSet reconcilers applies it
// again and only it; Marked.Wait counts every object.
func TestOutsider57RefreshOneNameOfTheSet(t *testing.T) {
	tgA, tgB := newTarget(), newTarget()
	tgB.failIDs("x-00002")
	getA, _ := statusOf("a")
	f := startFixture(t, tgA, &with{inSet: putSet, getStatus: getA, setup: func(f *fixture) []reconciler.Option {
		o57register(t, f, "b", tgB, true, reconciler.WithConcurrency(2), reconciler.WithRetry(time.Hour, time.Hour))
		return nil
	}}, reconciler.WithName("a"))
	st, err := sets.Of(f.db, f.table, (*item).clone, getSet, putSet)
	require.NoError(t, err)
	objs := setItems("x", 10)
	f.insertAs(objs...)
	err = st.Wait(ctxFor(t, timeout), []string{"a", "b"}, sets.DoneOrError())
	require.ErrorIs(t, err, reconciler.ErrObjectFailed)
	assert.Contains(t, err.Error(), "x-00002")

	m, err := st.Refresh(ctxFor(t, timeout), "b")
	require.NoError(t, err)
	res, err := m.Wait(ctxFor(t, timeout))
	require.NoError(t, err)
	assert.Equal(t, 9, res.Done)
	require.Len(t, res.Failed, 1)
	assert.Equal(t, 0, res.Deleted)
	f.caughtUp()
	for _, id := range ids(objs) {
		assert.Len(t, tgA.updates(id), 1, "a is not refreshed: %s", id)
	}
	cur, _ := f.get("x-00005")
	assert.Equal(t, status.KindDone, cur.Statuses.Get("a").Kind)
	assert.Equal(t, status.KindDone, cur.Statuses.Get("b").Kind)
}

// Many objects at once, in batches, with workers and one name of its own
// status: every object Done for every name and no stray names.
func TestOutsider57LargeRoundsWithBatches(t *testing.T) {
	names := []string{"a", "b", "c", "d"}
	tgs := map[string]*target{}
	for _, n := range names {
		tgs[n] = newTarget()
	}
	getA, _ := statusOf("a")
	w := &with{inSet: putSet, getStatus: getA, batch: tgs["a"], setup: func(f *fixture) []reconciler.Option {
		o57register(t, f, "b", tgs["b"], true, reconciler.WithConcurrency(4))
		o57register(t, f, "c", tgs["c"], false, reconciler.WithConcurrency(3))
		o57registerOwn(t, f, "d", tgs["d"], true, reconciler.WithConcurrency(2))
		return nil
	}}
	f := startFixture(t, tgs["a"], w, reconciler.WithName("a"), reconciler.WithConcurrency(2))
	objs := setItems("x", 3000)
	f.insertAs(objs...)
	for i := 0; i < 3000; i += 500 {
		next := setItems("x", i+250)[i:]
		for _, o := range next {
			o.Value = "v2"
		}
		f.insertAs(next...)
	}
	o57waitDone(t, f, names...)
	f.caughtUp()
	o57noDiff(t, f, tgs)
	for obj := range f.table.All(f.db.ReadTxn()) {
		if !assert.Equal(t, names, o57names(obj.Statuses), "%s", obj.ID) {
			break
		}
	}
}

// A terminal Error of one name stays while the others are Done, and a new
// version clears it for every name.
func TestOutsider57TerminalErrorOfOneName(t *testing.T) {
	tgA, tgB := newTarget(), newTarget()
	tgA.failWhen(reconciler.TerminalError(errKitObject), func(op reconcilertest.Op, it *item) bool {
		return it != nil && it.ID == "x-00001" && it.Value == "v"
	})
	getA, _ := statusOf("a")
	f := startFixture(t, tgA, &with{inSet: putSet, getStatus: getA, setup: func(f *fixture) []reconciler.Option {
		o57register(t, f, "b", tgB, false)
		return nil
	}}, reconciler.WithName("a"))
	f.insertAs(setItems("x", 3)...)
	obj, err := reconciler.WaitForObject(ctxFor(t, timeout), f.db, f.table, itemID.Query("x-00001"),
		func(it *item) status.Status { return it.Statuses.Get("a") })
	require.ErrorIs(t, err, reconciler.ErrObjectFailed)
	assert.True(t, obj.Statuses.Get("a").Terminal)
	f.waitTable("b Done", func(txn statedb.ReadTxn) bool { return o57allDone(f, txn, getSet, "b") })
	cur, _ := f.get("x-00001")
	assert.True(t, cur.Statuses.Get("a").Terminal, "a's terminal error stays")
	next := cur.clone()
	next.Value = "v2"
	next.Statuses = next.Statuses.Pending()
	f.insertAs(next)
	o57waitDone(t, f, "a", "b")
	f.caughtUp()
	o57noDiff(t, f, map[string]*target{"a": tgA, "b": tgB})
}

// Two sets in one object, each with two reconcilers of WithStatusSet, in
// one write: each set is stored once per version, and the object once.
func TestOutsider57TwoSetsInOneWriteStoreEachSetOnce(t *testing.T) {
	for _, others := range []int{1, 2} {
		t.Run(fmt.Sprint("other=", others), func(t *testing.T) { outsider57TwoSets(t, others) })
	}
}

func outsider57TwoSets(t *testing.T, others int) {
	otherNames := []string{"o", "q"}[:others]
	cs := &o57countingSet{calls: map[string]int{}}
	co := &o57countingSet{calls: map[string]int{}}
	getOther := func(it *item) status.Set { return it.Other }
	putOther := func(it *item, s status.Set) *item {
		co.mu.Lock()
		co.calls[it.ID+"="+it.Value]++
		co.mu.Unlock()
		it.Other = s
		return it
	}
	meet := newMeet(2+others, func(it *item) bool { return it.ID == "x-00000" })
	tgs := map[string]*target{}
	for _, n := range []string{"a", "b", "o", "q"} {
		tgs[n] = newTarget()
		tgs[n].update = meet.update
	}
	getA, _ := statusOf("a")
	f := startFixture(t, tgs["a"], &with{inSet: cs.put, getStatus: getA, setup: func(f *fixture) []reconciler.Option {
		for _, n := range append([]string{"b"}, otherNames...) {
			get, put := getSet, cs.put
			if n != "b" {
				get, put = getOther, putOther
			}
			_, err := reconciler.Register(f.params, f.table, (*item).clone, nil, nil, tgs[n], nil,
				reconciler.WithName(n), reconciler.WithStatusSet(get, put))
			require.NoError(t, err)
		}
		return nil
	}}, reconciler.WithName("a"))
	warm := setItems("w", 1)
	warm[0].Other = status.NewSet()
	f.insertAs(warm...)
	f.waitTable("the first object", func(txn statedb.ReadTxn) bool {
		return o57allDone(f, txn, getSet, "a", "b") && o57allDone(f, txn, getOther, otherNames...)
	})
	for v := range 3 {
		x := setItems("x", 1)
		x[0].Value = fmt.Sprint("v", v)
		x[0].Other = status.NewSet()
		inserted := f.insertAs(x...)
		f.waitTable("every status", func(txn statedb.ReadTxn) bool {
			return o57allDone(f, txn, getSet, "a", "b") && o57allDone(f, txn, getOther, otherNames...)
		})
		cur, _ := f.get("x-00000")
		assert.Equal(t, []string{"a", "b"}, o57names(cur.Statuses))
		assert.Equal(t, otherNames, o57names(cur.Other))
		assert.Equal(t, inserted+1, f.table.Revision(f.db.ReadTxn()), "version %d: one write after the insert", v)
		assert.Equal(t, 1, cs.count("x-00000="+x[0].Value), "version %d: Statuses stored once for a and b", v)
		assert.Equal(t, 1, co.count("x-00000="+x[0].Value), "version %d: Other stored once for %v", v, otherNames)
	}
}

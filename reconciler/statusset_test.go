package reconciler_test

// Several reconcilers of one table keeping their statuses in a status.Set
// (WithStatusSet), among reconcilers of a setStatus of their own on an
// entry of that set, and with a second set (item.Other). From an outside
// review (h57) of "Several reconcilers of one table", WithStatusSet,
// Register and docs/control.md. Elsewhere: reconcilers of own setters on
// one set, held back (an Update in flight at a stop or as its object is
// deleted and written again, one paused), in shared_test.go; a
// name joining, testdata/sets_join.txtar; sets.Table.Refresh of one name,
// testdata/sets_refresh.txtar; names joining and leaving under chaos,
// chaos_sets_test.go.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
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

// setRig is a fixture of several reconcilers of the items table, each
// with a target of its name.
type setRig struct {
	*fixture
	names      []string        // in the order registered
	other, own map[string]bool // in item.Other, not item.Statuses; of a setStatus of their own, not WithStatusSet
	tgs        map[string]*target
	recs       map[string]reconciler.Reconciler[*item]
	opts       []reconciler.Option // every reconciler's
	// set, if not nil, is called by the set functions of WithStatusSet (on
	// item.Other if other) with the object given, and returns the object
	// they store the set on; set it before the start.
	set func(it *item, other bool) *item
}

// newSetRig populates (does not start) a fixture of the reconcilers of
// spec, registered in its order (see join); the first, the fixture's
// (f.rec, f.status), must keep its status in item.Statuses.
func newSetRig(t *testing.T, spec string, w *with, opts ...reconciler.Option) *setRig {
	r := &setRig{other: map[string]bool{}, own: map[string]bool{}, tgs: map[string]*target{},
		recs: map[string]reconciler.Reconciler[*item]{}, opts: opts}
	if w == nil {
		w = &with{}
	}
	words, setup := strings.Fields(spec), w.setup
	first, _, _ := strings.Cut(words[0], ":")
	w.register, w.getStatus = byTheTest, func(it *item) status.Status { return it.Statuses.Get(first) }
	w.setup = func(f *fixture) []reconciler.Option {
		r.fixture = f
		for _, word := range words {
			r.join(t, word)
		}
		f.rec = r.recs[first]
		if setup != nil {
			return setup(f)
		}
		return nil
	}
	newFixture(t, nil, w)
	return r
}

// join registers a reconciler, also on the running hive, of a word
// "name" or "name:flags", flags among own (a setStatus of its own on its
// entry, not WithStatusSet), other (in item.Other, not item.Statuses),
// batch, and a number of workers.
func (r *setRig) join(t *testing.T, word string) {
	name, flags, _ := strings.Cut(word, ":")
	tg := newTarget()
	opts := append([]reconciler.Option{reconciler.WithName(name)}, r.opts...)
	var batch reconciler.BatchOperations[*item]
	for _, fl := range strings.Split(flags, ",") {
		if n, err := strconv.Atoi(fl); err == nil {
			opts = append(opts, reconciler.WithConcurrency(n))
		} else if fl == "batch" {
			batch = tg
		}
		r.own[name], r.other[name] = r.own[name] || fl == "own", r.other[name] || fl == "other"
	}
	other := r.other[name]
	var get func(*item) status.Status
	var set func(*item, status.Status) *item
	if r.own[name] {
		get = func(it *item) status.Status { return setOf(it, other).Get(name) }
		set = func(it *item, s status.Status) *item { *setOf(it, other) = setOf(it, other).Set(name, s); return it }
	} else {
		opts = append(opts, reconciler.WithStatusSet(func(it *item) status.Set { return *setOf(it, other) }, r.put(other)))
	}
	rec, err := reconciler.Register(r.params, r.table, (*item).clone, set, get, tg, batch, opts...)
	require.NoError(t, err, word)
	r.names, r.tgs[name], r.recs[name] = append(r.names, name), tg, rec
}

// setOf returns the address of item.Other if other, else of item.Statuses.
func setOf(it *item, other bool) *status.Set {
	if other {
		return &it.Other
	}
	return &it.Statuses
}

// put is the set function of WithStatusSet on item.Other or item.Statuses.
func (r *setRig) put(other bool) func(*item, status.Set) *item {
	return func(it *item, s status.Set) *item {
		if r.set != nil {
			it = r.set(it, other)
		}
		*setOf(it, other) = s
		return it
	}
}

// done reports whether every object is Done for each of names (for every
// name if none).
func (r *setRig) done(txn statedb.ReadTxn, names ...string) bool {
	if len(names) == 0 {
		names = r.names
	}
	for obj := range r.table.All(txn) {
		for _, n := range names {
			if setOf(obj, r.other[n]).Get(n).Kind != status.KindDone {
				return false
			}
		}
	}
	return true
}

func (r *setRig) waitDone(names ...string) {
	r.t.Helper()
	r.waitTable(fmt.Sprint("every object Done for ", names), func(txn statedb.ReadTxn) bool { return r.done(txn, names...) })
}

// meet makes every target's Update of a version that match takes (all
// if nil) return only once all targets are in it: the reconcilers are in
// one round for it, and their statuses go into one write. Later attempts
// return at once. Call it before the start.
func (r *setRig) meet(match func(*item) bool) {
	var mu sync.Mutex
	arrived, all := map[string]int{}, map[string]chan struct{}{}
	for _, tg := range r.tgs {
		tg.update = func(ctx context.Context, it *item) error {
			if match != nil && !match(it) {
				return nil
			}
			k := it.ID + "=" + it.Value
			mu.Lock()
			if all[k] == nil {
				all[k] = make(chan struct{})
			}
			ch := all[k]
			if arrived[k]++; arrived[k] == len(r.tgs) {
				close(ch)
			}
			mu.Unlock()
			select {
			case <-ch:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// in returns the names keeping their status in item.Other (other) or
// item.Statuses, sorted.
func (r *setRig) in(other bool) (names []string) {
	for _, n := range r.names {
		if r.other[n] == other {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// noDiff checks that every target holds exactly the table.
func (r *setRig) noDiff() {
	r.t.Helper()
	for n, tg := range r.tgs {
		assert.Empty(r.t, tg.Diff(r.db.ReadTxn(), r.table), "target of %s", n)
	}
}

// applied checks how many times the names of want applied each of ids.
func (r *setRig) applied(want map[string]int, ids ...string) {
	r.t.Helper()
	for _, id := range ids {
		for n, k := range want {
			assert.Len(r.t, r.tgs[n].updates(id), k, "%s's updates of %s", n, id)
		}
	}
}

func setNames(s status.Set) (names []string) {
	for n := range s.All() {
		names = append(names, n)
	}
	return names
}

// In one round on one object, the reconcilers write it once and store each
// set once per version, whatever reconcilers of their own setStatus are in
// the round and in whatever order they registered, and each name's status
// is in its set, only there. c06819e: a run with a member of its own
// setStatus stored the set once per member, and with two sets in one object
// the first was copied three times over.
func TestStatusSetOneWriteStoresEachSetOnce(t *testing.T) {
	for _, spec := range []string{
		"a b c:own", "a b c:own d:own", "a c:own b d:own", "a b o:other", "a b o:other q:other",
		"a b c:own o:other p:own,other",
		"fresh a b", // a set function returning another object than the clone it was given
	} {
		t.Run(spec, func(t *testing.T) {
			names, fresh := strings.CutPrefix(spec, "fresh ")
			r := newSetRig(t, names, nil)
			var mu sync.Mutex
			puts := map[string]int{} // the set functions' calls, by "other:id=value"
			r.set = func(it *item, other bool) *item {
				mu.Lock()
				defer mu.Unlock()
				puts[fmt.Sprint(other, ":", it.ID, "=", it.Value)]++
				if fresh {
					c := *it
					return &c
				}
				return it
			}
			r.meet(nil)
			r.start()
			for v := range 4 { // v0 first, so that every reconciler has run a round
				x := setItems("x", 1)
				x[0].Value, x[0].Other = fmt.Sprint("v", v), status.NewSet()
				inserted := r.insertAs(x...)
				r.waitDone()
				cur, _ := r.get("x-00000")
				assert.Equal(t, r.in(false), setNames(cur.Statuses), "version %d: names in Statuses", v)
				assert.Equal(t, r.in(true), setNames(cur.Other), "version %d: names in Other", v)
				for n, tg := range r.tgs {
					assert.True(t, tg.has("x-00000", x[0].Value), "%s applied version %d", n, v)
				}
				if v == 0 {
					continue
				}
				assert.Equal(t, inserted+1, r.table.Revision(r.db.ReadTxn()), "version %d: one write after the insert", v)
				mu.Lock()
				assert.Equal(t, 1, puts["false:x-00000="+x[0].Value], "version %d: Statuses stored once", v)
				assert.Equal(t, map[bool]int{true: 1}[strings.Contains(names, "o:other")], puts["true:x-00000="+x[0].Value], "version %d: Other stored once", v)
				mu.Unlock()
			}
			r.caughtUp()
			r.noDiff()
		})
	}
}

// One name failing an object keeps its Error, with the error's text, in
// the set across its retries, or its terminal Error, while the others stay
// Done and do not apply the object again for its writes; recovered (or a
// new version), the object is Done for every name.
func TestStatusSetFailingNameKeepsItsErrorOthersKeepDone(t *testing.T) {
	for _, terminal := range []bool{false, true} {
		t.Run(fmt.Sprint("terminal=", terminal), func(t *testing.T) {
			r := newSetRig(t, "a b c:own", nil, reconciler.WithRetry(time.Millisecond, 5*time.Millisecond))
			a := r.tgs["a"]
			fault := map[bool]error{false: errKitObject, true: reconciler.TerminalError(errKitObject)}[terminal]
			a.failWhen(fault, func(_ reconcilertest.Op, it *item) bool { return it != nil && it.ID == "x-00001" && it.Value == "v" })
			r.start()
			objs := setItems("x", 5)
			r.insertAs(objs...)
			obj, err := reconciler.WaitForObject(ctxFor(t, timeout), r.db, r.table, itemID.Query("x-00001"),
				func(it *item) status.Status { return it.Statuses.Get("a") }, reconciler.StopOnError())
			require.ErrorIs(t, err, reconciler.ErrObjectFailed)
			assert.Equal(t, terminal, obj.Statuses.Get("a").Terminal)
			assert.Contains(t, obj.Statuses.Get("a").Error, errKitObject.Error())
			r.waitDone("b", "c")
			if !terminal {
				a.waitStarts(t, "a's fifth attempt", func() bool { return a.attempts(reconcilertest.OpUpdate, "x-00001") >= 5 })
			}
			cur, _ := r.get("x-00001")
			assert.Equal(t, status.KindError, cur.Statuses.Get("a").Kind, "a's error stays")
			assert.True(t, r.done(r.db.ReadTxn(), "b", "c"), "b and c stay Done")
			if terminal {
				cur = cur.clone()
				cur.Value, cur.Statuses = "v2", cur.Statuses.Pending()
				r.insertAs(cur)
			} else {
				a.recover()
			}
			r.waitDone()
			r.caughtUp()
			r.noDiff()
			r.applied(map[string]int{"b": 1, "c": 1}, "x-00000", "x-00002", "x-00003", "x-00004")
			again := map[bool]int{false: 1, true: 2}[terminal] // the new version
			r.applied(map[string]int{"b": again, "c": again}, "x-00001")
		})
	}
}

// With workers, batch operations, failures once per name and version, and
// the table written and deleted from meanwhile (some objects left as they
// are, some written with every name marked Pending), every name converges:
// every object Done for every name, no other name in the set, each target
// holding the table, and sets.Table.Wait, WaitForReconciliation and
// WaitUntilReconciled agreeing (each returning with that name's statuses
// in the table: for own setters, TestAWaitOfOneOfSeveralReconcilersReturnsWithItsStatusesInTheTable).
// The last: thousands of objects at once.
func TestStatusSetChurnConvergesForEveryName(t *testing.T) {
	for _, c := range []struct {
		spec string
		n    int
	}{{"a b c d:own", 40}, {"a:4 b:4 c:4 d:own,4", 40}, {"a:batch b:batch c:batch d:own,batch", 40},
		{"a:batch,4 b:batch,4 c:batch,4 d:own,batch,4", 40}, {"a:batch,2 b:batch,4 c:3 d:own,batch,2", 3000}} {
		t.Run(c.spec, func(t *testing.T) {
			r := newSetRig(t, c.spec, nil, reconciler.WithPruning(0), reconciler.WithRetry(time.Millisecond, 5*time.Millisecond))
			var mu sync.Mutex
			failed := map[string]bool{}
			for n, tg := range r.tgs {
				tg.failWhen(errKitObject, func(op reconcilertest.Op, it *item) bool {
					mu.Lock()
					defer mu.Unlock()
					k := n + string(op) + it.ID + it.Value // each name fails each version of some objects once
					first := strings.HasSuffix(it.ID, "7") && !failed[k]
					failed[k] = true
					return first
				})
			}
			r.start()
			st, err := sets.Of(r.db, r.table, (*item).clone, getSet, putSet)
			require.NoError(t, err)
			for round := range 6 {
				wtxn := r.db.WriteTxn(r.table)
				for i, o := range setItems("o", c.n) {
					o.Value = fmt.Sprintf("r%d-%d", round, i%3)
					if cur, _, found := r.table.Get(wtxn, itemID.Query(o.ID)); found && i%5 == 0 {
						continue // left as it is
					} else if found && i%4 == 0 {
						o.Statuses = cur.Statuses.Pending() // every name marked Pending
					}
					_, _, err := r.table.Insert(wtxn, o)
					require.NoError(t, err)
				}
				wtxn.Commit()
				for i := round; round%2 == 1 && i < c.n; i += 7 {
					r.remove(fmt.Sprintf("o-%05d", i))
				}
			}
			rev := r.table.Revision(r.db.ReadTxn())
			for n, rec := range r.recs {
				reached, _, err := rec.WaitUntilReconciled(ctxFor(t, timeout), rev)
				require.NoError(t, err, n)
				assert.GreaterOrEqual(t, reached, rev, n)
				for obj := range r.table.All(r.db.ReadTxn()) { // its statuses are in the table
					require.NotEqual(t, status.KindPending, setOf(obj, false).Get(n).Kind, "%s's status of %s once WaitUntilReconciled returned", n, obj.ID)
				}
			}
			r.waitDone()
			require.NoError(t, st.Wait(ctxFor(t, timeout), r.names))
			r.waitReconciled()
			for n, rec := range r.recs {
				r.rec = rec
				r.converged(r.tgs[n]) // no retries left, the target holding the table
			}
			for obj := range r.table.All(r.db.ReadTxn()) {
				if !assert.Equal(t, r.in(false), setNames(obj.Statuses), "%s", obj.ID) {
					break
				}
			}
		})
	}
}

// Who applies a write of an object: with NewSet, every name once (reading
// another's status write costs nothing), after a delete too; marked
// Pending for one name, that name alone, the others keeping their Done;
// with the zero Set, every name (its missing names read as Pending without
// identity, so a name may apply a version more than once).
func TestStatusSetWhatAWriteMarksIsApplied(t *testing.T) {
	r := newSetRig(t, "a b c:own", nil)
	r.start()
	want := map[string]int{"a": 0, "b": 0, "c": 0}
	write := func(obj *item, names ...string) {
		r.insertAs(obj)
		r.waitDone()
		r.caughtUp()
		r.noDiff()
		for _, n := range names {
			want[n]++
		}
		r.applied(want, "z")
	}
	for v := range 3 {
		write(&item{ID: "z", Value: fmt.Sprint("v", v), Statuses: status.NewSet()}, "a", "b", "c")
	}
	r.remove("z")
	write(&item{ID: "z", Value: "v2", Statuses: status.NewSet()}, "a", "b", "c")
	for _, name := range []string{"b", "c", "a"} {
		cur, _ := r.get("z")
		next := cur.clone()
		next.Statuses = next.Statuses.Set(name, status.Pending())
		write(next, name)
	}
	for v := range 2 {
		r.insertAs(&item{ID: "z", Value: fmt.Sprint("zero", v)})
		r.waitDone()
		r.caughtUp()
		r.noDiff()
	}
	for n, tg := range r.tgs {
		got := slices.Compact(tg.updates("z"))
		assert.Equal(t, []string{"v2", "zero0", "zero1"}, got[len(got)-3:], "%s applied each of the zero Set's writes, in order", n)
	}
}

// A set function that drops the primary key of one object leaves that
// object alone, without a panic, its statuses unwritten; every other
// object converges for every name, the shared write included, and so does
// what is written later.
func TestStatusSetFunctionDroppingTheKeyLeavesOthersAlone(t *testing.T) {
	r := newSetRig(t, "a b c:own", nil)
	r.set = func(it *item, _ bool) *item { it.NoKey = it.ID == "bad"; return it }
	r.meet(nil)
	r.start()
	r.insertAs(append(setItems("x", 6), &item{ID: "bad", Value: "v", Statuses: status.NewSet()})...)
	good := func(prefix string) {
		r.waitTable("every good object Done for every name", func(txn statedb.ReadTxn) bool {
			objs := setItems(prefix, 5)
			return allKind(r.fixture, txn, "a", status.KindDone, objs) && allKind(r.fixture, txn, "b", status.KindDone, objs) &&
				allKind(r.fixture, txn, "c", status.KindDone, objs)
		})
	}
	good("x")
	bad, found := r.get("bad")
	require.True(t, found, "the bad object stays in the table")
	assert.NotEqual(t, status.KindDone, bad.Statuses.Get("a").Kind, "a's status of bad is not written")
	assert.NotEqual(t, status.KindDone, bad.Statuses.Get("b").Kind, "b's status of bad is not written")
	r.insertAs(setItems("y", 5)...)
	good("y")
}

// Register refuses WithStatusSet with a getStatus (with a setStatus:
// TestRegisterRejectsBadInput) and takes it with batch operations alone;
// given twice, or a name given twice on one set (two modules both calling
// theirs "routes"), it neither panics nor hangs: it refuses with
// ErrInvalidConfig, or every object converges.
func TestStatusSetRegisterMisuses(t *testing.T) {
	ws := reconciler.WithStatusSet(getSet, putSet)
	r := newSetRig(t, "a b", &with{setup: func(f *fixture) []reconciler.Option {
		get, _ := statusOf("a")
		require.NotPanics(t, func() {
			rec, err := reconciler.Register(f.params, f.table, (*item).clone, nil, get, newTarget(), nil, reconciler.WithName("g"), ws)
			assert.ErrorIs(t, err, reconciler.ErrInvalidConfig, "a getStatus")
			assert.Nil(t, rec)
			for what, opts := range map[string][]reconciler.Option{"given twice": {reconciler.WithName("w"), ws, ws}, "a name twice": {reconciler.WithName("a"), ws}} {
				if _, err := reconciler.Register(f.params, f.table, (*item).clone, nil, nil, newTarget(), nil, opts...); err != nil {
					assert.ErrorIs(t, err, reconciler.ErrInvalidConfig, what)
				}
			}
		})
		rec, err := reconciler.Register(f.params, f.table, (*item).clone, nil, nil, nil, newTarget(), reconciler.WithName("q"), ws)
		require.NoError(t, err, "batch operations alone")
		assert.NotNil(t, rec)
		return nil
	}})
	r.start()
	r.insertAs(setItems("x", 10)...)
	r.waitDone()
	r.caughtUp()
}

// Names that come and go. A reconciler of the set registered while the
// hive runs, with writes going on, reconciles every object, and the others
// do not apply again objects that did not change. Retiring names nobody
// serves, by sets.Retired in the hive (gone, also from objects written
// later) and by sets.Table.Retire while an Update of another name is in
// flight (old), removes only their entries: the others stay Done and are
// not applied again. Retiring the name of a reconciler still running (b;
// documented: it reads the missing entry as Pending) has it, and only it,
// apply every object again. sets.Table.Wait and WaitForReconciliation agree
// with the table throughout.
func TestStatusSetNamesJoinAndLeave(t *testing.T) {
	var f *fixture
	r := newSetRig(t, "a b c:own", &with{setup: func(ff *fixture) []reconciler.Option { f = ff; return nil },
		last: []cell.Cell{cell.Module("retirer", "Retires gone",
			cell.ProvidePrivate(job.Registry.NewGroup),
			cell.ProvidePrivate(func() (*sets.Table[*item], error) { return sets.Of(f.db, f.table, (*item).clone, getSet, putSet) }),
			sets.Retired[*item]("gone"),
		)}})
	named := func(objs []*item) []*item {
		for _, o := range objs {
			o.Statuses = o.Statuses.Pending("a", "b", "gone", "old")
		}
		return objs
	}
	objs := named(setItems("x", 10))
	r.insertAs(objs...)
	r.start()
	st, err := sets.Of(r.db, r.table, (*item).clone, getSet, putSet)
	require.NoError(t, err)
	require.NoError(t, st.Wait(ctxFor(t, timeout), []string{"a", "b"}))
	r.join(t, "j:3")
	for round := range 3 {
		later := named(setItems(fmt.Sprint("y", round), 10))
		r.insertAs(later...)
		objs = append(objs, later...)
	}
	require.NoError(t, st.Wait(ctxFor(t, timeout), []string{"a", "b", "j"}))
	_, _, err = r.recs["j"].WaitUntilReconciled(ctxFor(t, timeout), r.table.Revision(r.db.ReadTxn()))
	require.NoError(t, err)

	held := r.tgs["a"].hold("x-00004") // a new version's Update, held while old retires
	v2 := named(setItems("x", 5)[4:])[0]
	v2.Value = "v2"
	r.insertAs(v2)
	held.wait(t)
	n, err := st.Retire(ctxFor(t, timeout), "old")
	require.NoError(t, err)
	assert.Equal(t, 40, n)
	held.let()
	require.NoError(t, st.Wait(ctxFor(t, timeout), []string{"a", "b", "j"}))
	r.waitTable("gone and old removed", func(txn statedb.ReadTxn) bool {
		for obj := range r.table.All(txn) {
			if !slices.Equal(setNames(obj.Statuses), []string{"a", "b", "c", "j"}) {
				return false
			}
		}
		return r.done(txn)
	})
	r.caughtUp()
	r.noDiff()
	once := slices.DeleteFunc(ids(objs), func(id string) bool { return id == "x-00004" })
	r.applied(map[string]int{"a": 1, "b": 1, "c": 1, "j": 1}, once...)
	r.applied(map[string]int{"a": 2, "b": 2, "c": 2, "j": 2}, "x-00004")

	n, err = st.Retire(ctxFor(t, timeout), "b")
	require.NoError(t, err)
	assert.Equal(t, 40, n)
	r.waitTable("b Done again", func(txn statedb.ReadTxn) bool { return allKind(r.fixture, txn, "b", status.KindDone, objs) })
	require.NoError(t, st.Wait(ctxFor(t, timeout), r.names))
	r.caughtUp()
	r.applied(map[string]int{"a": 1, "b": 2, "c": 1, "j": 1}, once...)
}

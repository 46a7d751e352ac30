package reconciler_test

// Several reconcilers of one table keeping their statuses in a status.Set
// (WithStatusSet), among reconcilers of a setStatus of their own on an
// entry of that set, and with a second set (item.Other). From an outside
// review (h57) of "Several reconcilers of one table", WithStatusSet,
// Register and docs/control.md. (Two reconcilers of own setters:
// shared_test.go; a name joining: testdata/sets_join.txtar; sets.Table.Refresh
// of one name: testdata/sets_refresh.txtar.)

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
	names []string        // in the order registered; names[0] is the fixture's
	other map[string]bool // the names keeping their status in item.Other
	own   map[string]bool // the names of a setStatus of their own
	tgs   map[string]*target
	recs  map[string]reconciler.Reconciler[*item]
	opts  []reconciler.Option // every reconciler's
	// set, if not nil, gives the object a set function of WithStatusSet
	// stores the set on (it may return another); set it before the start.
	set  func(*item) *item
	mu   sync.Mutex
	puts map[string]int // calls of the set functions, by "field:id=value"
}

// newSetRig populates (does not start) a fixture of the reconcilers of
// spec, registered in its order: words "name" or "name:flags", flags
// among own (a setStatus of its own on its entry, not WithStatusSet),
// other (in item.Other, not item.Statuses), batch, and a number of
// workers. The first, the fixture's, is of WithStatusSet on item.Statuses.
func newSetRig(t *testing.T, spec string, w *with, opts ...reconciler.Option) *setRig {
	r := &setRig{other: map[string]bool{}, own: map[string]bool{}, tgs: map[string]*target{}, recs: map[string]reconciler.Reconciler[*item]{},
		opts: opts, puts: map[string]int{}}
	words := strings.Fields(spec)
	a, aOpts, aBatch := r.member(t, words[0])
	if w == nil {
		w = &with{}
	}
	w.inSet, w.getStatus = r.put(false), func(it *item) status.Status { return it.Statuses.Get(a) }
	if aBatch {
		w.batch = r.tgs[a]
	}
	setup := w.setup
	w.setup = func(f *fixture) []reconciler.Option {
		r.fixture = f
		for _, word := range words[1:] {
			r.join(t, word)
		}
		if setup != nil {
			return setup(f)
		}
		return nil
	}
	newFixture(t, r.tgs[a], w, aOpts...)
	r.recs[a] = r.rec
	return r
}

// member parses a word of a spec, making its target, and returns its
// name and, if it is of WithStatusSet on item.Statuses, its options.
func (r *setRig) member(t *testing.T, word string) (name string, opts []reconciler.Option, batch bool) {
	name, flags, _ := strings.Cut(word, ":")
	opts = append([]reconciler.Option{reconciler.WithName(name)}, r.opts...)
	for _, fl := range strings.Split(flags, ",") {
		switch fl {
		case "":
		case "own":
			r.own[name] = true
		case "other":
			r.other[name] = true
		case "batch":
			batch = true
		default:
			n, err := strconv.Atoi(fl)
			require.NoError(t, err, word)
			opts = append(opts, reconciler.WithConcurrency(n))
		}
	}
	require.False(t, len(r.names) == 0 && (r.own[name] || r.other[name]), "the first must be of WithStatusSet on item.Statuses")
	r.names = append(r.names, name)
	r.tgs[name] = newTarget()
	if !r.own[name] {
		field := r.other[name]
		opts = append(opts, reconciler.WithStatusSet(func(it *item) status.Set { return *setOf(it, field) }, r.put(field)))
	}
	return name, opts, batch
}

// join registers the reconciler of a word of a spec (see newSetRig), also
// on the running hive.
func (r *setRig) join(t *testing.T, word string) {
	name, opts, batch := r.member(t, word)
	var get func(*item) status.Status
	var set func(*item, status.Status) *item
	if r.own[name] {
		field := r.other[name]
		get = func(it *item) status.Status { return setOf(it, field).Get(name) }
		set = func(it *item, s status.Status) *item { *setOf(it, field) = setOf(it, field).Set(name, s); return it }
	}
	var b reconciler.BatchOperations[*item]
	if batch {
		b = r.tgs[name]
	}
	rec, err := reconciler.Register(r.params, r.table, (*item).clone, set, get, r.tgs[name], b, opts...)
	require.NoError(t, err)
	r.recs[name] = rec
}

// setOf returns item.Other's address if other, else item.Statuses'.
func setOf(it *item, other bool) *status.Set {
	if other {
		return &it.Other
	}
	return &it.Statuses
}

// put is the set function of WithStatusSet on item.Other (other) or
// item.Statuses; it counts its calls.
func (r *setRig) put(other bool) func(*item, status.Set) *item {
	return func(it *item, s status.Set) *item {
		r.mu.Lock()
		r.puts[fmt.Sprint(other, ":", it.ID, "=", it.Value)]++
		r.mu.Unlock()
		if r.set != nil {
			it = r.set(it)
		}
		*setOf(it, other) = s
		return it
	}
}

func (r *setRig) putsOf(other bool, version string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.puts[fmt.Sprint(other, ":", version)]
}

// of returns name's status of obj.
func (r *setRig) of(obj *item, name string) status.Status { return setOf(obj, r.other[name]).Get(name) }

// done reports whether every object is Done for each of names (for every
// name if none).
func (r *setRig) done(txn statedb.ReadTxn, names ...string) bool {
	if len(names) == 0 {
		names = r.names
	}
	for obj := range r.table.All(txn) {
		for _, n := range names {
			if r.of(obj, n).Kind != status.KindDone {
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

// meet makes every target's Update of a version that match takes (every
// one if nil) return only once all targets are in it: the reconcilers are
// in one round for it, and their statuses go into one write. Later
// attempts of a version met return at once. Call it before the start.
func (r *setRig) meet(match func(*item) bool) {
	var mu sync.Mutex
	arrived, all := map[string]int{}, map[string]chan struct{}{}
	update := func(ctx context.Context, it *item) error {
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
	for _, tg := range r.tgs {
		tg.update = update
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
	txn := r.db.ReadTxn()
	for n, tg := range r.tgs {
		assert.Empty(r.t, tg.Diff(txn, r.table), "target of %s", n)
	}
}

// applied checks how many times each object of ids was applied by each of
// the names of want.
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
			if fresh {
				r.set = func(it *item) *item { c := *it; return &c }
			}
			r.meet(nil)
			r.start()
			for v := range 4 {
				x := setItems("x", 1) // the first, so that every reconciler has run a round
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
				assert.Equal(t, 1, r.putsOf(false, "x-00000="+x[0].Value), "version %d: Statuses stored once", v)
				for _, n := range r.in(true) {
					if !r.own[n] {
						assert.Equal(t, 1, r.putsOf(true, "x-00000="+x[0].Value), "version %d: Other stored once", v)
						break
					}
				}
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
			fault := errKitObject
			if terminal {
				fault = reconciler.TerminalError(errKitObject)
			}
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

// failsOnce makes tg fail, once with errKitObject, each call that key
// gives a key to ("" for none).
func failsOnce(tg *target, key func(op reconcilertest.Op, it *item) string) {
	var mu sync.Mutex
	failed := map[string]bool{}
	tg.failWhen(errKitObject, func(op reconcilertest.Op, it *item) bool {
		k := key(op, it)
		mu.Lock()
		defer mu.Unlock()
		first := k != "" && !failed[k]
		failed[k] = true
		return first
	})
}

// With workers, batch operations, failures once per name and version, and
// the table written and deleted from meanwhile (some objects left as they
// are, some written with every name marked Pending), every name
// converges: every object Done for every name, no other name in the set,
// each target holding the table, and sets.Table.Wait,
// WaitForReconciliation and WaitUntilReconciled agreeing.
func TestStatusSetChurnConvergesForEveryName(t *testing.T) {
	forVariants(t, variants, func(t *testing.T, v variant) {
		spec := "a b c d:own"
		if v.batch {
			spec = "a:batch b:batch c:batch d:own,batch"
		}
		r := newSetRig(t, spec, nil, reconciler.WithConcurrency(v.workers), reconciler.WithPruning(0),
			reconciler.WithRetry(time.Millisecond, 5*time.Millisecond))
		for n, tg := range r.tgs {
			failsOnce(tg, func(op reconcilertest.Op, it *item) string {
				if it == nil || !strings.HasSuffix(it.ID, "7") {
					return ""
				}
				return n + string(op) + it.ID + it.Value
			})
		}
		r.start()
		st, err := sets.Of(r.db, r.table, (*item).clone, getSet, putSet)
		require.NoError(t, err)
		for round := range 6 {
			wtxn := r.db.WriteTxn(r.table)
			for i, o := range setItems("o", 40) {
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
			for i := round; round%2 == 1 && i < 40; i += 7 {
				r.remove(fmt.Sprintf("o-%05d", i))
			}
		}
		rev := r.table.Revision(r.db.ReadTxn())
		for n, rec := range r.recs {
			reached, _, err := rec.WaitUntilReconciled(ctxFor(t, timeout), rev)
			require.NoError(t, err, n)
			assert.GreaterOrEqual(t, reached, rev, n)
		}
		r.waitDone()
		require.NoError(t, st.Wait(ctxFor(t, timeout), r.names))
		r.waitReconciled()
		waitUntil(t, "no retries left", func() (bool, <-chan struct{}) {
			ch := make(chan struct{})
			close(ch)
			for _, rec := range r.recs {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				_, low, err := rec.WaitUntilReconciled(ctx, rev)
				cancel()
				if err != nil || low != 0 {
					return false, ch
				}
			}
			return true, ch
		})
		r.noDiff()
		for obj := range r.table.All(r.db.ReadTxn()) {
			assert.Equal(t, r.in(false), setNames(obj.Statuses), "%s", obj.ID)
		}
	})
}

// Thousands of objects at once, in batches, with workers of each
// reconciler's own number and one name of its own status: every object
// Done for every name and no other name in the set.
func TestStatusSetLargeRoundsWithBatches(t *testing.T) {
	r := newSetRig(t, "a:batch,2 b:batch,4 c:3 d:own,batch,2", nil)
	r.start()
	r.insertAs(setItems("x", 3000)...)
	for i := 0; i < 3000; i += 500 {
		next := setItems("x", i+250)[i:]
		for _, o := range next {
			o.Value = "v2"
		}
		r.insertAs(next...)
	}
	r.waitDone()
	r.caughtUp()
	r.noDiff()
	for obj := range r.table.All(r.db.ReadTxn()) {
		if !assert.Equal(t, r.in(false), setNames(obj.Statuses), "%s", obj.ID) {
			break
		}
	}
}

// Whatever happens while one name's Update is in flight (its object
// deleted and inserted again; the hive stopped, written to and started) or
// while one name is paused, every name ends with every object applied in
// its latest version, the others' statuses kept meanwhile.
func TestStatusSetOneNameHeldBackLosesNothing(t *testing.T) {
	reinsert := func(r *setRig) {
		r.remove("x-00000")
		r.insertAs(&item{ID: "x-00000", Value: "v2", Statuses: status.NewSet()})
		r.waitTable("b and c Done with v2", func(txn statedb.ReadTxn) bool {
			return r.done(txn, "b", "c") && r.tgs["b"].has("x-00000", "v2") && r.tgs["c"].has("x-00000", "v2")
		})
	}
	for _, c := range []struct {
		name, spec, held string // held: the key of a's held Update; none: b is paused
		meanwhile        func(r *setRig)
	}{
		{"reinsert in flight", "a b c:own", "x-00000", reinsert},
		{"reinsert in flight, batches", "a:batch b:batch c:own,batch", "x-00000", reinsert},
		{"stop in flight", "a b:2 c:own,batch", "x-00003", func(r *setRig) {
			r.stop()
			r.insertAs(setItems("y", 5)...)
			r.remove("x-00001", "x-00003")
			r.insertAs(&item{ID: "x-00000", Value: "v2", Statuses: status.NewSet()})
			r.start()
		}},
		{"paused", "a b", "", func(r *setRig) {
			r.remove("x-00003")
			r.caughtUp()
			assert.Empty(r.t, r.tgs["b"].updates("x-00001"), "b is paused")
			r.recs["b"].Resume()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newSetRig(t, c.spec, nil)
			r.start()
			h := &hold{release: make(chan struct{})}
			others := slices.DeleteFunc(slices.Clone(r.names), func(n string) bool { return n == "a" })
			switch {
			case c.held == "x-00000":
				h = r.tgs["a"].holdAfterApply(c.held, false)
			case c.held != "":
				h = r.tgs["a"].hold(c.held)
			default:
				r.recs["b"].Pause()
				others = []string{"a"}
			}
			r.insertAs(setItems("x", 10)...)
			if c.held != "" {
				h.wait(t)
			}
			r.waitDone(others...)
			c.meanwhile(r)
			h.let()
			r.waitDone()
			r.caughtUp()
			r.noDiff()
		})
	}
}

// Objects written with the zero Set, or with NewSet, are reconciled for
// every name on every write, after a delete too. With NewSet each name
// applies each write once: reading another's status write costs nothing.
// (A zero Set's missing names read as Pending without identity, so a
// name may apply a version more than once.)
func TestStatusSetObjectsAreReconciledOnEveryWrite(t *testing.T) {
	for _, zero := range []bool{true, false} {
		t.Run(fmt.Sprint("zero=", zero), func(t *testing.T) {
			r := newSetRig(t, "a b c:own", nil)
			r.start()
			write := func(v string) {
				obj := &item{ID: "z", Value: v, Statuses: status.NewSet()}
				if zero {
					obj.Statuses = status.Set{}
				}
				r.insertAs(obj)
				r.waitDone()
				r.caughtUp()
				r.noDiff()
			}
			for v := range 3 {
				write(fmt.Sprint("v", v))
			}
			r.remove("z")
			write("v2")
			for n, tg := range r.tgs {
				if zero {
					got := slices.Compact(tg.updates("z"))
					assert.Equal(t, []string{"v0", "v1", "v2", "v2"}[:len(got)], got, "%s applied each write of z in order", n)
					assert.GreaterOrEqual(t, len(got), 3, n)
				} else {
					assert.Equal(t, []string{"v0", "v1", "v2", "v2"}, tg.updates("z"), "%s applied each write of z once", n)
				}
			}
		})
	}
}

// A writer that marks only one name Pending gets only that name's
// reconciler to apply the object; the others keep their Done.
func TestStatusSetOnlyTheNameMarkedPendingApplies(t *testing.T) {
	r := newSetRig(t, "a b c:own", nil)
	r.start()
	r.insertAs(setItems("x", 3)...)
	r.waitDone()
	want := map[string]int{"a": 1, "b": 1, "c": 1}
	for _, name := range []string{"b", "c", "a"} {
		cur, _ := r.get("x-00001")
		next := cur.clone()
		next.Statuses = next.Statuses.Set(name, status.Pending())
		r.insertAs(next)
		r.waitDone()
		r.caughtUp()
		want[name]++
		r.applied(want, "x-00001")
	}
}

// A set function that drops the primary key of one object leaves that
// object alone, without a panic, its statuses unwritten; every other
// object converges for every name, the shared write included, and so does
// what is written later.
func TestStatusSetFunctionDroppingTheKeyLeavesOthersAlone(t *testing.T) {
	r := newSetRig(t, "a b c:own", nil)
	r.set = func(it *item) *item { it.NoKey = it.ID == "bad"; return it }
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

// Two reconcilers under one name on one set (two modules both calling
// theirs "routes") do not panic or hang: Register refuses the second with
// ErrInvalidConfig, or both converge.
func TestStatusSetDuplicateNameNeitherPanicsNorHangs(t *testing.T) {
	r := newSetRig(t, "a b", nil)
	var err error
	require.NotPanics(t, func() {
		_, err = reconciler.Register(r.params, r.table, (*item).clone, nil, nil, newTarget(), nil,
			reconciler.WithName("a"), reconciler.WithStatusSet(getSet, putSet))
	})
	if err != nil {
		assert.ErrorIs(t, err, reconciler.ErrInvalidConfig)
	}
	r.start()
	r.insertAs(setItems("x", 10)...)
	r.waitDone()
	r.caughtUp()
}

// Misuses of WithStatusSet besides TestRegisterRejectsBadInput's return an
// error wrapping ErrInvalidConfig and never panic; batch operations alone
// are fine.
func TestStatusSetRegisterRefusesItsMisuses(t *testing.T) {
	f := newFixture(t, newTarget(), &with{register: byTheTest})
	tg := newTarget()
	get, set := statusOf("a")
	var nilGet func(*item) status.Set
	var nilPut func(*item, status.Set) *item
	named := func(o reconciler.Option) []reconciler.Option { return []reconciler.Option{reconciler.WithName("a"), o} }
	ws := reconciler.WithStatusSet(getSet, putSet)
	for name, c := range map[string]struct {
		set  func(*item, status.Status) *item
		get  func(*item) status.Status
		ops  reconciler.Operations[*item]
		opts []reconciler.Option
	}{
		"both nil":                {ops: tg, opts: named(reconciler.WithStatusSet(nilGet, nilPut))},
		"empty name":              {ops: tg, opts: []reconciler.Option{reconciler.WithName(""), ws}},
		"name after an empty one": {ops: tg, opts: []reconciler.Option{ws, reconciler.WithName("")}},
		"of any": {ops: tg, opts: named(reconciler.WithStatusSet(func(any) status.Set { return status.Set{} },
			func(o any, _ status.Set) any { return o }))},
		"of the value type": {ops: tg, opts: named(reconciler.WithStatusSet(func(item) status.Set { return status.Set{} },
			func(o item, _ status.Set) item { return o }))},
		"of a pointer to pointer": {ops: tg, opts: named(reconciler.WithStatusSet(func(**item) status.Set { return status.Set{} },
			func(o **item, _ status.Set) **item { return o }))},
		"getStatus given": {get: get, ops: tg, opts: named(ws)},
		"both given":      {set: set, get: get, ops: tg, opts: named(ws)},
		"no ops at all":   {opts: named(ws)},
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			var rec reconciler.Reconciler[*item]
			require.NotPanics(t, func() {
				rec, err = reconciler.Register(f.params, f.table, (*item).clone, c.set, c.get, c.ops, nil, c.opts...)
			})
			assert.ErrorIs(t, err, reconciler.ErrInvalidConfig)
			assert.Nil(t, rec)
		})
	}
	rec, err := reconciler.Register(f.params, f.table, (*item).clone, nil, nil, nil, tg, reconciler.WithName("q"), ws)
	require.NoError(t, err, "batch operations alone")
	assert.NotNil(t, rec)
	require.NotPanics(t, func() {
		_, err := reconciler.Register(f.params, f.table, (*item).clone, nil, nil, tg, nil, reconciler.WithName("twice"), ws, ws)
		if err != nil {
			assert.ErrorIs(t, err, reconciler.ErrInvalidConfig, "WithStatusSet given twice")
		}
	})
}

// WaitUntilReconciled of each reconciler of the set returns only once its
// statuses are in the table, and WaitForObject agrees with the table.
func TestStatusSetWaitsAgreeWithTheTable(t *testing.T) {
	r := newSetRig(t, "a b:batch,2 c", nil)
	r.meet(func(it *item) bool { return strings.HasSuffix(it.ID, "0") })
	r.start()
	for round := range 5 {
		objs := setItems(fmt.Sprint("r", round), 30)
		rev := r.insertAs(objs...)
		for n, rec := range r.recs {
			_, _, err := rec.WaitUntilReconciled(ctxFor(t, timeout), rev)
			require.NoError(t, err)
			assert.True(t, allKind(r.fixture, r.db.ReadTxn(), n, status.KindDone, objs), "round %d: %s's statuses in the table once WaitUntilReconciled returns", round, n)
		}
		for _, n := range r.names {
			obj, err := reconciler.WaitForObject(ctxFor(t, timeout), r.db, r.table, itemID.Query(objs[7].ID),
				func(it *item) status.Status { return it.Statuses.Get(n) })
			require.NoError(t, err)
			assert.Equal(t, status.KindDone, obj.Statuses.Get(n).Kind)
		}
	}
}

// A reconciler of the set registered while the hive runs, with writes
// going on, reconciles every object, and the others do not apply again
// objects that did not change.
func TestStatusSetLateJoinerUnderWrites(t *testing.T) {
	r := newSetRig(t, "a b", nil)
	r.start()
	old := setItems("old", 50)
	r.insertAs(old...)
	r.waitDone()
	r.join(t, "j:3")
	fresh := setItems("new", 50)
	for i := 0; i < len(fresh); i += 10 {
		r.insertAs(fresh[i : i+10]...)
	}
	r.waitDone()
	_, _, err := r.recs["j"].WaitUntilReconciled(ctxFor(t, timeout), r.table.Revision(r.db.ReadTxn()))
	require.NoError(t, err)
	r.applied(map[string]int{"a": 1, "b": 1}, ids(old)...)
	r.noDiff()
}

// Retiring names nobody serves, by sets.Retired in the hive (gone, also
// from objects written later) and by sets.Table.Retire while an Update of
// another name is in flight (old), removes only their entries: the others
// stay Done and are not applied again, and sets.Table.Wait and
// WaitForReconciliation agree with the table.
func TestStatusSetRetiringANameLeavesTheOthersAlone(t *testing.T) {
	var f *fixture
	r := newSetRig(t, "a b", &with{setup: func(ff *fixture) []reconciler.Option { f = ff; return nil },
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
	for round := range 3 {
		later := named(setItems(fmt.Sprint("y", round), 10))
		r.insertAs(later...)
		objs = append(objs, later...)
	}
	st, err := sets.Of(r.db, r.table, (*item).clone, getSet, putSet)
	require.NoError(t, err)
	require.NoError(t, st.Wait(ctxFor(t, timeout), []string{"a", "b"}))

	// A new version of x-00004 whose Update by a is held while old retires.
	held := r.tgs["a"].hold("x-00004")
	v2 := named(setItems("x", 5)[4:])[0]
	v2.Value = "v2"
	r.insertAs(v2)
	held.wait(t)
	n, err := st.Retire(ctxFor(t, timeout), "old")
	require.NoError(t, err)
	assert.Equal(t, 40, n)
	held.let()

	require.NoError(t, st.Wait(ctxFor(t, timeout), []string{"a", "b"}))
	r.waitTable("gone and old removed", func(txn statedb.ReadTxn) bool {
		for obj := range r.table.All(txn) {
			if !slices.Equal(setNames(obj.Statuses), []string{"a", "b"}) {
				return false
			}
		}
		return r.done(txn)
	})
	r.caughtUp()
	r.noDiff()
	r.applied(map[string]int{"a": 1, "b": 1}, slices.DeleteFunc(ids(objs), func(id string) bool { return id == "x-00004" })...)
	r.applied(map[string]int{"a": 2, "b": 2}, "x-00004")
}

// Retiring the name of a reconciler still running (documented: it reads
// the missing entry as Pending and reconciles again) has that reconciler
// apply every object again, and only it.
func TestStatusSetRetireOfARunningNameReconcilesItAgainAlone(t *testing.T) {
	r := newSetRig(t, "a b:batch,2 c:own", nil)
	r.start()
	st, err := sets.Of(r.db, r.table, (*item).clone, getSet, putSet)
	require.NoError(t, err)
	objs := setItems("x", 30)
	r.insertAs(objs...)
	require.NoError(t, st.Wait(ctxFor(t, timeout), r.names))
	n, err := st.Retire(ctxFor(t, timeout), "b")
	require.NoError(t, err)
	assert.Equal(t, 30, n)
	r.waitTable("b Done again", func(txn statedb.ReadTxn) bool { return allKind(r.fixture, txn, "b", status.KindDone, objs) })
	require.NoError(t, st.Wait(ctxFor(t, timeout), r.names))
	r.caughtUp()
	r.applied(map[string]int{"a": 1, "b": 2, "c": 1}, ids(objs)...)
}

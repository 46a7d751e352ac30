package sets_test

// An outsider's attacks (session 56), designed from the documented promises
// alone, reusing the o55 world of outsider55_test.go.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/sets"
	"github.com/converge-go/converge/status"
)

// o56Rewrite changes key's set with f in a write transaction of its own.
func (w *o55World) o56Rewrite(key string, f func(status.Set) status.Set) {
	w.t.Helper()
	txn := w.db.WriteTxn(w.tbl)
	o, _, ok := w.tbl.Get(txn, o55ID.Query(key))
	require.True(w.t, ok)
	o = o.clone()
	o.Set = f(o.Set)
	_, _, err := w.tbl.Insert(txn, o)
	require.NoError(w.t, err)
	txn.Commit()
}

// o56Twice returns, for each name and key, the own status identities that
// name's Update saw more than once.
// skip is "name/key" pairs left out: a name whose entry was deleted reads
// as Pending with the set's identity (status.Set.Get), which may be the one
// it applied last, and must apply it again ("The name then reads as Pending
// again", status.Set.Delete).
func (w *o55World) o56Twice(skip ...string) []string {
	var bad []string
	for _, n := range slices.Sorted(maps.Keys(w.ops)) {
		o := w.ops[n]
		o.mu.Lock()
		for _, k := range slices.Sorted(maps.Keys(o.calls)) {
			if slices.Contains(skip, n+"/"+k) {
				continue
			}
			seen := map[string]int{}
			for _, c := range o.calls[k] {
				f := strings.Fields(c)
				seen[f[2]]++
			}
			for id, c := range seen {
				if c > 1 {
					bad = append(bad, fmt.Sprintf("%s applied %s %s %d times: %v", n, k, id, c, o.calls[k]))
				}
			}
		}
		o.mu.Unlock()
	}
	return bad
}

// TestOutsider56OtherWritersWhileAnUpdateIsInFlight: 2–4 named reconcilers
// on one status.Set, single or batch operations, 1 or 3 workers. While a's
// (and in one schedule also b's) Update of an object is held, another writer
// changes that object without touching a's entry: Table.Retire of a third
// name, Table.Refresh of another name, another name's entry added, another
// served name's entry removed. Promise (reconciler/doc.go, Guarantees): "If
// the only change since is another reconciler's status (the object's own
// status identity is unchanged), the result is still recorded rather than
// redone."; (Table.Retire, Table.Refresh) "The other names' statuses are left
// as they are, identities included, so their reconcilers do not redo work."
// Checks: a applies each held object once, no name applies one status
// identity twice, every name ends Done everywhere, WaitUntilReconciled and
// Table.Wait return.
func TestOutsider56OtherWritersWhileAnUpdateIsInFlight(t *testing.T) {
	all := []string{"a", "b", "c", "late"}
	for _, nn := range []int{2, 3, 4} {
		for _, batch := range []bool{false, true} {
			for _, workers := range []int{1, 3} {
				names := all[:nn]
				t.Run(fmt.Sprintf("names=%d/batch=%v/workers=%d", nn, batch, workers), func(t *testing.T) {
					o56OtherWriters(t, names, batch, workers)
				})
			}
		}
	}
}

func o56OtherWriters(t *testing.T, names []string, batch bool, workers int) {
	w := newO55(t, names, o55Config{batch: batch, pending: append(slices.Clone(names), "gone"),
		opts: func(string) []reconciler.Option { return []reconciler.Option{reconciler.WithConcurrency(workers)} }})
	kv := o55Keys(40, "v1")
	kv = append(kv, "x1", "v1", "x2", "v1", "x3", "v1", "x4", "v1", "x5", "v1", "x6", "v1")
	ctx := o55Ctx(t, o55Timeout)

	// x1: Retire of a third name while a's Update of x1 is in flight.
	rel1, ent1 := w.ops["a"].hold("x1")
	t.Cleanup(rel1)
	w.write(kv...)
	o55Recv(t, ent1, "a's Update of x1")
	n, err := w.st.Retire(ctx, "gone")
	require.NoError(t, err)
	require.Equal(t, len(kv)/2, n)
	rel1()

	// x2: Refresh of b while a's Update of x2 is in flight.
	w.reconciledAll()
	rel2, ent2 := w.ops["a"].hold("x2")
	t.Cleanup(rel2)
	m, err := w.st.Refresh(ctx, "a", o55ID.Query("x2"))
	require.NoError(t, err)
	o55Recv(t, ent2, "a's refreshed Update of x2")
	mb, err := w.st.Refresh(ctx, "b", o55ID.Query("x2"))
	require.NoError(t, err)
	rel2()
	res, err := m.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, sets.Result{Done: 1}, res)
	res, err = mb.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, sets.Result{Done: 1}, res)

	// x3: another name's entry added; x4: another served name's entry
	// removed; x6: another served name's entry overwritten with an Error
	// by a user (b retries it: "A retryable Error status that no retry is
	// for, written back into the table by a user ... is retried at once",
	// a records its result). Each while a's Update of it is in flight.
	for _, c := range []struct {
		key  string
		edit func(status.Set) status.Set
	}{
		{"x3", func(s status.Set) status.Set { return s.Set("extra", status.Pending()) }},
		{"x4", func(s status.Set) status.Set { return s.Delete("b") }},
		{"x6", func(s status.Set) status.Set { return s.Set("b", status.Error(errors.New("user wrote it"))) }},
	} {
		w.reconciledAll()
		rel, ent := w.ops["a"].hold(c.key)
		t.Cleanup(rel)
		w.write(c.key, "v2")
		o55Recv(t, ent, "a's Update of "+c.key+" v2")
		w.o56Rewrite(c.key, c.edit)
		rel()
	}

	// x5: a's and b's Updates both held; Refresh of another name, then an
	// entry added and removed.
	w.reconciledAll()
	rel5a, ent5a := w.ops["a"].hold("x5")
	t.Cleanup(rel5a)
	rel5b, ent5b := w.ops["b"].hold("x5")
	t.Cleanup(rel5b)
	w.write("x5", "v2")
	o55Recv(t, ent5a, "a's Update of x5")
	o55Recv(t, ent5b, "b's Update of x5")
	if len(names) > 2 {
		m5, err := w.st.Refresh(ctx, "c", o55ID.Query("x5"))
		require.NoError(t, err)
		_, err = m5.Wait(ctx)
		require.NoError(t, err)
	}
	w.o56Rewrite("x5", func(s status.Set) status.Set { return s.Set("extra2", status.Pending()) })
	rel5b()
	w.o56Rewrite("x5", func(s status.Set) status.Set { return s.Delete("extra2") })
	rel5a()

	w.reconciledAll()
	require.NoError(t, w.setsWait(names...))
	for _, name := range names {
		for k, st := range w.statuses(name) {
			assert.Equal(t, status.KindDone, st.Kind, "%s of %s: %s", name, k, st)
		}
	}
	a := w.ops["a"]
	assert.Equal(t, 1, a.count("x1"), "a redid x1 after Retire of gone: %v", a.callsOf("x1"))
	assert.Equal(t, 2, a.count("x2"), "a: x2 once, refreshed once: %v", a.callsOf("x2"))
	assert.Equal(t, 2, a.count("x3"), "a: x3 v1, v2: %v", a.callsOf("x3"))
	assert.Equal(t, 2, a.count("x4"), "a: x4 v1, v2: %v", a.callsOf("x4"))
	assert.Equal(t, 2, a.count("x6"), "a: x6 v1, v2: %v", a.callsOf("x6"))
	assert.Equal(t, 2, a.count("x5"), "a: x5 v1, v2: %v", a.callsOf("x5"))
	assert.Equal(t, 2, w.ops["b"].count("x5"), "b: x5 v1, v2: %v", w.ops["b"].callsOf("x5"))
	assert.Equal(t, 1, w.ops["b"].count("x1"), "b redid x1: %v", w.ops["b"].callsOf("x1"))
	assert.Empty(t, w.o56Twice("b/x4"), "a status identity applied twice")
	for _, name := range names {
		for k, c := range w.ops[name].counts() {
			if strings.HasPrefix(k, "k") {
				assert.Equal(t, 1, c, "%s applied %s %d times: %v", name, k, c, w.ops[name].callsOf(k))
			}
		}
	}
}

// TestOutsider56CtxEndsWhileAWriterHoldsTheTableLeavesNoGoroutine: another
// goroutine holds a statedb WriteTxn on the table; Table.Wait (with and
// without Snapshot), Marked.Wait (alone and behind another Wait, as
// "concurrent Waits take turns"), Refresh and Retire are called with a ctx
// that ends (deadline or cancel, or already ended). Promise (Table.Wait):
// "When ctx ends first, it returns an error wrapping ctx's error and
// ErrNotSettled"; (Marked.Wait) "When ctx ends first it returns the result
// so far and an error wrapping both ctx's error and ErrNotSettled";
// (Refresh, Retire) "It stops when ctx ends, returning ... ctx's error";
// (package) "The package starts no goroutine but the job of Retired". Each
// must return within 3s of its ctx, and once the writer aborts no goroutine
// of the call may be left (goleak).
func TestOutsider56CtxEndsWhileAWriterHoldsTheTableLeavesNoGoroutine(t *testing.T) {
	// No reconciler: the hive's goroutines are steady, and the waits wait.
	w := newO55(t, nil, o55Config{pending: []string{"a", "b"}})
	w.write(o55Keys(1500, "v1")...) // more than MaxObjectsPerTxn
	m, err := w.st.Refresh(o55Ctx(t, o55Timeout), "b")
	require.NoError(t, err)
	snap := w.db.ReadTxn()
	calls := map[string]func(ctx context.Context) error{
		"Table.Wait":          func(ctx context.Context) error { return w.st.Wait(ctx, []string{"a", "b"}) },
		"Table.Wait/Snapshot": func(ctx context.Context) error { return w.st.Wait(ctx, []string{"a"}, sets.Snapshot(snap)) },
		"Table.Wait/DoneOrError": func(ctx context.Context) error {
			return w.st.Wait(ctx, []string{"b"}, sets.DoneOrError())
		},
		"Marked.Wait": func(ctx context.Context) error { _, err := m.Wait(ctx); return err },
		"Refresh":     func(ctx context.Context) error { _, err := w.st.Refresh(ctx, "a"); return err },
		"Retire":      func(ctx context.Context) error { _, err := w.st.Retire(ctx, "b"); return err },
	}
	type ender struct {
		want error
		mk   func() (context.Context, context.CancelFunc)
	}
	enders := map[string]ender{
		"deadline": {context.DeadlineExceeded, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 100*time.Millisecond)
		}},
		"cancel": {context.Canceled, func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			stop := time.AfterFunc(100*time.Millisecond, cancel)
			return ctx, func() { stop.Stop(); cancel() }
		}},
		"already": {context.Canceled, func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}},
	}
	for _, en := range slices.Sorted(maps.Keys(enders)) {
		for _, name := range slices.Sorted(maps.Keys(calls)) {
			t.Run(en+"/"+name, func(t *testing.T) {
				ignore := goleak.IgnoreCurrent()
				held := w.db.WriteTxn(w.tbl)
				got := make(chan error, 1)
				ctx, cancel := enders[en].mk()
				defer cancel()
				go func() { got <- calls[name](ctx) }()
				select {
				case err := <-got:
					held.Abort()
					require.ErrorIs(t, err, enders[en].want)
				case <-time.After(3 * time.Second):
					held.Abort()
					err := <-got
					t.Errorf("%s returned only once the writer let go, 3s after its ctx ended (then: %v)", name, err)
				}
				goleak.VerifyNone(t, ignore)
			})
		}
	}
	t.Run("Marked.Wait/behind-another", func(t *testing.T) {
		ignore := goleak.IgnoreCurrent()
		held := w.db.WriteTxn(w.tbl)
		first := make(chan error, 1)
		ctx1, cancel1 := context.WithTimeout(context.Background(), o55Timeout)
		defer cancel1()
		go func() { _, err := m.Wait(ctx1); first <- err }()
		got := make(chan error, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		go func() { _, err := m.Wait(ctx); got <- err }()
		select {
		case err := <-got:
			require.ErrorIs(t, err, context.DeadlineExceeded)
		case <-time.After(3 * time.Second):
			t.Errorf("a second Marked.Wait did not return 3s after its ctx ended, behind a first one")
		}
		held.Abort()
		cancel1()
		select {
		case err := <-first:
			require.ErrorIs(t, err, context.Canceled)
		case <-time.After(3 * time.Second):
			t.Fatalf("the first Marked.Wait did not return 3s after its ctx was cancelled")
		}
		select {
		case <-got:
		default:
		}
		goleak.VerifyNone(t, ignore)
	})
}

// TestOutsider56ChurnOfOtherWritersAroundHeldUpdates: 3 or 4 names with 3
// workers, single or batch operations. 24 rounds: an object is written (a
// fresh Pending for every name), a's Update of it is held, and while it is
// in flight one to three other writers change it, never a's entry: Refresh
// of b (waited for), Refresh of c, Retire of the unserved "gone", another
// entry added then removed. Promise (reconciler/doc.go, Guarantees): "If the
// only change since is another reconciler's status (the object's own status
// identity is unchanged), the result is still recorded rather than
// redone"; (Table.Refresh) "The other names' statuses are left as they
// are, identities included: their reconcilers do not redo work." Checks: a
// applies each key exactly as often as it was written, no name applies one
// identity twice, every name ends Done, the waits return.
func TestOutsider56ChurnOfOtherWritersAroundHeldUpdates(t *testing.T) {
	for _, names := range [][]string{{"a", "b", "c"}, {"a", "b", "c", "late"}} {
		for _, batch := range []bool{false, true} {
			t.Run(fmt.Sprintf("names=%d/batch=%v", len(names), batch), func(t *testing.T) {
				o56Churn(t, names, batch, false)
			})
		}
	}
}

// TestOutsider56ChurnWhileWorkersAreReconfigured: the schedule of
// TestOutsider56ChurnOfOtherWritersAroundHeldUpdates, with each name's
// WithConcurrency changed by Configure while a's Update is held. Promise
// (Reconciler.Configure): "Nothing is lost or done twice: operations under
// way finish and their outcomes are committed, work queued for workers keeps
// its place in the new executor", with the Guarantees quoted there.
func TestOutsider56ChurnWhileWorkersAreReconfigured(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			o56Churn(t, []string{"a", "b", "c", "late"}, batch, true)
		})
	}
}

func o56Churn(t *testing.T, names []string, batch, configure bool) {
	w := newO55(t, names, o55Config{batch: batch, pending: append(slices.Clone(names), "gone"),
		opts: func(string) []reconciler.Option { return []reconciler.Option{reconciler.WithConcurrency(3)} }})
	w.write(o55Keys(30, "v0")...)
	writes := map[string]int{}
	for i := range 30 {
		writes[fmt.Sprintf("k%03d", i)] = 1
	}
	ctx := o55Ctx(t, o55Timeout)
	for round := range 24 {
		key := fmt.Sprintf("k%03d", (round*7)%30)
		release, entered := w.ops["a"].hold(key)
		w.write(key, fmt.Sprintf("v%d", round+1))
		writes[key]++
		// Let other keys move too.
		w.write(fmt.Sprintf("k%03d", (round*7+1)%30), fmt.Sprintf("v%d", round+1))
		writes[fmt.Sprintf("k%03d", (round*7+1)%30)]++
		o55Recv(t, entered, "a's Update of "+key)
		if configure {
			for i, name := range names {
				require.NoError(t, w.recs[name].Configure(reconciler.WithConcurrency(1+(round+i)%4)))
			}
		}
		var marks []*sets.Marked[*o55Obj]
		for step := range 1 + round%3 {
			switch (round + step) % 4 {
			case 0:
				m, err := w.st.Refresh(ctx, "b", o55ID.Query(key))
				require.NoError(t, err)
				marks = append(marks, m)
			case 1:
				m, err := w.st.Refresh(ctx, "c", o55ID.Query(key))
				require.NoError(t, err)
				marks = append(marks, m)
			case 2:
				_, err := w.st.Retire(ctx, "gone")
				require.NoError(t, err)
			case 3:
				w.o56Rewrite(key, func(s status.Set) status.Set { return s.Set("extra", status.Pending()) })
				w.o56Rewrite(key, func(s status.Set) status.Set { return s.Delete("extra") })
			}
		}
		if round%2 == 0 {
			for _, m := range marks {
				res, err := m.Wait(ctx)
				require.NoError(t, err)
				require.Equal(t, sets.Result{Done: 1}, res)
			}
			release()
		} else {
			release()
			for _, m := range marks {
				res, err := m.Wait(ctx)
				require.NoError(t, err)
				require.Equal(t, sets.Result{Done: 1}, res)
			}
		}
	}
	w.reconciledAll()
	require.NoError(t, w.setsWait(names...))
	for _, name := range names {
		for k, st := range w.statuses(name) {
			assert.Equal(t, status.KindDone, st.Kind, "%s of %s: %s", name, k, st)
		}
	}
	a := w.ops["a"]
	for k, n := range writes {
		// a may skip an intermediate version, never redo one.
		assert.LessOrEqual(t, a.count(k), n, "a applied %s more often than it was written: %v", k, a.callsOf(k))
	}
	assert.Empty(t, w.o56Twice(), "a status identity applied twice")
}

// TestOutsider56RetireAndRefreshRaceTheFirstRound: 1500 objects (more than
// MaxObjectsPerTxn) naming a, b, c and the unserved "gone"; while the three
// reconcilers (3 workers, single or batch) apply them the first time,
// Retire("gone") and Refresh("b") of every object run on other goroutines,
// so their transactions land between the reconcilers' Updates and status
// writes. Promise (Table.Retire) "The other names' statuses are left as they
// are, identities included, so their reconcilers do not redo work";
// (reconciler Guarantees) "the result is still recorded rather than redone".
// Checks: a and c apply each object exactly once, b at most twice (its
// refresh) and never one identity twice, all Done, waits return.
func TestOutsider56RetireAndRefreshRaceTheFirstRound(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			names := []string{"a", "b", "c"}
			w := newO55(t, names, o55Config{batch: batch, pending: []string{"a", "b", "c", "gone"},
				opts: func(string) []reconciler.Option { return []reconciler.Option{reconciler.WithConcurrency(3)} }})
			ctx := o55Ctx(t, o55Timeout)
			const n = 1500
			w.write(o55Keys(n, "v1")...)
			type out struct {
				what string
				err  error
			}
			done := make(chan out, 2)
			var marked *sets.Marked[*o55Obj]
			go func() { _, err := w.st.Retire(ctx, "gone"); done <- out{"Retire", err} }()
			go func() {
				m, err := w.st.Refresh(ctx, "b")
				if err == nil {
					marked = m
				}
				done <- out{"Refresh", err}
			}()
			for range 2 {
				select {
				case o := <-done:
					require.NoError(t, o.err, o.what)
				case <-ctx.Done():
					t.Fatal("Retire/Refresh hang")
				}
			}
			res, err := marked.Wait(ctx)
			require.NoError(t, err)
			require.Equal(t, n, res.Done)
			w.reconciledAll()
			require.NoError(t, w.setsWait(names...))
			for _, name := range names {
				for k, st := range w.statuses(name) {
					require.Equal(t, status.KindDone, st.Kind, "%s of %s: %s", name, k, st)
				}
			}
			for _, name := range []string{"a", "c"} {
				for k, c := range w.ops[name].counts() {
					assert.Equal(t, 1, c, "%s applied %s %d times: %v", name, k, c, w.ops[name].callsOf(k))
				}
			}
			for k, c := range w.ops["b"].counts() {
				assert.LessOrEqual(t, c, 2, "b applied %s %d times: %v", k, c, w.ops["b"].callsOf(k))
			}
			assert.Empty(t, w.o56Twice(), "a status identity applied twice")
		})
	}
}

// TestOutsider56CtxEndsBetweenTransactionsOfRefreshAndRetire: 1500 objects,
// so Refresh and Retire write in two transactions; a writer takes the
// table's lock as soon as the first commits and holds it past their ctx.
// Promise (Refresh): "It stops when ctx ends, returning what it marked so
// far (which Wait waits for) and ctx's error"; (Retire) "returning the
// count so far and ctx's error: the transactions committed before stay";
// no goroutine is left once the writer aborts.
func TestOutsider56CtxEndsBetweenTransactionsOfRefreshAndRetire(t *testing.T) {
	const n = 1500
	for _, what := range []string{"Refresh", "Retire"} {
		t.Run(what, func(t *testing.T) {
			w := newO55(t, nil, o55Config{pending: []string{"a", "b"}})
			w.write(o55Keys(n, "v1")...)
			ignore := goleak.IgnoreCurrent()
			_, watch := w.tbl.AllWatch(w.db.ReadTxn())
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			type out struct {
				count int
				err   error
			}
			got := make(chan out, 1)
			go func() {
				if what == "Refresh" {
					m, err := w.st.Refresh(ctx, "a")
					c := -1
					if m != nil {
						c = m.Len()
					}
					got <- out{c, err}
				} else {
					c, err := w.st.Retire(ctx, "b")
					got <- out{c, err}
				}
			}()
			o55Recv(t, watch, "the first transaction of "+what)
			held := w.db.WriteTxn(w.tbl)
			var o out
			select {
			case o = <-got:
				held.Abort()
			case <-time.After(3 * time.Second):
				held.Abort()
				o = <-got
				t.Errorf("%s returned only once the writer let go, 3s after its ctx ended (then: %d, %v)", what, o.count, o.err)
			}
			if o.err == nil {
				t.Logf("%s finished before the writer took the lock: %d", what, o.count)
				assert.Equal(t, n, o.count)
			} else {
				require.ErrorIs(t, o.err, context.DeadlineExceeded)
				assert.Equal(t, sets.MaxObjectsPerTxn, o.count, "%s: what was done so far", what)
				// The transactions committed before stay.
				done := 0
				for obj := range w.tbl.All(w.db.ReadTxn()) {
					if what == "Retire" {
						if _, ok := o56Has(obj.Set, "b"); !ok {
							done++
						}
					} else if obj.Set.Get("a").Kind == status.KindPending && obj.Set.Get("a").ID() != obj.Set.Get("b").ID() {
						done++
					}
				}
				assert.Equal(t, o.count, done, "%s: objects changed in the table", what)
			}
			goleak.VerifyNone(t, ignore)
		})
	}
}

func o56Has(s status.Set, name string) (status.Status, bool) {
	for n, st := range s.All() {
		if n == name {
			return st, true
		}
	}
	return status.Status{}, false
}

// TestOutsider56WaitCalledWhileAWriterHoldsTheTable: Table.Wait is called
// while a writer holds the table and writes a new version of x, which a's
// held Update keeps from settling. Promise (Table.Wait): "one changed since
// is waited for in its latest version"; it returns nil once every name is
// Done, and not before: not while a's Update of the new version is held.
func TestOutsider56WaitCalledWhileAWriterHoldsTheTable(t *testing.T) {
	w := newO55(t, []string{"a", "b"}, o55Config{})
	w.write("x", "v1", "y", "v1")
	w.reconciledAll()
	release, entered := w.ops["a"].hold("x")
	t.Cleanup(release)
	held := w.db.WriteTxn(w.tbl)
	old, _, _ := w.tbl.Get(held, o55ID.Query("x"))
	nx := old.clone()
	nx.Value, nx.Set = "v2", old.Set.Pending("a", "b")
	_, _, err := w.tbl.Insert(held, nx)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() { got <- w.st.Wait(o55Ctx(t, o55Timeout), []string{"a", "b"}) }()
	held.Commit()
	o55Recv(t, entered, "a's Update of x v2")
	select {
	case err := <-got:
		t.Fatalf("Wait returned (%v) while a's Update of x v2 is held", err)
	default:
	}
	release()
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(o55Timeout):
		t.Fatal("Wait hangs")
	}
	o, _ := w.get("x")
	assert.Equal(t, "v2", o.Value)
	assert.Equal(t, status.KindDone, o.Set.Get("a").Kind, "Wait returned before a settled x v2: %s", o.Set)
	assert.Equal(t, status.KindDone, o.Set.Get("b").Kind, "Wait returned before b settled x v2: %s", o.Set)
	assert.Equal(t, 2, w.ops["a"].count("x"))
}

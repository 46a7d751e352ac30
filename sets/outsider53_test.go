package sets_test

// Tests written from the documented guarantees of package sets only (its
// go doc, docs/control.md and the examples), each trying to break one.

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/sets"
	"github.com/converge-go/converge/status"
)

// txnSizes is statedb.Metrics that records, for each commit of the nodes
// table, how many objects it wrote (inserts and deletes each take a
// revision, and commits of one table are serialised by its lock).
type txnSizes struct {
	statedb.NopMetrics
	mu    sync.Mutex
	last  statedb.Revision
	sizes map[statedb.Revision]int // the table revision a commit reached -> objects it wrote
}

func newTxnSizes() *txnSizes { return &txnSizes{sizes: map[statedb.Revision]int{}} }

func (m *txnSizes) Revision(table string, rev statedb.Revision) {
	if table != "nodes" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sizes[rev] = int(rev - m.last)
	m.last = rev
}

// largest returns the largest commit of the table, leaving out the commits
// that reached the revisions in except (the test's own writes).
func (m *txnSizes) largest(except ...statedb.Revision) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	largest := 0
	for rev, n := range m.sizes {
		if !slices.Contains(except, rev) {
			largest = max(largest, n)
		}
	}
	return largest
}

// names returns the names that have an entry in s.
func names(s status.Set) []string {
	var out []string
	for name := range s.All() {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// bareTable is a database, with txnSizes as its metrics, and a nodes table
// whose sets.Table calls clone, get and set through the hooks given (nil
// hooks do nothing).
func bareTable(t testing.TB, onClone, onGet, onSet func()) (*statedb.DB, statedb.RWTable[*node], *sets.Table[*node], *txnSizes) {
	t.Helper()
	sizes := newTxnSizes()
	db := statedb.New(statedb.WithMetrics(sizes))
	tbl, err := statedb.NewTable(db, "nodes", nodeName, nodeValue)
	require.NoError(t, err)
	call := func(f func()) {
		if f != nil {
			f()
		}
	}
	st, err := sets.Of(db, tbl,
		func(n *node) *node { call(onClone); return n.clone() },
		func(n *node) status.Set { call(onGet); return n.Statuses },
		func(n *node, s status.Set) *node { call(onSet); n.Statuses = s; return n })
	require.NoError(t, err)
	return db, tbl, st, sizes
}

// byKey returns the objects of the table by name.
func byKey(db *statedb.DB, tbl statedb.Table[*node]) map[string]*node {
	out := map[string]*node{}
	for n := range tbl.All(db.ReadTxn()) {
		out[n.Name] = n
	}
	return out
}

// fworld is a started hive with, for each name, a reconciler whose
// operations are a FaultyOps around a recording Target (the kit users get).
type fworld struct {
	db      *statedb.DB
	nodes   statedb.RWTable[*node]
	set     *sets.Table[*node]
	sizes   *txnSizes
	faults  map[string]*reconcilertest.FaultyOps[*node]
	targets map[string]*reconcilertest.Target[*node]
	recs    map[string]reconciler.Reconciler[*node]
	health  *cell.SimpleHealth
}

func nodeKey(n *node) string { return n.Name }

func startFWorld(t testing.TB, names []string, cells ...cell.Cell) *fworld {
	t.Helper()
	return startFWorldWith(t, names, nil, cells...)
}

// startFWorldWith is startFWorld with options for the reconciler of each
// name, given the world (its targets are made before the options are asked).
func startFWorldWith(t testing.TB, names []string, opts func(w *fworld, name string) []reconciler.Option, cells ...cell.Cell) *fworld {
	t.Helper()
	w := &fworld{
		sizes:   newTxnSizes(),
		faults:  map[string]*reconcilertest.FaultyOps[*node]{},
		targets: map[string]*reconcilertest.Target[*node]{},
		recs:    map[string]reconciler.Reconciler[*node]{},
	}
	h := hive.New(
		cell.Provide(func() statedb.Metrics { return w.sizes }),
		statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth),
		cell.Module("nodes", "Nodes",
			cell.Provide(job.Registry.NewGroup),
			cell.Provide(func(db *statedb.DB) (statedb.RWTable[*node], *sets.Table[*node], error) {
				tbl, err := statedb.NewTable(db, "nodes", nodeName, nodeValue)
				if err != nil {
					return nil, nil, err
				}
				st, err := sets.Of(db, tbl, (*node).clone, getSet, setSet)
				return tbl, st, err
			}),
			cell.Invoke(func(p reconciler.Params, tbl statedb.RWTable[*node], st *sets.Table[*node], health *cell.SimpleHealth) error {
				w.db, w.nodes, w.set, w.health = p.DB, tbl, st, health
				for _, name := range names {
					target := reconcilertest.NewTarget(nodeKey, func(n *node) string { return n.Value })
					faults := reconcilertest.NewFaultyOps(nodeKey, reconciler.Operations[*node](target), nil)
					w.faults[name], w.targets[name] = faults, target
					options := []reconciler.Option{reconciler.WithName(name), reconciler.WithRetry(time.Millisecond, 5*time.Millisecond), reconciler.WithPruning(0)}
					if opts != nil {
						options = append(options, opts(w, name)...)
					}
					r, err := reconciler.Register(p, tbl, (*node).clone,
						func(n *node, s status.Status) *node { n.Statuses = n.Statuses.Set(name, s); return n },
						func(n *node) status.Status { return n.Statuses.Get(name) },
						faults, nil, options...)
					if err != nil {
						return err
					}
					w.recs[name] = r
				}
				return nil
			}),
			cell.Group(cells...),
		))
	log := hivetest.Logger(t, hivetest.LogLevel(slog.LevelError))
	require.NoError(t, h.Start(log, context.Background()))
	t.Cleanup(func() {
		for _, f := range w.faults {
			f.Clear("")
		}
		require.NoError(t, h.Stop(log, context.Background()))
	})
	return w
}

// updates counts the Updates of key (all keys if "") that name's
// operations returned from.
func (w *fworld) updates(name, key string) int {
	n := 0
	for _, c := range w.faults[name].Calls() {
		if c.Op == reconcilertest.OpUpdate && (key == "" || c.Key == key) {
			n++
		}
	}
	return n
}

// reconciled waits until name's reconciler has handled every change of the
// table so far.
func (w *fworld) reconciled(t testing.TB, name string) {
	t.Helper()
	_, _, err := w.recs[name].WaitUntilReconciled(ctx(t), w.nodes.Revision(w.db.ReadTxn()))
	require.NoError(t, err)
}

// TestRetireUnderConcurrentWritesRemovesTheNameAndKeepsEveryOtherWrite runs
// Retire while a writer changes, deletes and inserts objects: afterwards no
// object has the name, every write of the writer is there as it made it, no
// deleted object came back, the other names' statuses keep their identity,
// and no transaction wrote more than MaxObjectsPerTxn objects.
func TestRetireUnderConcurrentWritesRemovesTheNameAndKeepsEveryOtherWrite(t *testing.T) {
	db, tbl, st, sizes := bareTable(t, nil, nil, nil)
	const n = 4500
	type want struct {
		value string
		a     uint64
	}
	orig := map[string]want{}
	origC := map[string]uint64{}
	nodes := make([]*node, n)
	for i := range nodes {
		s := status.NewSet().Set("a", status.Done()).Set("b", status.Pending()).Set("c", status.Error(errors.New("x")))
		nodes[i] = &node{Name: fmt.Sprintf("n%04d", i), Value: "1", Statuses: s}
		orig[nodes[i].Name] = want{"1", s.Get("a").ID()}
		origC[nodes[i].Name] = s.Get("c").ID()
	}
	insert(t, db, tbl, nodes...)
	fill := tbl.Revision(db.ReadTxn())

	// The writer: one object per transaction, until told to stop.
	expected := map[string]want{} // written by the writer, as last written
	deleted := map[string]bool{}
	stop, stopped := make(chan struct{}), make(chan struct{})
	var writes atomic.Int64
	go func() {
		defer close(stopped)
		rng := rand.New(rand.NewPCG(1, 2))
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			wtxn := db.WriteTxn(tbl)
			switch op := rng.IntN(4); op {
			case 0, 1, 2:
				key := fmt.Sprintf("n%04d", rng.IntN(n))
				if old, _, found := tbl.Get(wtxn, nodeName.Query(key)); found {
					c := old.clone()
					c.Value = fmt.Sprint("w", i)
					if op == 2 {
						if _, _, err := tbl.Delete(wtxn, old); err != nil {
							panic(err)
						}
						deleted[key] = true
						delete(expected, key)
						break
					}
					c.Statuses = c.Statuses.Set("a", status.Done())
					expected[key] = want{c.Value, c.Statuses.Get("a").ID()}
					if _, _, err := tbl.Insert(wtxn, c); err != nil {
						panic(err)
					}
				}
			case 3:
				key := fmt.Sprintf("w%05d", i)
				s := status.NewSet().Set("a", status.Done())
				expected[key] = want{"w", s.Get("a").ID()}
				if _, _, err := tbl.Insert(wtxn, &node{Name: key, Value: "w", Statuses: s}); err != nil {
					panic(err)
				}
			}
			wtxn.Commit()
			writes.Add(1)
		}
	}()
	before, start := writes.Load(), time.Now()
	changed, err := st.Retire(ctx(t), "b")
	during, took := writes.Load()-before, time.Since(start)
	close(stop)
	<-stopped
	require.NoError(t, err)
	t.Logf("Retire changed %d objects in %v; the writer committed %d transactions meanwhile", changed, took, during)

	objs := byKey(db, tbl)
	surviving := 0
	for key, o := range objs {
		require.NotContains(t, names(o.Statuses), "b", "object %s keeps the retired name", key)
		if w, ok := expected[key]; ok {
			require.Equal(t, w.value, o.Value, "object %s lost the writer's value", key)
			require.Equal(t, w.a, o.Statuses.Get("a").ID(), "object %s lost the writer's status of a", key)
		} else {
			_, isOrig := orig[key]
			require.True(t, isOrig, "object %s was never written", key)
			require.Equal(t, orig[key].value, o.Value, "object %s", key)
			require.Equal(t, orig[key].a, o.Statuses.Get("a").ID(), "object %s: a's identity changed", key)
		}
		if _, isOrig := orig[key]; isOrig {
			surviving++
			require.Equal(t, origC[key], o.Statuses.Get("c").ID(), "object %s: c's identity changed", key)
		}
	}
	for key := range deleted {
		_, back := objs[key]
		require.False(t, back, "the deleted object %s came back", key)
	}
	require.GreaterOrEqual(t, changed, surviving)
	require.LessOrEqual(t, changed, n)
	require.LessOrEqual(t, sizes.largest(fill), sets.MaxObjectsPerTxn)
}

// TestRetireOfANameStillRunningIsReconciledAgainByItAlone pins what Retire
// says of a name whose reconciler still runs: it reads the missing entry as
// Pending and reconciles every object again, while the other name's
// reconciler, whose statuses kept their identity, does no work.
func TestRetireOfANameStillRunningIsReconciledAgainByItAlone(t *testing.T) {
	w := startFWorld(t, []string{"a", "b"})
	fill(t, w.db, w.nodes, 50, func() status.Set { return status.NewSet().Pending("a", "b") })
	require.NoError(t, w.set.Wait(ctx(t), []string{"a", "b"}))
	require.Equal(t, 50, w.updates("a", ""))
	require.Equal(t, 50, w.updates("b", ""))

	changed, err := w.set.Retire(ctx(t), "b")
	require.NoError(t, err)
	require.Equal(t, 50, changed)
	require.NoError(t, w.set.Wait(ctx(t), []string{"b"}), "the running b must reconcile the objects again")
	w.reconciled(t, "a")
	w.reconciled(t, "b")
	require.Equal(t, 100, w.updates("b", ""))
	require.Equal(t, 50, w.updates("a", ""), "a redid work after b's entries were removed")
}

// TestRetiredRemovesTheNameFromALargeLaterInsertInBoundedTransactions
// inserts, once the job of Retired runs, more than two transactions' worth
// of objects that still name the retired reconciler in one transaction: the
// job removes the entry from every one, in transactions of at most
// MaxObjectsPerTxn, keeping the other name's identity.
func TestRetiredRemovesTheNameFromALargeLaterInsertInBoundedTransactions(t *testing.T) {
	w := startFWorld(t, nil, sets.Retired[*node]("gone"))
	const n = 2*sets.MaxObjectsPerTxn + 500
	ids := map[string]uint64{}
	nodes := make([]*node, n)
	for i := range nodes {
		s := status.NewSet().Set("a", status.Done()).Pending("gone")
		nodes[i] = &node{Name: fmt.Sprintf("n%04d", i), Value: "1", Statuses: s}
		ids[nodes[i].Name] = s.Get("a").ID()
	}
	wtxn := w.db.WriteTxn(w.nodes)
	for _, nd := range nodes {
		_, _, err := w.nodes.Insert(wtxn, nd)
		require.NoError(t, err)
	}
	own := w.nodes.Revision(wtxn.Commit())
	eventually(t, w.db, w.nodes, "every object free of gone", func(objs iter.Seq2[*node, statedb.Revision]) bool {
		count := 0
		for o := range objs {
			if slices.Contains(names(o.Statuses), "gone") {
				return false
			}
			count++
		}
		return count == n
	})
	for key, o := range byKey(w.db, w.nodes) {
		require.Equal(t, ids[key], o.Statuses.Get("a").ID(), "object %s: a's identity changed", key)
	}
	require.LessOrEqual(t, w.sizes.largest(own), sets.MaxObjectsPerTxn)
}

// TestCtxEndingMidwayLeavesEveryObjectWhole cancels the context of Retire
// and of Refresh while they are in their second transaction: each returns
// ctx's error, the count (or Marked.Len) is exactly the objects that
// changed, and each object is either as it was or changed only in the
// name's entry.
func TestCtxEndingMidwayLeavesEveryObjectWhole(t *testing.T) {
	for _, op := range []string{"retire", "refresh"} {
		t.Run(op, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var clones atomic.Int64
			db, tbl, st, _ := bareTable(t, func() {
				if clones.Add(1) == sets.MaxObjectsPerTxn+500 {
					cancel()
				}
			}, nil, nil)
			const n = 3 * sets.MaxObjectsPerTxn
			fill(t, db, tbl, n, func() status.Set {
				return status.NewSet().Set("a", status.Done()).Set("b", status.Done())
			})
			before := byKey(db, tbl)

			var count int
			var err error
			if op == "retire" {
				count, err = st.Retire(ctx, "b")
			} else {
				var m *sets.Marked[*node]
				m, err = st.Refresh(ctx, "b")
				require.NotNil(t, m, "Refresh returns what it marked when ctx ends")
				count = m.Len()
			}
			require.ErrorIs(t, err, context.Canceled)
			require.Positive(t, count, "the first transaction committed before ctx ended")
			require.Less(t, count, n)

			changed := 0
			after := byKey(db, tbl)
			require.Len(t, after, n)
			for key, o := range after {
				old := before[key]
				require.Equal(t, old.Value, o.Value)
				require.Equal(t, old.Statuses.Get("a").ID(), o.Statuses.Get("a").ID(), "object %s: a changed", key)
				if o.Statuses.Get("b").ID() == old.Statuses.Get("b").ID() && slices.Contains(names(o.Statuses), "b") {
					continue
				}
				changed++
				if op == "retire" {
					require.Equal(t, []string{"a"}, names(o.Statuses), "object %s", key)
				} else {
					require.Equal(t, status.KindRefreshing, o.Statuses.Get("b").Kind, "object %s", key)
				}
			}
			require.Equal(t, count, changed, "the count is not what changed")
		})
	}
}

// TestRefreshOfNothingOrOfDeletedObjectsMarksNoneAndWaitReturnsAtOnce
// gives Refresh queries that select nothing, and one for a deleted object,
// with nobody serving the name: nothing is marked and Wait returns at once
// (its ctx already ended).
func TestRefreshOfNothingOrOfDeletedObjectsMarksNoneAndWaitReturnsAtOnce(t *testing.T) {
	db, tbl, st, _ := bareTable(t, nil, nil, nil)
	fill(t, db, tbl, 10, func() status.Set { return status.NewSet().Set("b", status.Done()) })
	gone := get(t, db, tbl, "n0003")
	wtxn := db.WriteTxn(tbl)
	_, _, err := tbl.Delete(wtxn, gone)
	require.NoError(t, err)
	wtxn.Commit()
	rev := tbl.Revision(db.ReadTxn())

	for name, queries := range map[string][]statedb.Query[*node]{
		"no match":       {nodeValue.Query("nothing has this value")},
		"deleted object": {nodeName.Query("n0003")},
		"both, twice":    {nodeName.Query("n0003"), nodeValue.Query("2"), nodeName.Query("n0003")},
	} {
		t.Run(name, func(t *testing.T) {
			m, err := st.Refresh(ctx(t), "b", queries...)
			require.NoError(t, err)
			require.Zero(t, m.Len())
			ended, cancel := context.WithCancel(context.Background())
			cancel()
			res, err := m.Wait(ended)
			require.NoError(t, err)
			require.Equal(t, sets.Result{}, res)
		})
	}
	require.Equal(t, rev, tbl.Revision(db.ReadTxn()), "a Refresh of nothing wrote")
}

// TestRefreshWritesInBoundedTransactions refreshes more than two
// transactions' worth of objects, all of them and through overlapping
// queries: no transaction writes more than MaxObjectsPerTxn objects, and
// each object is marked once.
func TestRefreshWritesInBoundedTransactions(t *testing.T) {
	db, tbl, st, sizes := bareTable(t, nil, nil, nil)
	const n = 2*sets.MaxObjectsPerTxn + 500
	fill(t, db, tbl, n, func() status.Set { return status.NewSet().Set("b", status.Done()) })
	fillRev := tbl.Revision(db.ReadTxn())
	m, err := st.Refresh(ctx(t), "b")
	require.NoError(t, err)
	require.Equal(t, n, m.Len())
	m, err = st.Refresh(ctx(t), "b", nodeName.Query("n0001"), nodeValue.Query("1"), nodeName.Query("n2000"))
	require.NoError(t, err)
	require.Equal(t, n, m.Len())
	require.Equal(t, fillRev+2*n, tbl.Revision(db.ReadTxn()), "an object was marked twice")
	require.LessOrEqual(t, sizes.largest(fillRev), sets.MaxObjectsPerTxn)
}

// TestRefreshOfAnObjectInErrorAppliesItUnderAReportOnlyDriftCheck
// refreshes an object whose status for b is an Error its reconciler did not
// write in this process (restored from a dump, or carried over a restart):
// its version is not known to be in the target, so the refresh must have it
// applied, not drift-checked: a report-only check finding it drifted would
// write it Done with nothing applied.
func TestRefreshOfAnObjectInErrorAppliesItUnderAReportOnlyDriftCheck(t *testing.T) {
	w := startFWorldWith(t, []string{"b"}, func(w *fworld, name string) []reconciler.Option {
		target := w.targets[name]
		return []reconciler.Option{
			reconciler.WithDriftCheck(func(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, n *node) (bool, error) {
				v, found, err := target.Get(n.Name)
				return found && v == n.Value, err
			}),
			reconciler.WithDriftReportOnly(),
		}
	})
	for _, st := range []status.Status{status.TerminalError(errors.New("restored")), status.Error(errors.New("restored"))} {
		insert(t, w.db, w.nodes, &node{Name: "x", Value: fmt.Sprint(st.Terminal), Statuses: status.NewSet().Set("b", st)})
		m, err := w.set.Refresh(ctx(t), "b")
		require.NoError(t, err)
		res, err := m.Wait(ctx(t))
		require.NoError(t, err)
		require.Equal(t, sets.Result{Done: 1}, res, "after %s", st)
		v, found, err := w.targets["b"].Get("x")
		require.NoError(t, err)
		require.True(t, found && v == fmt.Sprint(st.Terminal), "x, refreshed from %s, is Done but the target holds %q (found: %v)", st, v, found)
	}
}

// TestMarkedWaitFollowsObjectsChangedOrDeletedAfterTheMark refreshes b
// while its reconciler is paused, then deletes one marked object, gives
// another a new version, takes b's entry out of a third: Wait counts the
// deleted one as Deleted, and waits for the others until b attempted them
// in their latest version.
func TestMarkedWaitFollowsObjectsChangedOrDeletedAfterTheMark(t *testing.T) {
	w := startFWorld(t, []string{"a", "b"})
	fill(t, w.db, w.nodes, 4, func() status.Set { return status.NewSet().Pending("a", "b") })
	require.NoError(t, w.set.Wait(ctx(t), []string{"a", "b"}))
	w.recs["b"].Pause()
	m, err := w.set.Refresh(ctx(t), "b")
	require.NoError(t, err)
	require.Equal(t, 4, m.Len())

	wtxn := w.db.WriteTxn(w.nodes)
	o0, _, _ := w.nodes.Get(wtxn, nodeName.Query("n0000"))
	_, _, err = w.nodes.Delete(wtxn, o0)
	require.NoError(t, err)
	o1, _, _ := w.nodes.Get(wtxn, nodeName.Query("n0001"))
	o1 = o1.clone()
	o1.Value = "2"
	o1.Statuses = o1.Statuses.Set("b", status.Pending())
	_, _, err = w.nodes.Insert(wtxn, o1)
	require.NoError(t, err)
	o2, _, _ := w.nodes.Get(wtxn, nodeName.Query("n0002"))
	o2 = o2.clone()
	o2.Statuses = o2.Statuses.Delete("b")
	_, _, err = w.nodes.Insert(wtxn, o2)
	require.NoError(t, err)
	wtxn.Commit()

	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	res, err := m.Wait(short)
	require.ErrorIs(t, err, sets.ErrNotSettled)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, sets.Result{Deleted: 1}, res, "b is paused: nothing was attempted")
	for _, key := range []string{"n0001", "n0002", "n0003"} {
		require.Contains(t, err.Error(), key)
	}

	w.recs["b"].Resume()
	res, err = m.Wait(ctx(t))
	require.NoError(t, err)
	require.Equal(t, sets.Result{Done: 3, Deleted: 1}, res)
	v, found, err := w.targets["b"].Get("n0001")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "2", v, "the attempt counted was not of the latest version")
}

// TestMarkedWaitDoesNotCountAnAttemptUnderWayAtTheMark blocks b's Update of
// an object, refreshes it while the Update is in flight, and releases it:
// Wait returns only after an Update that began after the mark.
func TestMarkedWaitDoesNotCountAnAttemptUnderWayAtTheMark(t *testing.T) {
	w := startFWorld(t, []string{"b"})
	f := w.faults["b"]
	require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay, Key: "x", Op: reconcilertest.OpUpdate, Next: 1}))
	insert(t, w.db, w.nodes, &node{Name: "x", Value: "1", Statuses: status.NewSet().Pending("b")})
	deadline := time.After(timeout)
	for {
		inflight, changed := f.InFlightWatch()
		if len(inflight) == 1 {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatal("the Update of x never started")
		}
	}
	m, err := w.set.Refresh(ctx(t), "b")
	require.NoError(t, err)
	require.Equal(t, 1, m.Len())
	f.Clear("")
	res, err := m.Wait(ctx(t))
	require.NoError(t, err)
	require.Equal(t, sets.Result{Done: 1}, res)
	require.GreaterOrEqual(t, w.updates("b", "x"), 2, "Wait counted the attempt under way at the mark")
}

// TestWaitAcrossNamesDoneOnlyAndDoneOrError pins how the two waits treat
// retryable and terminal errors: DoneOrError returns the failed objects at
// once; Done-only waits out a retryable error (ctx ends, listing it) but
// not a terminal one, which it returns once the retryable one is Done.
func TestWaitAcrossNamesDoneOnlyAndDoneOrError(t *testing.T) {
	w := startFWorld(t, []string{"a", "b"})
	f := w.faults["b"]
	require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Key: "x"}))
	require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeTerminal, Key: "y"}))
	for _, key := range []string{"x", "y", "z"} {
		insert(t, w.db, w.nodes, &node{Name: key, Value: "1", Statuses: status.NewSet().Pending("a", "b")})
	}

	err := w.set.Wait(ctx(t), []string{"a", "b"}, sets.DoneOrError())
	require.ErrorIs(t, err, reconciler.ErrObjectFailed)
	require.Contains(t, err.Error(), "x (b: Error")
	require.Contains(t, err.Error(), "y (b: Error")
	require.NotContains(t, err.Error(), "z (")

	require.NoError(t, w.set.Wait(ctx(t), []string{"a"}))

	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = w.set.Wait(short, []string{"b", "a"})
	require.ErrorIs(t, err, sets.ErrNotSettled)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "x (b:")
	require.NotContains(t, err.Error(), "y (", "a terminal error is settled")

	f.Clear("x")
	err = w.set.Wait(ctx(t), []string{"a", "b"})
	require.ErrorIs(t, err, reconciler.ErrObjectFailed)
	require.NotErrorIs(t, err, sets.ErrNotSettled)
	require.Contains(t, err.Error(), "y (b: Error")
	require.NotContains(t, err.Error(), "x (")
	require.Equal(t, status.KindDone, get(t, w.db, w.nodes, "x").Statuses.Get("b").Kind)
}

// TestWaitWithASnapshotWaitsForItsObjectsOnly waits with Snapshot: for an
// empty snapshot it returns at once even for a name nobody serves; for a
// snapshot without an object stuck in b's Update it returns although the
// table at the call has it; an object of the snapshot deleted since counts
// as settled.
func TestWaitWithASnapshotWaitsForItsObjectsOnly(t *testing.T) {
	w := startFWorld(t, []string{"b"})
	empty := w.db.ReadTxn()
	f := w.faults["b"]
	require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay, Key: "late", Op: reconcilertest.OpUpdate}))
	wtxn := w.db.WriteTxn(w.nodes)
	_, _, err := w.nodes.Insert(wtxn, &node{Name: "early", Value: "1", Statuses: status.NewSet().Pending("b")})
	require.NoError(t, err)
	first := wtxn.Commit()
	w.reconciled(t, "b") // early's round is over before late is in the table
	wtxn = w.db.WriteTxn(w.nodes)
	_, _, err = w.nodes.Insert(wtxn, &node{Name: "late", Value: "1", Statuses: status.NewSet().Pending("b")})
	require.NoError(t, err)
	second := wtxn.Commit()
	deadline := time.After(timeout)
	for {
		inflight, changed := f.InFlightWatch()
		if len(inflight) == 1 {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatal("the Update of late never started")
		}
	}

	require.NoError(t, w.set.Wait(ctx(t), []string{"ghost"}, sets.Snapshot(empty)))
	require.NoError(t, w.set.Wait(ctx(t), []string{"b"}, sets.Snapshot(first)))
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = w.set.Wait(short, []string{"b"})
	require.ErrorIs(t, err, sets.ErrNotSettled)
	require.Contains(t, err.Error(), "late (b: Pending)")
	require.NotContains(t, err.Error(), "early")

	wtxn = w.db.WriteTxn(w.nodes)
	_, _, err = w.nodes.Delete(wtxn, &node{Name: "late"})
	require.NoError(t, err)
	wtxn.Commit()
	require.NoError(t, w.set.Wait(ctx(t), []string{"b"}, sets.Snapshot(second)), "an object of the snapshot deleted since is settled")
}

// TestWaitGivenAnOpenWriteTxnAsSnapshotDoesNotHang passes the write
// transaction the caller holds as the snapshot: Wait must answer (an error
// or the wait) and not block on the table lock the caller itself holds. It
// runs on a goroutine of its own only so that the test can end if it blocks;
// on the caller's goroutine it would block for good.
func TestWaitGivenAnOpenWriteTxnAsSnapshotDoesNotHang(t *testing.T) {
	db, tbl, st, _ := bareTable(t, nil, nil, nil)
	fill(t, db, tbl, 3, func() status.Set { return status.NewSet().Set("b", status.Done()) })
	wtxn := db.WriteTxn(tbl)
	done := make(chan error, 1)
	c, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	go func() { done <- st.Wait(c, []string{"b"}, sets.Snapshot(wtxn)) }()
	select {
	case err := <-done:
		wtxn.Abort()
		if err != nil {
			require.ErrorIs(t, err, reconciler.ErrInvalidConfig)
		}
	case <-time.After(5 * time.Second):
		wtxn.Abort()
		<-done
		t.Fatal("Wait with an open write transaction as its snapshot blocked past its ctx")
	}
}

// noPanic runs f and fails the test if it panics.
func noPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked: %v", what, r)
		}
	}()
	f()
}

// TestBadArgumentsAreRefusedWithErrInvalidConfigNeverAPanic calls every
// method with what a careless caller gives: the zero and nil Table and
// Marked, a nil context, a nil option, the zero query.
func TestBadArgumentsAreRefusedWithErrInvalidConfigNeverAPanic(t *testing.T) {
	db, tbl, st, _ := bareTable(t, nil, nil, nil)
	fill(t, db, tbl, 3, func() status.Set { return status.NewSet().Set("b", status.Done()) })
	var nilCtx context.Context
	var zero sets.Table[*node]
	var nilTable *sets.Table[*node]
	var zeroMarked sets.Marked[*node]
	var nilMarked *sets.Marked[*node]
	invalid := func(what string, f func() error) {
		t.Helper()
		noPanic(t, what, func() {
			err := f()
			require.ErrorIs(t, err, reconciler.ErrInvalidConfig, what)
		})
	}
	for tname, tb := range map[string]*sets.Table[*node]{"zero Table": &zero, "nil Table": nilTable} {
		invalid(tname+".Retire", func() error { _, err := tb.Retire(ctx(t), "b"); return err })
		invalid(tname+".Refresh", func() error { _, err := tb.Refresh(ctx(t), "b"); return err })
		invalid(tname+".Wait", func() error { return tb.Wait(ctx(t), []string{"b"}) })
		invalid(tname+".Statuses", func() error { _, err := tb.Statuses(&node{}); return err })
		noPanic(t, tname+".Name", func() { _ = tb.Name() })
	}
	for mname, m := range map[string]*sets.Marked[*node]{"zero Marked": &zeroMarked, "nil Marked": nilMarked} {
		invalid(mname+".Wait", func() error { _, err := m.Wait(ctx(t)); return err })
		noPanic(t, mname+".Len", func() { require.Zero(t, m.Len()) })
	}
	invalid("Retire(nil ctx)", func() error { _, err := st.Retire(nilCtx, "b"); return err })
	invalid("Refresh(nil ctx)", func() error { _, err := st.Refresh(nilCtx, "b"); return err })
	invalid("Wait(nil ctx)", func() error { return st.Wait(nilCtx, []string{"b"}) })
	m, err := st.Refresh(ctx(t), "b")
	require.NoError(t, err)
	invalid("Marked.Wait(nil ctx)", func() error { _, err := m.Wait(nilCtx); return err })
	invalid("Wait(nil option)", func() error { return st.Wait(ctx(t), []string{"b"}, nil) })
	noPanic(t, "Refresh(zero query)", func() {
		// StateDB reads the zero Query as the primary index's empty key.
		m, err := st.Refresh(ctx(t), "b", statedb.Query[*node]{})
		require.NoError(t, err)
		require.Zero(t, m.Len())
	})
}

// TestAPanicOfAFunctionIsReturnedAndReleasesTheTable makes each function
// given to Of panic in each method that calls it, at the first object and
// in the second transaction: the method returns ErrFuncPanicked, the
// table's lock is free afterwards, and no object was half changed.
func TestAPanicOfAFunctionIsReturnedAndReleasesTheTable(t *testing.T) {
	type fn int
	const (
		cloneFn fn = iota
		getFn
		setFn
	)
	cases := []struct {
		name string
		fn   fn
		call func(context.Context, *sets.Table[*node]) error
	}{
		{"Retire/clone", cloneFn, func(c context.Context, st *sets.Table[*node]) error { _, err := st.Retire(c, "b"); return err }},
		{"Retire/get", getFn, func(c context.Context, st *sets.Table[*node]) error { _, err := st.Retire(c, "b"); return err }},
		{"Retire/set", setFn, func(c context.Context, st *sets.Table[*node]) error { _, err := st.Retire(c, "b"); return err }},
		{"Refresh/clone", cloneFn, func(c context.Context, st *sets.Table[*node]) error { _, err := st.Refresh(c, "b"); return err }},
		{"Refresh/get", getFn, func(c context.Context, st *sets.Table[*node]) error { _, err := st.Refresh(c, "b"); return err }},
		{"Refresh/set", setFn, func(c context.Context, st *sets.Table[*node]) error { _, err := st.Refresh(c, "b"); return err }},
		{"Wait/get", getFn, func(c context.Context, st *sets.Table[*node]) error { return st.Wait(c, []string{"b"}) }},
	}
	for _, tc := range cases {
		for _, at := range []int64{1, sets.MaxObjectsPerTxn + 10} {
			t.Run(fmt.Sprintf("%s/call=%d", tc.name, at), func(t *testing.T) {
				var calls atomic.Int64
				hook := func(which fn) func() {
					if which != tc.fn {
						return nil
					}
					return func() {
						if calls.Add(1) == at {
							panic("user function broke")
						}
					}
				}
				db, tbl, st, _ := bareTable(t, hook(cloneFn), hook(getFn), hook(setFn))
				fill(t, db, tbl, 2*sets.MaxObjectsPerTxn, func() status.Set {
					return status.NewSet().Set("a", status.Done()).Set("b", status.Pending())
				})
				before := byKey(db, tbl)
				var err error
				noPanic(t, tc.name, func() { err = tc.call(ctx(t), st) })
				if tc.name == "Wait/get" && at > 2*sets.MaxObjectsPerTxn {
					return
				}
				require.ErrorIs(t, err, sets.ErrFuncPanicked)

				locked := make(chan struct{})
				go func() { db.WriteTxn(tbl).Abort(); close(locked) }()
				select {
				case <-locked:
				case <-time.After(timeout):
					t.Fatal("the table stays locked after the panic")
				}
				for key, o := range byKey(db, tbl) {
					old := before[key]
					require.Equal(t, old.Statuses.Get("a").ID(), o.Statuses.Get("a").ID(), "object %s", key)
					if at == 1 {
						require.Equal(t, old.Statuses.Get("b").ID(), o.Statuses.Get("b").ID(), "object %s changed though the first call panicked", key)
					}
				}
			})
		}
	}
}

// TestConcurrentMarkedWaitsReturnTheSameResult waits on one Marked from
// several goroutines and again afterwards: each gets the same counts, and
// the counts add up to what was marked.
func TestConcurrentMarkedWaitsReturnTheSameResult(t *testing.T) {
	w := startFWorld(t, []string{"b"})
	fill(t, w.db, w.nodes, 20, func() status.Set { return status.NewSet().Pending("b") })
	require.NoError(t, w.set.Wait(ctx(t), []string{"b"}))
	require.NoError(t, w.faults["b"].Inject(reconcilertest.Fault{Mode: reconcilertest.ModeTerminal, Key: "n0002"}))
	m, err := w.set.Refresh(ctx(t), "b")
	require.NoError(t, err)
	results := make([]sets.Result, 4)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			res, err := m.Wait(ctx(t))
			if err == nil {
				results[i] = res
			}
		})
	}
	wg.Wait()
	again, err := m.Wait(ctx(t))
	require.NoError(t, err)
	require.Equal(t, 19, again.Done)
	require.Len(t, again.Failed, 1)
	require.Equal(t, "n0002", again.Failed[0].Key)
	require.ErrorIs(t, again.Err(), reconciler.ErrObjectFailed)
	for _, res := range results {
		require.Equal(t, again, res)
	}
}

// TestRetiredReportsAPanicDegradedAndRetries makes get panic under the job
// of Retired: its health turns Degraded with ErrFuncPanicked's text, the
// hive keeps running, and once get stops panicking the job, retried,
// retires the name and reports OK.
func TestRetiredReportsAPanicDegradedAndRetries(t *testing.T) {
	var broken atomic.Bool
	broken.Store(true)
	var (
		db  *statedb.DB
		tbl statedb.RWTable[*node]
		hp  *cell.SimpleHealth
	)
	h := hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth),
		cell.Invoke(func(s *cell.SimpleHealth) { hp = s }),
		cell.Module("nodes", "Nodes",
			cell.Provide(job.Registry.NewGroup),
			cell.Provide(func(db_ *statedb.DB) (*sets.Table[*node], error) {
				var err error
				db = db_
				if tbl, err = statedb.NewTable(db, "nodes", nodeName); err != nil {
					return nil, err
				}
				wtxn := db.WriteTxn(tbl)
				for _, name := range []string{"x", "y"} {
					if _, _, err = tbl.Insert(wtxn, &node{Name: name, Statuses: status.NewSet().Set("a", status.Done()).Pending("gone")}); err != nil {
						return nil, err
					}
				}
				wtxn.Commit()
				return sets.Of(db, tbl, (*node).clone, func(n *node) status.Set {
					if broken.Load() {
						panic("get broke")
					}
					return n.Statuses
				}, setSet)
			}),
			sets.Retired[*node]("gone"),
		))
	log := hivetest.Logger(t, hivetest.LogLevel(slog.LevelError+1))
	require.NoError(t, h.Start(log, ctx(t)))
	t.Cleanup(func() { require.NoError(t, h.Stop(log, context.Background())) })

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		jh := hp.GetChild("job-retire-sets")
		if !assert.NotNil(c, jh, "the job's health") {
			return
		}
		jh.Lock()
		defer jh.Unlock()
		assert.Equal(c, cell.StatusDegraded, jh.Level)
		assert.ErrorContains(c, jh.Error, sets.ErrFuncPanicked.Error())
	}, timeout, tick)
	require.Equal(t, status.KindPending, get(t, db, tbl, "x").Statuses.Get("gone").Kind, "nothing retired while get panics")

	broken.Store(false)
	eventually(t, db, tbl, "gone retired once get works", func(objs iter.Seq2[*node, statedb.Revision]) bool {
		for o := range objs {
			if !slices.Equal(names(o.Statuses), []string{"a"}) {
				return false
			}
		}
		return true
	})
	waitHealth(t, hp, "Retired gone: 2 object(s) changed")
}

// TestAWaitThatFindsAnotherUnderWayReturnsTheResultSoFar: while one Wait
// follows a refresh (an object's Update held), another whose ctx ends
// returns what the attempts gave so far, as Marked.Wait says, not a zero
// Result. Workers, so that the held Update holds no other object's status.
func TestAWaitThatFindsAnotherUnderWayReturnsTheResultSoFar(t *testing.T) {
	w := startFWorldWith(t, []string{"b"}, func(*fworld, string) []reconciler.Option {
		return []reconciler.Option{reconciler.WithConcurrency(4)}
	})
	fill(t, w.db, w.nodes, 20, func() status.Set { return status.NewSet().Pending("b") })
	require.NoError(t, w.set.Wait(ctx(t), []string{"b"}))
	require.NoError(t, w.faults["b"].Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay, Key: "n0005"}))
	m, err := w.set.Refresh(ctx(t), "b")
	require.NoError(t, err)
	first := make(chan error, 1)
	go func() { _, err := m.Wait(ctx(t)); first <- err }()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	require.Eventually(t, func() bool {
		res, err := m.Wait(cancelled)
		require.ErrorIs(t, err, sets.ErrNotSettled)
		return strings.Contains(err.Error(), "another Wait under way") && res.Done == 19
	}, timeout, tick, "a Wait beside the one under way never returned the 19 objects attempted")
	w.faults["b"].Clear("")
	require.NoError(t, <-first)
}

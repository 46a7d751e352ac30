package sets_test

// Tests written from the documented guarantees of package sets only (its
// go doc, docs/control.md and the examples), each trying to break one.

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
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
					r, err := reconciler.Register(p, tbl, (*node).clone,
						func(n *node, s status.Status) *node { n.Statuses = n.Statuses.Set(name, s); return n },
						func(n *node) status.Status { return n.Statuses.Get(name) },
						faults, nil, reconciler.WithName(name), reconciler.WithRetry(time.Millisecond, 5*time.Millisecond), reconciler.WithPruning(0))
					if err != nil {
						return err
					}
					w.faults[name], w.targets[name], w.recs[name] = faults, target, r
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

package sets_test

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/sets"
	"github.com/converge-go/converge/status"
)

// timeout bounds every wait of these tests; tick is how often the
// conditions without a watch channel (health) are checked.
const (
	timeout = 20 * time.Second
	tick    = 5 * time.Millisecond
)

// node is an object served by several named reconcilers through Statuses.
type node struct {
	Name     string
	Value    string
	Statuses status.Set
}

func (n *node) clone() *node             { c := *n; return &c }
func (n *node) TableHeader() []string    { return []string{"Name", "Value", "Statuses"} }
func (n *node) TableRow() []string       { return []string{n.Name, n.Value, n.Statuses.String()} }
func getSet(n *node) status.Set          { return n.Statuses }
func setSet(n *node, s status.Set) *node { n.Statuses = s; return n }

var nodeName = statedb.Index[*node, string]{
	Name:       "name",
	FromObject: func(n *node) index.KeySet { return index.NewKeySet(index.String(n.Name)) },
	FromKey:    index.String,
	FromString: index.FromString,
	Unique:     true,
}

var nodeValue = statedb.Index[*node, string]{
	Name:       "value",
	FromObject: func(n *node) index.KeySet { return index.NewKeySet(index.String(n.Value)) },
	FromKey:    index.String,
	FromString: index.FromString,
}

// newTable returns a database with a nodes table and its sets.Table.
func newTable(t testing.TB) (*statedb.DB, statedb.RWTable[*node], *sets.Table[*node]) {
	t.Helper()
	db := statedb.New()
	tbl, err := statedb.NewTable(db, "nodes", nodeName, nodeValue)
	require.NoError(t, err)
	st, err := sets.Of(db, tbl, (*node).clone, getSet, setSet)
	require.NoError(t, err)
	return db, tbl, st
}

// insert writes nodes in one transaction.
func insert(t testing.TB, db *statedb.DB, tbl statedb.RWTable[*node], nodes ...*node) {
	t.Helper()
	wtxn := db.WriteTxn(tbl)
	for _, n := range nodes {
		_, _, err := tbl.Insert(wtxn, n)
		require.NoError(t, err)
	}
	wtxn.Commit()
}

// fill inserts n nodes n000... with the statuses of set.
func fill(t testing.TB, db *statedb.DB, tbl statedb.RWTable[*node], n int, set func() status.Set) {
	t.Helper()
	nodes := make([]*node, n)
	for i := range nodes {
		nodes[i] = &node{Name: fmt.Sprintf("n%04d", i), Value: "1", Statuses: set()}
	}
	insert(t, db, tbl, nodes...)
}

// get returns the node with name.
func get(t testing.TB, db *statedb.DB, tbl statedb.Table[*node], name string) *node {
	t.Helper()
	n, _, found := tbl.Get(db.ReadTxn(), nodeName.Query(name))
	require.True(t, found, "node %q", name)
	return n
}

// eventually waits on the table's watch channel until cond holds of its
// contents, failing the test after timeout.
func eventually(t testing.TB, db *statedb.DB, tbl statedb.Table[*node], what string, cond func(iter.Seq2[*node, statedb.Revision]) bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		objs, watch := tbl.AllWatch(db.ReadTxn())
		if cond(objs) {
			return
		}
		select {
		case <-watch:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// writeStatus writes name's status of the node with key, as its reconciler
// would.
func writeStatus(t testing.TB, db *statedb.DB, tbl statedb.RWTable[*node], key, name string, st status.Status) {
	t.Helper()
	wtxn := db.WriteTxn(tbl)
	n, _, found := tbl.Get(wtxn, nodeName.Query(key))
	require.True(t, found, "node %q", key)
	n = n.clone()
	n.Statuses = n.Statuses.Set(name, st)
	_, _, err := tbl.Insert(wtxn, n)
	require.NoError(t, err)
	wtxn.Commit()
}

// ops is a target shared by named reconcilers: it records, per name, the
// updates of each node; fail[name][key] makes its update fail.
type ops struct {
	mu      sync.Mutex
	updates map[string]map[string]int // name -> key -> count
	fail    map[string]map[string]error
}

func newOps() *ops {
	return &ops{updates: map[string]map[string]int{}, fail: map[string]map[string]error{}}
}

func (o *ops) failing(name, key string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fail[name] == nil {
		o.fail[name] = map[string]error{}
	}
	o.fail[name][key] = err
}

func (o *ops) count(name string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, c := range o.updates[name] {
		n += c
	}
	return n
}

// named are the operations of the reconciler name.
type named struct {
	*ops
	name string
}

func (o named) Update(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, n *node) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.updates[o.name] == nil {
		o.updates[o.name] = map[string]int{}
	}
	o.updates[o.name][n.Name]++
	return o.fail[o.name][n.Name]
}

func (named) Delete(context.Context, statedb.ReadTxn, statedb.Revision, *node) error { return nil }
func (named) Prune(context.Context, statedb.ReadTxn, iter.Seq2[*node, statedb.Revision]) error {
	return nil
}

// world is a started hive with named reconcilers on the nodes table.
type world struct {
	db    *statedb.DB
	nodes statedb.RWTable[*node]
	set   *sets.Table[*node]
	ops   *ops
	p     reconciler.Params
}

// startWorld starts a hive with the nodes table, reconcilers of names and
// the cells given, and stops it when the test ends.
func startWorld(t testing.TB, names []string, extra func(name string) []reconciler.Option, cells ...cell.Cell) *world {
	t.Helper()
	w := &world{ops: newOps()}
	all := []cell.Cell{
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
			cell.Invoke(func(p reconciler.Params, tbl statedb.RWTable[*node], st *sets.Table[*node]) error {
				w.db, w.nodes, w.set, w.p = p.DB, tbl, st, p
				for _, name := range names {
					if err := w.register(name, extra); err != nil {
						return err
					}
				}
				return nil
			}),
			cell.Group(cells...),
		),
	}
	h := hive.New(all...)
	log := hivetest.Logger(t, hivetest.LogLevel(slog.LevelError))
	require.NoError(t, h.Start(log, context.Background()))
	t.Cleanup(func() { require.NoError(t, h.Stop(log, context.Background())) })
	return w
}

// register registers the reconciler name (also once the hive runs: a name
// that joins).
func (w *world) register(name string, extra func(name string) []reconciler.Option) error {
	opts := []reconciler.Option{reconciler.WithName(name), reconciler.WithRetry(time.Millisecond, 5*time.Millisecond), reconciler.WithPruning(0)}
	if extra != nil {
		opts = append(opts, extra(name)...)
	}
	_, err := reconciler.Register(w.p, w.nodes, (*node).clone,
		func(n *node, s status.Status) *node { n.Statuses = n.Statuses.Set(name, s); return n },
		func(n *node) status.Status { return n.Statuses.Get(name) },
		named{w.ops, name}, nil, opts...)
	return err
}

// ctx returns a context that ends with the test, or after timeout.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return c
}

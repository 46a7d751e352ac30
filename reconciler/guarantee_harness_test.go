package reconciler_test

// Harness of the guarantee review: an object type, a recording target and
// a hive builder of its own, so that the attacks in guarantee_*_test.go
// depend only on the documented API.

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"slices"
	"sort"
	"strings"
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

	convergeindex "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// o30Obj is an object of the reconciled table.
type o30Obj struct {
	ID     string
	Value  string
	Status status.Status
}

func (o *o30Obj) clone() *o30Obj                    { c := *o; return &c }
func (o *o30Obj) getStatus() status.Status          { return o.Status }
func (o *o30Obj) setStatus(s status.Status) *o30Obj { o.Status = s; return o }
func (o *o30Obj) TableHeader() []string             { return []string{"ID", "Value", "Status"} }
func (o *o30Obj) TableRow() []string                { return []string{o.ID, o.Value, o.Status.String()} }

var o30ByID = statedb.Index[*o30Obj, string]{
	Name:       "id",
	FromObject: func(o *o30Obj) index.KeySet { return index.NewKeySet(index.String(o.ID)) },
	FromKey:    index.String,
	FromString: index.FromString,
	Unique:     true,
}

var o30StatusIndex = convergeindex.NewStatusIndex((*o30Obj).getStatus)

func o30NewTable(db *statedb.DB, name string) (statedb.RWTable[*o30Obj], error) {
	return statedb.NewTable(db, name, o30ByID, o30StatusIndex)
}

// o30Target is a recording target: a map of ID to value, with counters and
// optional hooks that run inside the operations.
type o30Target struct {
	mu      sync.Mutex
	data    map[string]string
	updates map[string]int
	deletes map[string]int
	prunes  int
	// pruneCh receives a value after every prune (non-blocking).
	pruneCh chan struct{}
	// opCh receives a value after every operation (non-blocking).
	opCh chan struct{}

	// Hooks, set before the reconciler starts; nil means none. A hook runs
	// before the operation touches the map; a non-nil error fails it.
	beforeUpdate func(ctx context.Context, o *o30Obj) error
	afterUpdate  func(ctx context.Context, o *o30Obj) error
	beforeDelete func(ctx context.Context, o *o30Obj) error
	afterDelete  func(ctx context.Context, o *o30Obj) error
	beforePrune  func(ctx context.Context) error
}

func newO30Target() *o30Target {
	return &o30Target{
		data:    map[string]string{},
		updates: map[string]int{},
		deletes: map[string]int{},
		pruneCh: make(chan struct{}, 1),
		opCh:    make(chan struct{}, 1),
	}
}

func (t *o30Target) notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (t *o30Target) Update(ctx context.Context, _ statedb.ReadTxn, _ statedb.Revision, o *o30Obj) error {
	if t.beforeUpdate != nil {
		if err := t.beforeUpdate(ctx, o); err != nil {
			return err
		}
	}
	t.mu.Lock()
	t.data[o.ID] = o.Value
	t.updates[o.ID]++
	t.mu.Unlock()
	defer t.notify(t.opCh)
	if t.afterUpdate != nil {
		return t.afterUpdate(ctx, o)
	}
	return nil
}

func (t *o30Target) Delete(ctx context.Context, _ statedb.ReadTxn, _ statedb.Revision, o *o30Obj) error {
	if t.beforeDelete != nil {
		if err := t.beforeDelete(ctx, o); err != nil {
			return err
		}
	}
	t.mu.Lock()
	delete(t.data, o.ID)
	t.deletes[o.ID]++
	t.mu.Unlock()
	defer t.notify(t.opCh)
	if t.afterDelete != nil {
		return t.afterDelete(ctx, o)
	}
	return nil
}

func (t *o30Target) Prune(ctx context.Context, _ statedb.ReadTxn, objs iter.Seq2[*o30Obj, statedb.Revision]) error {
	if t.beforePrune != nil {
		if err := t.beforePrune(ctx); err != nil {
			return err
		}
	}
	keep := map[string]bool{}
	for o := range objs {
		keep[o.ID] = true
	}
	t.mu.Lock()
	maps.DeleteFunc(t.data, func(id, _ string) bool { return !keep[id] })
	t.prunes++
	t.mu.Unlock()
	t.notify(t.pruneCh)
	return nil
}

func (t *o30Target) UpdateBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*o30Obj]) {
	for i := range batch {
		batch[i].Result = t.Update(ctx, txn, batch[i].Revision, batch[i].Object)
	}
}

func (t *o30Target) DeleteBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*o30Obj]) {
	for i := range batch {
		batch[i].Result = t.Delete(ctx, txn, batch[i].Revision, batch[i].Object)
	}
}

func (t *o30Target) get(id string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.data[id]
	return v, ok
}

func (t *o30Target) snapshot() map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.data)
}

func (t *o30Target) deleteCount(id string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.deletes[id]
}

func (t *o30Target) pruneCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.prunes
}

// o30Env is a hive with one reconciled table.
type o30Env struct {
	t      testing.TB
	hive   *hive.Hive
	db     *statedb.DB
	table  statedb.RWTable[*o30Obj]
	rec    reconciler.Reconciler[*o30Obj]
	target *o30Target
	params reconciler.Params
	health *cell.SimpleHealth
	// running is set between start and stop, for the cleanup.
	running bool
}

type o30Config struct {
	batch bool
	opts  []reconciler.Option
	// setup, if set, runs in the invoke after the table exists and before
	// Register, and may return more options.
	setup func(db *statedb.DB, tbl statedb.RWTable[*o30Obj]) []reconciler.Option
	// extra cells of the hive, after the module.
	cells []cell.Cell
	// first cells of the hive, before everything else.
	first []cell.Cell
}

// newO30Env builds (does not start) a hive that registers the reconciler in
// a cell.Invoke.
func newO30Env(t testing.TB, target *o30Target, cfg o30Config) *o30Env {
	e := &o30Env{t: t, target: target}
	cells := append([]cell.Cell{}, cfg.first...)
	cells = append(cells,
		statedb.Cell,
		job.Cell,
		cell.Provide(cell.NewSimpleHealth),
		cell.Module("o30", "outsider test module",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(db *statedb.DB, p reconciler.Params, h *cell.SimpleHealth) error {
				e.db, e.params, e.health = db, p, h
				var err error
				e.table, err = o30NewTable(db, "o30")
				if err != nil {
					return err
				}
				opts := slices.Clip(cfg.opts)
				if cfg.setup != nil {
					opts = append(opts, cfg.setup(db, e.table)...)
				}
				var batch reconciler.BatchOperations[*o30Obj]
				if cfg.batch {
					batch = target
				}
				e.rec, err = reconciler.Register(p, e.table, (*o30Obj).clone, (*o30Obj).setStatus, (*o30Obj).getStatus, target, batch, opts...)
				return err
			}),
		),
	)
	cells = append(cells, cfg.cells...)
	e.hive = hive.New(cells...)
	t.Cleanup(func() {
		if e.running {
			_ = e.hive.Stop(hivetest.Logger(t), context.Background())
		}
	})
	return e
}

// o30Within runs f on a goroutine and fails the test if it does not return
// within d.
func o30Within(t testing.TB, d time.Duration, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		t.Fatalf("%s did not return within %v", what, d)
		return nil
	}
}

func (e *o30Env) start() {
	e.t.Helper()
	err := o30Within(e.t, 20*time.Second, "hive.Start", func() error {
		return e.hive.Start(hivetest.Logger(e.t), context.Background())
	})
	require.NoError(e.t, err)
	e.running = true
}

func (e *o30Env) stop() {
	e.t.Helper()
	err := o30Within(e.t, 20*time.Second, "hive.Stop", func() error {
		return e.hive.Stop(hivetest.Logger(e.t), context.Background())
	})
	e.running = false
	require.NoError(e.t, err)
}

// put writes objects with a fresh Pending status in one transaction and
// returns the table's revision after it.
func (e *o30Env) put(objs ...*o30Obj) statedb.Revision {
	e.t.Helper()
	wtxn := e.db.WriteTxn(e.table)
	for _, o := range objs {
		o.Status = status.Pending()
		_, _, err := e.table.Insert(wtxn, o)
		require.NoError(e.t, err)
	}
	rev := e.table.Revision(wtxn)
	wtxn.Commit()
	return rev
}

// putAsIs writes objects exactly as given (status included).
func (e *o30Env) putAsIs(objs ...*o30Obj) statedb.Revision {
	e.t.Helper()
	wtxn := e.db.WriteTxn(e.table)
	for _, o := range objs {
		_, _, err := e.table.Insert(wtxn, o)
		require.NoError(e.t, err)
	}
	rev := e.table.Revision(wtxn)
	wtxn.Commit()
	return rev
}

func (e *o30Env) del(ids ...string) statedb.Revision {
	e.t.Helper()
	wtxn := e.db.WriteTxn(e.table)
	for _, id := range ids {
		_, _, err := e.table.Delete(wtxn, &o30Obj{ID: id})
		require.NoError(e.t, err)
	}
	rev := e.table.Revision(wtxn)
	wtxn.Commit()
	return rev
}

func (e *o30Env) get(id string) (*o30Obj, bool) {
	o, _, ok := e.table.Get(e.db.ReadTxn(), o30ByID.Query(id))
	return o, ok
}

func (e *o30Env) rev() statedb.Revision {
	return e.table.Revision(e.db.ReadTxn())
}

// waitRev waits for WaitUntilReconciled(rev) with a deadline.
func (e *o30Env) waitRev(rev statedb.Revision) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, _, err := e.rec.WaitUntilReconciled(ctx, rev)
	require.NoError(e.t, err, "WaitUntilReconciled(%d)", rev)
}

// waitQuiet waits for nothing to be Pending or Refreshing, then for the
// reconciler to have handled everything up to the table's revision.
func (e *o30Env) waitQuiet() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(e.t, reconciler.WaitForReconciliation(ctx, e.db, e.table, o30StatusIndex))
	e.waitRev(e.rev())
}

// tableState is the table as a map of ID to value, with the IDs whose
// status is not Done.
func (e *o30Env) tableState() (map[string]string, []string) {
	m := map[string]string{}
	var notDone []string
	for o := range e.table.All(e.db.ReadTxn()) {
		m[o.ID] = o.Value
		if o.Status.Kind != status.KindDone {
			notDone = append(notDone, o.ID+":"+o.Status.String())
		}
	}
	return m, notDone
}

// requireConverged checks that every object is Done and the target holds
// exactly the table.
func (e *o30Env) requireConverged(what string) {
	e.t.Helper()
	want, notDone := e.tableState()
	require.Empty(e.t, notDone, "%s: objects not Done", what)
	got := e.target.snapshot()
	if !maps.Equal(want, got) {
		e.t.Fatalf("%s: target differs from the table (all Done):\n%s", what, o30Diff(want, got))
	}
}

func o30Diff(want, got map[string]string) string {
	var b strings.Builder
	keys := slices.Collect(maps.Keys(want))
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	n := 0
	for _, k := range keys {
		w, wok := want[k]
		g, gok := got[k]
		if w == g && wok == gok {
			continue
		}
		if n++; n > 20 {
			fmt.Fprintf(&b, "  ...\n")
			break
		}
		fmt.Fprintf(&b, "  %s: table %q (present %v), target %q (present %v)\n", k, w, wok, g, gok)
	}
	return b.String()
}

// o30Objs makes n objects named prefix-i with value v.
func o30Objs(prefix string, n int, v string) []*o30Obj {
	objs := make([]*o30Obj, n)
	for i := range objs {
		objs[i] = &o30Obj{ID: fmt.Sprintf("%s-%05d", prefix, i), Value: v}
	}
	return objs
}

func o30IDs(objs []*o30Obj) []string {
	ids := make([]string, len(objs))
	for i, o := range objs {
		ids[i] = o.ID
	}
	return ids
}

// o30Wait waits on ch with a deadline.
func o30Wait(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

package sets_test

// An outsider's attacks (session 55) on the documented guarantees of
// package sets (go doc ./sets; docs/control.md, "Several reconcilers on one
// status.Set"), designed from the promises alone, with real reconcilers on
// a real hive. Each test names the promise it tries to break.

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"slices"
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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	convergeindex "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/sets"
	"github.com/converge-go/converge/status"
)

// o55Timeout bounds every wait: a hang fails with a message.
const o55Timeout = 20 * time.Second

// o55Names are the names the table has a status index for.
var o55Names = []string{"a", "b", "c", "late", "gone"}

type o55Obj struct {
	ID, Value, Label string
	Set              status.Set
}

func (o *o55Obj) clone() *o55Obj        { c := *o; return &c }
func (o *o55Obj) TableHeader() []string { return []string{"ID", "Value", "Label", "Set"} }
func (o *o55Obj) TableRow() []string    { return []string{o.ID, o.Value, o.Label, o.Set.String()} }

var o55ID = statedb.Index[*o55Obj, string]{
	Name:       "id",
	FromObject: func(o *o55Obj) index.KeySet { return index.NewKeySet(index.String(o.ID)) },
	FromKey:    index.String,
	FromString: index.FromString,
	Unique:     true,
}

// o55SetIndex indexes the set as a whole: Pending while any name asks for
// work (status.Set.IsPendingOrRefreshing), Done otherwise.
var o55SetIndex = convergeindex.NewNamedStatusIndex("set", func(o *o55Obj) status.Status {
	if o.Set.IsPendingOrRefreshing() {
		return status.Status{Kind: status.KindPending}
	}
	return status.Status{Kind: status.KindDone}
})

// o55NameIndex is one name's status index.
var o55NameIndex = func() map[string]statedb.Index[*o55Obj, status.Kind] {
	m := map[string]statedb.Index[*o55Obj, status.Kind]{}
	for _, n := range o55Names {
		m[n] = convergeindex.NewNamedStatusIndex("status-"+n, func(o *o55Obj) status.Status { return o.Set.Get(n) })
	}
	return m
}()

func o55NewTable(db *statedb.DB) (statedb.RWTable[*o55Obj], error) {
	idx := []statedb.Indexer[*o55Obj]{o55SetIndex}
	for _, n := range o55Names {
		idx = append(idx, o55NameIndex[n])
	}
	return statedb.NewTable(db, "o55", o55ID, idx...)
}

// o55Ops is one name's target: a map of key to value, with per-key counts,
// gates that hold an Update, and failures.
type o55Ops struct {
	name string

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every call
	target  map[string]string
	updates map[string]int
	prunes  int
	fail    map[string]error // key ("*": every key) → error
	gates   map[string]chan struct{}
	entered map[string]chan struct{}
	calls   map[string][]string // key → each Update's revision and own status, for messages
}

func newO55Ops(name string) *o55Ops {
	return &o55Ops{name: name, changed: make(chan struct{}), target: map[string]string{},
		updates: map[string]int{}, fail: map[string]error{}, gates: map[string]chan struct{}{}, entered: map[string]chan struct{}{},
		calls: map[string][]string{}}
}

func (o *o55Ops) notifyLocked() { close(o.changed); o.changed = make(chan struct{}) }

// hold makes the next Update of key wait until release is called; entered
// is closed once that Update began.
func (o *o55Ops) hold(key string) (release func(), entered <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	g, e := make(chan struct{}), make(chan struct{})
	o.gates[key], o.entered[key] = g, e
	var once sync.Once
	return func() { once.Do(func() { close(g) }) }, e
}

func (o *o55Ops) failing(key string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err == nil {
		delete(o.fail, key)
	} else {
		o.fail[key] = err
	}
}

func (o *o55Ops) Update(ctx context.Context, _ statedb.ReadTxn, rev statedb.Revision, obj *o55Obj) error {
	o.mu.Lock()
	g, e := o.gates[obj.ID], o.entered[obj.ID]
	delete(o.gates, obj.ID)
	delete(o.entered, obj.ID)
	o.mu.Unlock()
	if e != nil {
		close(e)
		select {
		case <-g:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	defer o.notifyLocked()
	o.updates[obj.ID]++
	own := obj.Set.Get(o.name)
	o.calls[obj.ID] = append(o.calls[obj.ID], fmt.Sprintf("rev=%d %s id=%d value=%s set=%s", rev, own.Kind, own.ID(), obj.Value, obj.Set))
	if err := o.fail[obj.ID]; err != nil {
		return err
	}
	if err := o.fail["*"]; err != nil {
		return err
	}
	o.target[obj.ID] = obj.Value
	return nil
}

func (o *o55Ops) Delete(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, obj *o55Obj) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	defer o.notifyLocked()
	delete(o.target, obj.ID)
	return nil
}

func (o *o55Ops) Prune(_ context.Context, _ statedb.ReadTxn, objs iter.Seq2[*o55Obj, statedb.Revision]) error {
	keep := map[string]bool{}
	for obj := range objs {
		keep[obj.ID] = true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	defer o.notifyLocked()
	o.prunes++
	maps.DeleteFunc(o.target, func(k, _ string) bool { return !keep[k] })
	return nil
}

func (o *o55Ops) UpdateBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*o55Obj]) {
	for i := range batch {
		batch[i].Result = o.Update(ctx, txn, batch[i].Revision, batch[i].Object)
	}
}

func (o *o55Ops) DeleteBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*o55Obj]) {
	for i := range batch {
		batch[i].Result = o.Delete(ctx, txn, batch[i].Revision, batch[i].Object)
	}
}

// count returns key's Update count.
func (o *o55Ops) count(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.updates[key]
}

func (o *o55Ops) callsOf(key string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.calls[key])
}

func (o *o55Ops) counts() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.updates)
}

func (o *o55Ops) snapshot() map[string]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.target)
}

// o55Metrics counts, per name, the failed operations reported.
type o55Metrics struct {
	mu     sync.Mutex
	errors map[string]int
	ops    map[string]int
}

func (m *o55Metrics) ReconciliationDuration(_ cell.FullModuleID, name, _ string, _ time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ops[name]++
}

func (m *o55Metrics) ReconciliationErrors(_ cell.FullModuleID, name string, n, _ int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.errors[name] += n
}
func (m *o55Metrics) PruneError(cell.FullModuleID, string, error)            {}
func (m *o55Metrics) PruneDuration(cell.FullModuleID, string, time.Duration) {}

// o55World is a started hive with a table and named reconcilers on it.
type o55World struct {
	t       *testing.T
	h       *hive.Hive
	up      bool
	db      *statedb.DB
	tbl     statedb.RWTable[*o55Obj]
	p       reconciler.Params
	health  *cell.SimpleHealth
	metrics *o55Metrics
	recs    map[string]reconciler.Reconciler[*o55Obj]
	ops     map[string]*o55Ops
	names   []string // the names the writer stamps Pending
	batch   bool
	opts    func(name string) []reconciler.Option
	st      *sets.Table[*o55Obj]
}

type o55Config struct {
	batch bool
	opts  func(name string) []reconciler.Option
	// pending are the names the writer stamps; names if nil.
	pending []string
	// cells are added to the module (sets.Retired).
	cells []cell.Cell
	// fill is written before the hive starts.
	fill []*o55Obj
}

func newO55(t *testing.T, names []string, cfg o55Config) *o55World {
	w := &o55World{t: t, metrics: &o55Metrics{errors: map[string]int{}, ops: map[string]int{}},
		recs: map[string]reconciler.Reconciler[*o55Obj]{}, ops: map[string]*o55Ops{},
		names: names, batch: cfg.batch, opts: cfg.opts}
	if cfg.pending != nil {
		w.names = cfg.pending
	}
	cells := []cell.Cell{statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth)}
	cells = append(cells, cell.Module("o55", "outsider 55", append([]cell.Cell{
		cell.Provide(job.Registry.NewGroup),
		cell.Provide(func(db *statedb.DB) (*sets.Table[*o55Obj], error) {
			var err error
			if w.tbl, err = o55NewTable(db); err != nil {
				return nil, err
			}
			txn := db.WriteTxn(w.tbl)
			for _, o := range cfg.fill {
				if _, _, err := w.tbl.Insert(txn, o); err != nil {
					return nil, err
				}
			}
			txn.Commit()
			w.st, err = sets.Of(db, w.tbl, (*o55Obj).clone,
				func(o *o55Obj) status.Set { return o.Set },
				func(o *o55Obj, s status.Set) *o55Obj { o.Set = s; return o })
			return w.st, err
		}),
		cell.Invoke(func(p reconciler.Params, h *cell.SimpleHealth, _ *sets.Table[*o55Obj]) error {
			w.db, w.p, w.health = p.DB, p, h
			for _, n := range names {
				if err := w.register(n); err != nil {
					return err
				}
			}
			return nil
		})}, cfg.cells...)...))
	w.h = hive.New(cells...)
	require.NoError(t, w.h.Populate(o55Log(t)))
	w.start()
	t.Cleanup(w.stop)
	return w
}

// register registers name's reconciler (also once the hive has started).
func (w *o55World) register(name string) error {
	o := newO55Ops(name)
	var batch reconciler.BatchOperations[*o55Obj]
	if w.batch {
		batch = o
	}
	opts := []reconciler.Option{reconciler.WithName(name), reconciler.WithMetrics(w.metrics),
		reconciler.WithRetry(time.Millisecond, 10*time.Millisecond)}
	if w.opts != nil {
		opts = append(opts, w.opts(name)...)
	}
	r, err := reconciler.Register(w.p, w.tbl, (*o55Obj).clone,
		func(x *o55Obj, st status.Status) *o55Obj { x.Set = x.Set.Set(name, st); return x },
		func(x *o55Obj) status.Status { return x.Set.Get(name) },
		o, batch, opts...)
	if err != nil {
		return err
	}
	w.recs[name], w.ops[name] = r, o
	return nil
}

func (w *o55World) start() {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), o55Timeout)
	defer cancel()
	require.NoError(w.t, w.h.Start(o55Log(w.t), ctx))
	w.up = true
}

func (w *o55World) stop() {
	w.t.Helper()
	if !w.up {
		return
	}
	w.up = false
	ctx, cancel := context.WithTimeout(context.Background(), o55Timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.h.Stop(o55Log(w.t), ctx) }()
	select {
	case err := <-done:
		require.NoError(w.t, err, "hive.Stop")
	case <-time.After(o55Timeout + 5*time.Second):
		w.t.Fatal("hive.Stop hangs")
	}
}

// write inserts key=value pairs with a fresh Pending for every name,
// keeping the names already in the set, and returns the table's revision.
func (w *o55World) write(kv ...string) statedb.Revision {
	w.t.Helper()
	txn := w.db.WriteTxn(w.tbl)
	for i := 0; i < len(kv); i += 2 {
		o := &o55Obj{ID: kv[i], Value: kv[i+1], Set: status.NewSet().Pending(w.names...)}
		if old, _, ok := w.tbl.Get(txn, o55ID.Query(kv[i])); ok {
			o.Label, o.Set = old.Label, old.Set.Pending(w.names...)
		}
		_, _, err := w.tbl.Insert(txn, o)
		require.NoError(w.t, err)
	}
	txn.Commit()
	return w.tbl.Revision(w.db.ReadTxn())
}

func (w *o55World) remove(keys ...string) statedb.Revision {
	w.t.Helper()
	txn := w.db.WriteTxn(w.tbl)
	for _, k := range keys {
		_, _, err := w.tbl.Delete(txn, &o55Obj{ID: k})
		require.NoError(w.t, err)
	}
	txn.Commit()
	return w.tbl.Revision(w.db.ReadTxn())
}

func (w *o55World) get(key string) (*o55Obj, statedb.Revision) {
	w.t.Helper()
	o, rev, ok := w.tbl.Get(w.db.ReadTxn(), o55ID.Query(key))
	require.True(w.t, ok, "no object %s", key)
	return o, rev
}

// reconciled waits until name's reconciler reached the table's revision,
// and returns its retry low watermark.
func (w *o55World) reconciled(name string) statedb.Revision {
	w.t.Helper()
	rev := w.tbl.Revision(w.db.ReadTxn())
	ctx, cancel := context.WithTimeout(context.Background(), o55Timeout)
	defer cancel()
	_, low, err := w.recs[name].WaitUntilReconciled(ctx, rev)
	require.NoError(w.t, err, "%s: WaitUntilReconciled(%d)", name, rev)
	return low
}

func (w *o55World) reconciledAll() {
	w.t.Helper()
	for _, n := range slices.Sorted(maps.Keys(w.recs)) {
		w.reconciled(n)
	}
}

// statuses reads name's status of every object.
func (w *o55World) statuses(name string) map[string]status.Status {
	m := map[string]status.Status{}
	for o := range w.tbl.All(w.db.ReadTxn()) {
		m[o.ID] = o.Set.Get(name)
	}
	return m
}

// table returns the table as key → value.
func (w *o55World) table() map[string]string {
	m := map[string]string{}
	for o := range w.tbl.All(w.db.ReadTxn()) {
		m[o.ID] = o.Value
	}
	return m
}

// waitTable waits on the table's watch channel until cond holds.
func (w *o55World) waitTable(what string, cond func(txn statedb.ReadTxn) bool) {
	w.t.Helper()
	deadline := time.NewTimer(o55Timeout)
	defer deadline.Stop()
	for {
		txn := w.db.ReadTxn()
		_, watch := w.tbl.AllWatch(txn)
		if cond(txn) {
			return
		}
		select {
		case <-watch:
		case <-deadline.C:
			w.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func o55Log(t testing.TB) *slog.Logger { return hivetest.Logger(t, hivetest.LogLevel(slog.LevelError)) }

func o55Recv(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(o55Timeout):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func o55Keys(n int, value string) []string {
	var kv []string
	for i := range n {
		kv = append(kv, fmt.Sprintf("k%03d", i), value)
	}
	return kv
}

func o55Ctx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func (w *o55World) setsWait(names ...string) error {
	return w.st.Wait(o55Ctx(w.t, o55Timeout), names)
}

// TestOutsider55RetireKeepsTheOthersIdentitiesAndUnblocksWaits: a and b
// settled 120 objects that also name "gone", which nobody serves; Retire
// runs while a writer rewrites 30 of them. Promise (Table.Retire): "so that
// no object stays Pending for a name nobody serves and a wait over the set
// (status.Set.IsPendingOrRefreshing, reconciler.WaitForReconciliation on an
// index of it, Table.Wait without that name) does not hang", "a write made
// since Retire began is never overwritten", "The other names' statuses are
// left as they are, identities included, so their reconcilers do not redo
// work."
//
// It failed now and then (about 1 run in 60 under load) before a name that
// wrote its status over a changed object waited for the group's write to
// land before reading again: the rewritten object was applied a third time
// with the status identity of its second Update.
func TestOutsider55RetireKeepsTheOthersIdentitiesAndUnblocksWaits(t *testing.T) {
	w := newO55(t, []string{"a", "b"}, o55Config{pending: []string{"a", "b", "gone"}})
	const n = 1200 // more than MaxObjectsPerTxn
	w.write(o55Keys(n, "v1")...)
	w.reconciledAll()
	err := reconciler.WaitForReconciliation(o55Ctx(t, 100*time.Millisecond), w.db, w.tbl, o55SetIndex)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the set waits for gone before Retire")
	before := map[string]map[string]status.Status{"a": w.statuses("a"), "b": w.statuses("b")}

	w.names = []string{"a", "b"}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 30 {
			w.write(fmt.Sprintf("k%03d", i*40), "v2")
		}
	}()
	changed, err := w.st.Retire(o55Ctx(t, o55Timeout), "gone")
	require.NoError(t, err)
	assert.Equal(t, n, changed, "Retire changed every object once")
	o55Recv(t, done, "the writer")
	w.reconciledAll()
	for o := range w.tbl.All(w.db.ReadTxn()) {
		_, named := maps.Collect(o.Set.All())["gone"]
		assert.False(t, named, "%s still names gone", o.ID)
	}
	rewrote := map[string]bool{}
	for i := range 30 {
		rewrote[fmt.Sprintf("k%03d", i*40)] = true
	}
	for name, sts := range before {
		now := w.statuses(name)
		counts := w.ops[name].counts()
		for k, st := range sts {
			rewritten := rewrote[k]
			assert.Equal(t, status.KindDone, now[k].Kind, "%s: %s", name, k)
			if rewritten {
				assert.Equal(t, 2, counts[k], "%s: %s written twice, applied more: %q", name, k, w.ops[name].callsOf(k))
				continue
			}
			assert.Equal(t, st.ID(), now[k].ID(), "%s: %s's status identity changed by Retire", name, k)
			assert.Equal(t, 1, counts[k], "%s applied %s again after Retire", name, k)
		}
	}
	require.NoError(t, reconciler.WaitForReconciliation(o55Ctx(t, o55Timeout), w.db, w.tbl, o55SetIndex), "the wait over the set after Retire")
	require.NoError(t, w.setsWait("a", "b"))
	for k, v := range w.table() {
		if k == "k000" || k == "k040" {
			assert.Equal(t, "v2", v, "the writer's write survives Retire")
		}
	}
}

// TestOutsider55RetiredFollowsALaterWriteWhileAnUpdateIsInFlight: with
// Retired("gone"), a writer writes x naming gone while a's Update of x is
// held; the job removes gone's entry before a writes back. Promise
// (Retired): "an object written later that still names one ... has the
// entry removed in turn"; (Retire) "The other names' statuses are left as
// they are, identities included, so their reconcilers do not redo work";
// (reconciler Guarantees) "If the only change since is another reconciler's
// status (the object's own status identity is unchanged), the result is
// still recorded rather than redone."
func TestOutsider55RetiredFollowsALaterWriteWhileAnUpdateIsInFlight(t *testing.T) {
	w := newO55(t, []string{"a", "b"}, o55Config{pending: []string{"a", "b", "gone"},
		cells: []cell.Cell{sets.Retired[*o55Obj]("gone")}})
	release, entered := w.ops["a"].hold("x")
	t.Cleanup(release)
	w.write("x", "v1")
	o55Recv(t, entered, "a's Update of x")
	w.waitTable("gone removed from x", func(txn statedb.ReadTxn) bool {
		o, _, ok := w.tbl.Get(txn, o55ID.Query("x"))
		_, named := maps.Collect(o.Set.All())["gone"]
		return ok && !named
	})
	release()
	for i := range 10 {
		w.write(o55Keys(50, fmt.Sprintf("v%d", i))[i*10 : i*10+10]...)
	}
	w.reconciledAll()
	w.waitTable("gone removed everywhere", func(txn statedb.ReadTxn) bool {
		for o := range w.tbl.All(txn) {
			if _, named := maps.Collect(o.Set.All())["gone"]; named {
				return false
			}
		}
		return true
	})
	w.reconciledAll()
	require.NoError(t, reconciler.WaitForReconciliation(o55Ctx(t, o55Timeout), w.db, w.tbl, o55SetIndex))
	for _, name := range []string{"a", "b"} {
		for k, c := range w.ops[name].counts() {
			assert.Equal(t, 1, c, "%s applied %s again because gone was removed", name, k)
		}
		for k, st := range w.statuses(name) {
			assert.Equal(t, status.KindDone, st.Kind, "%s: %s", name, k)
		}
	}
}

// TestOutsider55RefreshOfAnErrorDoesNotWaitForItsBackoff: x failed and
// waits a minute for its retry; the target is fixed and a refreshed.
// Promise (Table.Refresh): "a fresh Pending if it was Pending or Error ... a
// version not yet applied, or whose last attempt failed, stays one to
// apply"; a fresh Pending is new work, which (reconciler Guarantees) is
// "taken before retries": Marked.Wait returns Done within seconds.
func TestOutsider55RefreshOfAnErrorDoesNotWaitForItsBackoff(t *testing.T) {
	w := newO55(t, []string{"a"}, o55Config{opts: func(string) []reconciler.Option {
		return []reconciler.Option{reconciler.WithRetry(time.Minute, time.Minute)}
	}})
	w.ops["a"].failing("x", errors.New("not yet"))
	w.write("x", "v1", "y", "v1")
	w.waitTable("x in Error", func(txn statedb.ReadTxn) bool {
		o, _, _ := w.tbl.Get(txn, o55ID.Query("x"))
		return o.Set.Get("a").Kind == status.KindError
	})
	w.ops["a"].failing("x", nil)
	m, err := w.st.Refresh(o55Ctx(t, o55Timeout), "a")
	require.NoError(t, err)
	require.Equal(t, 2, m.Len())
	res, err := m.Wait(o55Ctx(t, 5*time.Second))
	require.NoError(t, err, "the refreshed Error object waited for its minute of backoff")
	assert.Equal(t, sets.Result{Done: 2}, res)
	assert.Equal(t, "v1", w.ops["a"].snapshot()["x"])
}

// TestOutsider55RefreshOfOneNameLeavesAnotherInFlightAlone: b's Update of x
// is held when a is refreshed. Promise (Table.Refresh): "The other names'
// statuses are left as they are, identities included: their reconcilers do
// not redo work": b's held attempt is recorded, b applies x once.
func TestOutsider55RefreshOfOneNameLeavesAnotherInFlightAlone(t *testing.T) {
	w := newO55(t, []string{"a", "b"}, o55Config{opts: func(string) []reconciler.Option {
		return []reconciler.Option{reconciler.WithConcurrency(2)}
	}})
	release, entered := w.ops["b"].hold("x")
	t.Cleanup(release)
	w.write("x", "v1", "y", "v1")
	o55Recv(t, entered, "b's Update of x")
	w.reconciled("a")
	m, err := w.st.Refresh(o55Ctx(t, o55Timeout), "a", o55ID.Query("x"))
	require.NoError(t, err)
	res, err := m.Wait(o55Ctx(t, o55Timeout))
	require.NoError(t, err)
	assert.Equal(t, sets.Result{Done: 1}, res)
	assert.Equal(t, 2, w.ops["a"].count("x"), "a applied x again for the refresh")
	release()
	w.reconciledAll()
	o, _ := w.get("x")
	assert.Equal(t, status.KindDone, o.Set.Get("b").Kind)
	assert.Equal(t, 1, w.ops["b"].count("x"), "b redid x because a was refreshed")
	require.NoError(t, w.setsWait("a", "b"))
}

// TestOutsider55RefreshInSyncUnderADriftCheckCounts: a refresh of objects a
// drift check finds in sync. Promise (docs/control.md): "With a drift check
// an object in sync is written Done without an Update, and counts."
func TestOutsider55RefreshInSyncUnderADriftCheckCounts(t *testing.T) {
	w := newO55(t, []string{"a", "b"}, o55Config{opts: func(name string) []reconciler.Option {
		if name != "a" {
			return nil
		}
		return []reconciler.Option{reconciler.WithDriftCheck(func(context.Context, statedb.ReadTxn, statedb.Revision, *o55Obj) (bool, error) {
			return true, nil
		})}
	}})
	w.write(o55Keys(30, "v1")...)
	w.reconciledAll()
	m, err := w.st.Refresh(o55Ctx(t, o55Timeout), "a")
	require.NoError(t, err)
	res, err := m.Wait(o55Ctx(t, o55Timeout))
	require.NoError(t, err)
	assert.Equal(t, sets.Result{Done: 30}, res)
	for _, name := range []string{"a", "b"} {
		for k, c := range w.ops[name].counts() {
			assert.Equal(t, 1, c, "%s: %s updated although in sync", name, k)
		}
	}
}

// TestOutsider55RefreshWaitUnderChurnWithBatchesAndWorkers: a refresh of
// 300 objects served by batches on workers, a failing one in ten
// terminally, while a writer changes 50 and deletes 50 (before Wait). Promise
// (Marked.Wait and Result): "An object counts once its status for name is
// read Done ... or Error ... One deleted before an attempt was seen counts
// in Result.Deleted. One the user changed since the mark ... is waited for
// until that version is attempted"; "once a Wait returns nil, Done +
// len(Failed) + Deleted equals" Marked.Len.
func TestOutsider55RefreshWaitUnderChurnWithBatchesAndWorkers(t *testing.T) {
	w := newO55(t, []string{"a", "b"}, o55Config{batch: true, opts: func(string) []reconciler.Option {
		return []reconciler.Option{reconciler.WithConcurrency(4), reconciler.WithRoundLimits(32, nil)}
	}})
	const n = 300
	w.write(o55Keys(n, "v1")...)
	w.reconciledAll()
	failing := map[string]bool{}
	for i := 3; i < n; i += 10 {
		k := fmt.Sprintf("k%03d", i)
		failing[k] = true
		w.ops["a"].failing(k, reconciler.TerminalError(errors.New("refused "+k)))
	}
	m, err := w.st.Refresh(o55Ctx(t, o55Timeout), "a")
	require.NoError(t, err)
	require.Equal(t, n, m.Len())
	// The writer changes and deletes while the reconcilers work on the
	// marks, all before Wait is called: a change made after Wait has
	// seen its object's refresh attempt is not waited for ("Outcomes
	// seen are kept"), so only these are checked.
	for i := range 50 {
		w.write(fmt.Sprintf("k%03d", i), "v2")
		w.remove(fmt.Sprintf("k%03d", 250+i))
	}
	res, err := m.Wait(o55Ctx(t, o55Timeout))
	require.NoError(t, err)
	assert.Equal(t, n, res.Done+len(res.Failed)+res.Deleted, "%+v", res)
	assert.LessOrEqual(t, res.Deleted, 50)
	got := map[string]bool{}
	for _, f := range res.Failed {
		got[f.Key] = true
		assert.True(t, failing[f.Key], "%s failed although it does not fail", f.Key)
		assert.Equal(t, "a", f.Name)
		assert.Equal(t, status.KindError, f.Status.Kind)
		assert.Contains(t, f.Status.Error, "refused "+f.Key)
	}
	for k := range failing {
		if k < "k250" {
			assert.True(t, got[k], "%s failed but is not in Result.Failed", k)
		}
	}
	assert.True(t, slices.IsSortedFunc(res.Failed, func(a, b sets.ObjectStatus) int { return strings.Compare(a.Key, b.Key) }), "Failed in key order")
	require.ErrorIs(t, res.Err(), reconciler.ErrObjectFailed)
	// The changed objects were waited for in their new version.
	for i := range 50 {
		k := fmt.Sprintf("k%03d", i)
		if !failing[k] {
			assert.Equal(t, "v2", w.ops["a"].snapshot()[k], "%s: Wait returned before its new version was applied", k)
		}
	}
}

// TestOutsider55RefreshWaitsForTheNewestVersionOfAnObjectChangedInFlight:
// the refresh's attempt of x is held; the user writes x v2. Promise
// (Marked.Wait): "One the user changed since the mark, with a new status
// for name, is waited for until that version is attempted: the attempt of a
// newer version counts as the refresh's"; and (control.md) "An object the
// user changes after the mark is waited for until its new version is
// attempted": when Wait returns, a's target holds v2.
func TestOutsider55RefreshWaitsForTheNewestVersionOfAnObjectChangedInFlight(t *testing.T) {
	w := newO55(t, []string{"a", "b"}, o55Config{})
	w.write("x", "v1", "y", "v1")
	w.reconciledAll()
	release, entered := w.ops["a"].hold("x")
	t.Cleanup(release)
	m, err := w.st.Refresh(o55Ctx(t, o55Timeout), "a")
	require.NoError(t, err)
	o55Recv(t, entered, "the refresh's attempt of x")
	w.write("x", "v2")
	type out struct {
		res sets.Result
		err error
	}
	got := make(chan out, 1)
	go func() { r, err := m.Wait(o55Ctx(t, o55Timeout)); got <- out{r, err} }()
	release()
	var r out
	select {
	case r = <-got:
	case <-time.After(o55Timeout + 5*time.Second):
		t.Fatal("Marked.Wait hangs")
	}
	require.NoError(t, r.err)
	assert.Equal(t, sets.Result{Done: 2}, r.res)
	assert.Equal(t, "v2", w.ops["a"].snapshot()["x"], "Wait returned before x's newest version was applied")
}

// TestOutsider55RefreshCountsAnObjectDeletedDuringItsAttempt: the
// refresh's attempt of x is under way when x is deleted. Promise
// (Marked.Wait): "One deleted before an attempt was seen counts in
// Result.Deleted"; "once a Wait returns nil, Done + len(Failed) + Deleted
// equals" Len.
func TestOutsider55RefreshCountsAnObjectDeletedDuringItsAttempt(t *testing.T) {
	w := newO55(t, []string{"a", "b"}, o55Config{})
	w.write("x", "v1", "y", "v1")
	w.reconciledAll()
	release, entered := w.ops["a"].hold("x")
	t.Cleanup(release)
	m, err := w.st.Refresh(o55Ctx(t, o55Timeout), "a")
	require.NoError(t, err)
	o55Recv(t, entered, "the refresh's attempt of x")
	w.remove("x")
	release()
	res, err := m.Wait(o55Ctx(t, o55Timeout))
	require.NoError(t, err)
	assert.Equal(t, sets.Result{Done: 1, Deleted: 1}, res)
}

// TestOutsider55RefreshReturnsFailuresWithoutWaitingForRetries: a is
// refreshed with x failing (retryable, its retry a minute away) and z
// failing terminally. Promise (Marked.Wait): "An object counts once its
// status for name is read Done (in Result.Done) or Error, retryable or
// terminal (in Result.Failed, with the status and its error text): no retry
// is waited for"; (Result.Err) "an error wrapping reconciler.ErrObjectFailed
// that lists the first ten that did, with their error".
func TestOutsider55RefreshReturnsFailuresWithoutWaitingForRetries(t *testing.T) {
	w := newO55(t, []string{"a", "b"}, o55Config{opts: func(string) []reconciler.Option {
		return []reconciler.Option{reconciler.WithRetry(time.Minute, time.Minute)}
	}})
	w.write("x", "v1", "y", "v1", "z", "v1")
	w.reconciledAll()
	w.ops["a"].failing("x", errors.New("x is down"))
	w.ops["a"].failing("z", reconciler.TerminalError(errors.New("z is refused")))
	m, err := w.st.Refresh(o55Ctx(t, o55Timeout), "a")
	require.NoError(t, err)
	res, err := m.Wait(o55Ctx(t, 5*time.Second))
	require.NoError(t, err)
	assert.Equal(t, 1, res.Done)
	require.Len(t, res.Failed, 2)
	assert.Equal(t, "x", res.Failed[0].Key)
	assert.Equal(t, "z", res.Failed[1].Key)
	assert.Contains(t, res.Failed[0].Status.Error, "x is down")
	assert.False(t, res.Failed[0].Status.Terminal)
	assert.True(t, res.Failed[1].Status.Terminal)
	e := res.Err()
	require.ErrorIs(t, e, reconciler.ErrObjectFailed)
	assert.Contains(t, e.Error(), "x is down")
	assert.Contains(t, e.Error(), "z is refused")
	assert.Equal(t, 1, w.ops["b"].count("x"), "b redid x")
}

// TestOutsider55WaitNotSettledListsTheFirstTenInKeyOrder: 15 objects wait
// for b, which has no reconciler; a settled them. Promise (Table.Wait):
// "When ctx ends first, it returns an error wrapping ctx's error and
// ErrNotSettled that lists the first ten objects not settled (in key order)
// with the status of each name that holds them up, and counts the rest."
func TestOutsider55WaitNotSettledListsTheFirstTenInKeyOrder(t *testing.T) {
	w := newO55(t, []string{"a"}, o55Config{pending: []string{"a", "b"}})
	// Written in reverse key order, in separate transactions.
	for i := 14; i >= 0; i-- {
		w.write(fmt.Sprintf("k%03d", i), "v1")
	}
	w.reconciled("a")
	err := w.st.Wait(o55Ctx(t, 200*time.Millisecond), []string{"a", "b"})
	require.ErrorIs(t, err, sets.ErrNotSettled)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	msg := err.Error()
	last := -1
	for i := range 10 {
		k := fmt.Sprintf("k%03d", i)
		at := strings.Index(msg, k)
		require.GreaterOrEqual(t, at, 0, "%s not listed: %s", k, msg)
		assert.Greater(t, at, last, "%s out of key order: %s", k, msg)
		last = at
	}
	for i := 10; i < 15; i++ {
		assert.NotContains(t, msg, fmt.Sprintf("k%03d", i), "more than ten listed")
	}
	assert.Contains(t, msg, "5", "the rest counted: %s", msg)
	assert.Contains(t, msg, "b: Pending", "b holds them up: %s", msg)
	assert.NotContains(t, msg, "a: ", "a, settled, listed as holding them up: %s", msg)
}

// TestOutsider55WaitForANameThatJoinsLater: Table.Wait for a and "late"
// begins before late's reconciler is registered (once the hive runs).
// Promise (Table.Wait): "a name that joins is waited for until its
// reconciler has reconciled every object"; "It returns nil if every status
// is Done".
func TestOutsider55WaitForANameThatJoinsLater(t *testing.T) {
	w := newO55(t, []string{"a"}, o55Config{})
	w.write(o55Keys(40, "v1")...)
	w.reconciled("a")
	got := make(chan error, 1)
	go func() { got <- w.st.Wait(o55Ctx(t, o55Timeout), []string{"a", "late"}) }()
	select {
	case err := <-got:
		t.Fatalf("Wait returned before late existed: %v", err)
	case <-time.After(50 * time.Millisecond): // a window for a wrong early return, not a synchronisation
	}
	require.NoError(t, w.register("late"))
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(o55Timeout + 5*time.Second):
		t.Fatal("Table.Wait hangs")
	}
	for k, st := range w.statuses("late") {
		assert.Equal(t, status.KindDone, st.Kind, "late: %s when Wait returned", k)
	}
	assert.Len(t, w.ops["late"].snapshot(), 40)
}

// TestOutsider55CtxEndsWhileAWriterHoldsTheTable: a writer holds a write
// transaction on the table (a long restore, say) when Table.Wait,
// Marked.Wait, Refresh and Retire are called with a short ctx. Promise
// (Table.Wait): "When ctx ends first, it returns an error wrapping ctx's
// error and ErrNotSettled"; (Marked.Wait) "When ctx ends first it returns
// the result so far and an error wrapping both ctx's error and
// ErrNotSettled"; (Refresh, Retire) "It stops when ctx ends, returning what
// it marked so far ... and ctx's error". Each must return within a few
// seconds of its ctx, not when the writer lets go.
func TestOutsider55CtxEndsWhileAWriterHoldsTheTable(t *testing.T) {
	w := newO55(t, []string{"a"}, o55Config{pending: []string{"a", "b"}})
	w.write(o55Keys(5, "v1")...)
	w.reconciled("a")
	m, err := w.st.Refresh(o55Ctx(t, o55Timeout), "b")
	require.NoError(t, err)
	calls := map[string]func(ctx context.Context) error{
		"Table.Wait":  func(ctx context.Context) error { return w.st.Wait(ctx, []string{"a", "b"}) },
		"Marked.Wait": func(ctx context.Context) error { _, err := m.Wait(ctx); return err },
		"Refresh":     func(ctx context.Context) error { _, err := w.st.Refresh(ctx, "a"); return err },
		"Retire":      func(ctx context.Context) error { _, err := w.st.Retire(ctx, "b"); return err },
	}
	for _, name := range slices.Sorted(maps.Keys(calls)) {
		t.Run(name, func(t *testing.T) {
			held := w.db.WriteTxn(w.tbl)
			got := make(chan error, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			go func() { got <- calls[name](ctx) }()
			select {
			case err := <-got:
				held.Abort()
				require.ErrorIs(t, err, context.DeadlineExceeded)
			case <-time.After(3 * time.Second):
				held.Abort() // let it go, so that no goroutine is left
				err := <-got
				t.Errorf("%s returned only once the writer let go of the table, 3s after its ctx ended (then: %v)", name, err)
			}
		})
	}
}

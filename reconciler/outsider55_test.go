package reconciler_test

// An outsider's attacks (session 55) on the documented guarantees of
// several reconcilers on one status.Set (package doc, "Several reconcilers
// of one table"; docs/control.md, "Several reconcilers on one
// status.Set"), designed from the promises alone. Each test names the
// promise it tries to break.

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"os"
	"runtime/pprof"
	"slices"
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
	"github.com/converge-go/converge/status"
)

// o55Timeout bounds every wait: a hang fails with a message.
const o55Timeout = 20 * time.Second

// o55Names are the names the table has a status index for.
var o55Names = []string{"a", "b", "c", "late"}

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
	recheck map[string]time.Duration // key → RecheckAfter asked once by its next Update
	calls   map[string][]string      // key → each Update's revision and own status, for messages
	// enteredKeys, if set, is sent the key of every held Update as it begins.
	enteredKeys chan string
}

func newO55Ops(name string) *o55Ops {
	return &o55Ops{name: name, changed: make(chan struct{}), target: map[string]string{},
		updates: map[string]int{}, fail: map[string]error{}, gates: map[string]chan struct{}{}, entered: map[string]chan struct{}{},
		recheck: map[string]time.Duration{}, calls: map[string][]string{}}
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
	keys := o.enteredKeys
	o.mu.Unlock()
	if e != nil {
		close(e)
		if keys != nil {
			keys <- obj.ID
		}
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
	if d, ok := o.recheck[obj.ID]; ok {
		delete(o.recheck, obj.ID)
		reconciler.RecheckAfter(ctx, d)
	}
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

// await waits until cond holds of the ops (read under its lock).
func (o *o55Ops) await(t *testing.T, what string, cond func(o *o55Ops) bool) {
	t.Helper()
	deadline := time.NewTimer(o55Timeout)
	defer deadline.Stop()
	for {
		o.mu.Lock()
		ok, ch := cond(o), o.changed
		o.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("%s: timed out waiting for %s", o.name, what)
		}
	}
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

func (m *o55Metrics) get(name string) (ops, errs int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ops[name], m.errors[name]
}

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
}

type o55Config struct {
	batch bool
	opts  func(name string) []reconciler.Option
	// db and tbl, if set, make the hive serve a table of another hive.
	db  *statedb.DB
	tbl statedb.RWTable[*o55Obj]
	// pending are the names the writer stamps; names if nil.
	pending []string
	// before, if set, runs in the Invoke before the reconcilers register.
	before func(db *statedb.DB) error
}

func newO55(t *testing.T, names []string, cfg o55Config) *o55World {
	w := &o55World{t: t, metrics: &o55Metrics{errors: map[string]int{}, ops: map[string]int{}},
		recs: map[string]reconciler.Reconciler[*o55Obj]{}, ops: map[string]*o55Ops{},
		names: names, batch: cfg.batch, opts: cfg.opts}
	if cfg.pending != nil {
		w.names = cfg.pending
	}
	cells := []cell.Cell{job.Cell, cell.Provide(cell.NewSimpleHealth)}
	if cfg.db == nil {
		cells = append(cells, statedb.Cell)
	} else {
		cells = append(cells, cell.Provide(func() *statedb.DB { return cfg.db }))
	}
	cells = append(cells, cell.Module("o55", "outsider 55",
		cell.Provide(job.Registry.NewGroup),
		cell.Invoke(func(p reconciler.Params, h *cell.SimpleHealth) error {
			w.db, w.p, w.health = p.DB, p, h
			if cfg.tbl != nil {
				w.tbl = cfg.tbl
			} else {
				var err error
				if w.tbl, err = o55NewTable(p.DB); err != nil {
					return err
				}
			}
			if cfg.before != nil {
				if err := cfg.before(p.DB); err != nil {
					return err
				}
			}
			for _, n := range names {
				if err := w.register(n); err != nil {
					return err
				}
			}
			return nil
		})))
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

// healthOf waits until the reconcile job of name reports level, and
// returns its message.
func (w *o55World) healthOf(name string, level cell.Level) string {
	w.t.Helper()
	var msg string
	// SimpleHealth offers nothing to wait on: it is polled, as the
	// fixture's waitHealth does.
	require.EventuallyWithT(w.t, func(c *assert.CollectT) {
		child := w.health.GetChild("job-reconcile-" + name)
		if !assert.NotNil(c, child, "no health of %s", name) {
			return
		}
		child.Lock()
		lvl := child.Level
		if msg = child.Status; child.Error != nil {
			msg += ": " + child.Error.Error()
		}
		child.Unlock()
		assert.Equal(c, level, lvl, "%s: health %q", name, msg)
	}, o55Timeout, time.Millisecond)
	return msg
}

func o55Log(t testing.TB) *slog.Logger { return hivetest.Logger(t, hivetest.LogLevel(slog.LevelError)) }

func o55Recv(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(o55Timeout):
		t.Fatalf("timed out waiting for %s (goroutines: %s)", what, o55Dump())
	}
}

// o55Dump writes every goroutine's stack to a file, for diagnosing a hang,
// and returns its name.
func o55Dump() string {
	f, err := os.CreateTemp("", "o55-goroutines-*.txt")
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	_ = pprof.Lookup("goroutine").WriteTo(f, 2)
	return f.Name()
}

func o55Keys(n int, value string) []string {
	var kv []string
	for i := range n {
		kv = append(kv, fmt.Sprintf("k%03d", i), value)
	}
	return kv
}

// TestOutsider55AlwaysFailingPeerLeavesTheOthersAlone: c fails every Update
// and retries every few milliseconds, writing Error over and over beside a
// and b, which settled once. Promise (reconciler/doc.go, "Several
// reconcilers of one table"): statuses are written "with each reconciler's
// own setStatus", "Each reconciler's metrics, health and waits are its own";
// and "If the only change since is another reconciler's status (the
// object's own status identity is unchanged), the result is still recorded
// rather than redone" (Guarantees).
func TestOutsider55AlwaysFailingPeerLeavesTheOthersAlone(t *testing.T) {
	w := newO55(t, []string{"a", "b", "c"}, o55Config{})
	w.ops["c"].failing("*", errors.New("c's target is down"))
	const n = 40
	w.write(o55Keys(n, "v1")...)
	w.reconciled("a")
	w.reconciled("b")
	first := map[string]map[string]status.Status{"a": w.statuses("a"), "b": w.statuses("b")}
	for _, name := range []string{"a", "b"} {
		for k, st := range first[name] {
			require.Equal(t, status.KindDone, st.Kind, "%s: %s", name, k)
		}
	}
	// Let c fail every object at least five times.
	w.ops["c"].await(t, "five failures of every object", func(o *o55Ops) bool {
		if len(o.updates) < n {
			return false
		}
		for _, c := range o.updates {
			if c < 5 {
				return false
			}
		}
		return true
	})
	low := w.reconciled("c")
	assert.NotZero(t, low, "c: a retry low watermark while every object fails")
	assert.Zero(t, w.reconciled("a"), "a: no retry low watermark")
	for _, name := range []string{"a", "b"} {
		now := w.statuses(name)
		for k, st := range first[name] {
			assert.Equal(t, st.ID(), now[k].ID(), "%s: %s's Done status rewritten while c failed", name, k)
			assert.Equal(t, status.KindDone, now[k].Kind, "%s: %s", name, k)
		}
		for k, c := range w.ops[name].counts() {
			assert.Equal(t, 1, c, "%s: %s applied again while c failed", name, k)
		}
		assert.Len(t, w.ops[name].snapshot(), n, "%s: target", name)
	}
	for k, st := range w.statuses("c") {
		assert.Equal(t, status.KindError, st.Kind, "c: %s", k)
	}
	w.healthOf("c", cell.StatusDegraded)
	w.healthOf("a", cell.StatusOK)
	w.healthOf("b", cell.StatusOK)
	for _, name := range []string{"a", "b"} {
		_, errs := w.metrics.get(name)
		assert.Zero(t, errs, "%s: errors counted in its metrics", name)
	}
	_, errs := w.metrics.get("c")
	assert.GreaterOrEqual(t, errs, n, "c: its failures in its metrics (reported after each round: the last may lag)")

	// c recovers: it settles everything, a and b still do not redo.
	w.ops["c"].failing("*", nil)
	w.waitTable("c Done everywhere", func(txn statedb.ReadTxn) bool {
		for o := range w.tbl.All(txn) {
			if o.Set.Get("c").Kind != status.KindDone {
				return false
			}
		}
		return true
	})
	assert.Zero(t, w.reconciled("c"), "c: no retry low watermark once recovered")
	for k, c := range w.ops["a"].counts() {
		assert.Equal(t, 1, c, "a: %s", k)
	}
	w.healthOf("c", cell.StatusOK)
}

// TestOutsider55UserWriteBetweenUpdateAndWriteBack: while a's Update of x
// is held, the user writes x again, changing a field of its own (Label)
// and keeping the statuses as it read them, with Insert or with
// CompareAndSwap (retried when a status write came first). Promise
// (Guarantees): "A status is written with compare-and-swap: it never
// overwrites a newer version of the object. If the only change since is
// another reconciler's status (the object's own status identity is
// unchanged), the result is still recorded rather than redone"; and
// "Several reconcilers of one table": "Each object is compare-and-swapped as
// it would be alone ... if it changed since, each reconciler writes its
// status as it does alone". The user's Label must survive every status
// write, and each name ends Done.
func TestOutsider55UserWriteBetweenUpdateAndWriteBack(t *testing.T) {
	for _, cas := range []bool{false, true} {
		t.Run(fmt.Sprintf("cas=%v", cas), func(t *testing.T) {
			w := newO55(t, []string{"a", "b", "c"}, o55Config{opts: func(string) []reconciler.Option {
				return []reconciler.Option{reconciler.WithConcurrency(4)}
			}})
			const n = 20
			releases := map[string]func(){}
			w.ops["a"].mu.Lock()
			w.ops["a"].enteredKeys = make(chan string, n)
			w.ops["a"].mu.Unlock()
			for i := range n {
				key := fmt.Sprintf("k%03d", i)
				releases[key], _ = w.ops["a"].hold(key)
			}
			t.Cleanup(func() {
				for _, r := range releases {
					r()
				}
			})
			w.write(o55Keys(n, "v1")...)
			// Four workers: up to four of a's Updates are held at once,
			// taken in an order the workers choose.
			for range n {
				var key string
				select {
				case key = <-w.ops["a"].enteredKeys:
				case <-time.After(o55Timeout):
					t.Fatalf("timed out waiting for a's next held Update (goroutines: %s)", o55Dump())
				}
				// The user's write, statuses kept as read.
				// Without CompareAndSwap it reads in the write
				// transaction: a read before it could put back a status
				// written since, which is the user's own undoing.
				for {
					o, rev := w.get(key)
					txn := w.db.WriteTxn(w.tbl)
					if !cas {
						o, _, _ = w.tbl.Get(txn, o55ID.Query(key))
					}
					u := o.clone()
					u.Label = "user-" + key
					var err error
					if cas {
						_, _, err = w.tbl.CompareAndSwap(txn, rev, u)
					} else {
						_, _, err = w.tbl.Insert(txn, u)
					}
					if errors.Is(err, statedb.ErrRevisionNotEqual) {
						txn.Abort()
						continue
					}
					require.NoError(t, err)
					txn.Commit()
					break
				}
				releases[key]()
			}
			w.reconciledAll()
			for o := range w.tbl.All(w.db.ReadTxn()) {
				assert.Equal(t, "user-"+o.ID, o.Label, "%s: the user's write was overwritten by a status write", o.ID)
				for _, name := range []string{"a", "b", "c"} {
					assert.Equal(t, status.KindDone, o.Set.Get(name).Kind, "%s: %s", o.ID, name)
				}
			}
			for _, name := range []string{"b", "c"} {
				for k, c := range w.ops[name].counts() {
					assert.Equal(t, 1, c, "%s applied %s again: only a's held Update overlapped the user's write", name, k)
				}
			}
			for _, name := range []string{"a", "b", "c"} {
				assert.Equal(t, w.table(), w.ops[name].snapshot(), "%s: target", name)
			}
		})
	}
}

// TestOutsider55AnotherNamesFreshPendingWhileInFlight: while a's Update of
// x is held, the user asks b (only) for work again: a fresh Pending for b,
// a's status untouched. Promise (Guarantees): "If the only change since is
// another reconciler's status (the object's own status identity is
// unchanged), the result is still recorded rather than redone": a applies
// x once, b twice.
func TestOutsider55AnotherNamesFreshPendingWhileInFlight(t *testing.T) {
	w := newO55(t, []string{"a", "b"}, o55Config{})
	release, entered := w.ops["a"].hold("x")
	t.Cleanup(release)
	w.write("x", "v1")
	o55Recv(t, entered, "a's Update of x")
	w.ops["b"].await(t, "b's first Update", func(o *o55Ops) bool { return o.updates["x"] == 1 })
	w.waitTable("b Done on x", func(txn statedb.ReadTxn) bool {
		o, _, _ := w.tbl.Get(txn, o55ID.Query("x"))
		return o.Set.Get("b").Kind == status.KindDone
	})
	txn := w.db.WriteTxn(w.tbl)
	o, _, _ := w.tbl.Get(txn, o55ID.Query("x"))
	o = o.clone()
	o.Set = o.Set.Set("b", status.Pending())
	_, _, err := w.tbl.Insert(txn, o)
	require.NoError(t, err)
	txn.Commit()
	w.ops["b"].await(t, "b's second Update", func(o *o55Ops) bool { return o.updates["x"] == 2 })
	release()
	w.reconciledAll()
	o, _ = w.get("x")
	assert.Equal(t, status.KindDone, o.Set.Get("a").Kind)
	assert.Equal(t, status.KindDone, o.Set.Get("b").Kind)
	assert.Equal(t, 1, w.ops["a"].count("x"), "a redid x although only b's status changed")
	assert.Equal(t, 2, w.ops["b"].count("x"))
}

// TestOutsider55DeleteAndPutBackWhileInFlight: a's Update of x is held;
// b settled x. The user deletes x and puts the very object back (statuses,
// identities included). Promise (Guarantees): "Once the table is quiet, the
// target holds the latest version of every object ... a delete followed by
// the very object again included (after a delete, an object with the same
// status identity is new work)". Each target must hold x, each status Done.
func TestOutsider55DeleteAndPutBackWhileInFlight(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			w := newO55(t, []string{"a", "b"}, o55Config{batch: batch, opts: func(string) []reconciler.Option {
				return []reconciler.Option{reconciler.WithConcurrency(3)}
			}})
			release, entered := w.ops["a"].hold("x")
			t.Cleanup(release)
			w.write("x", "v1", "y", "v1")
			o55Recv(t, entered, "a's Update of x")
			w.ops["b"].await(t, "b applied x", func(o *o55Ops) bool { return o.target["x"] == "v1" })
			w.waitTable("b Done on x", func(txn statedb.ReadTxn) bool {
				o, _, _ := w.tbl.Get(txn, o55ID.Query("x"))
				return o.Set.Get("b").Kind == status.KindDone
			})
			saved, _ := w.get("x")
			w.remove("x")
			w.ops["b"].await(t, "b deleted x", func(o *o55Ops) bool { _, ok := o.target["x"]; return !ok })
			txn := w.db.WriteTxn(w.tbl)
			_, _, err := w.tbl.Insert(txn, saved)
			require.NoError(t, err)
			txn.Commit()
			release()
			w.reconciledAll()
			o, _ := w.get("x")
			for _, name := range []string{"a", "b"} {
				assert.Equal(t, status.KindDone, o.Set.Get(name).Kind, "%s: x", name)
				assert.Equal(t, map[string]string{"x": "v1", "y": "v1"}, w.ops[name].snapshot(), "%s: target", name)
			}
		})
	}
}

// TestOutsider55StopOneHiveWhileOthersWrite: reconcilers a and b run in one
// hive, c in another hive on the same database and table. c's hive stops
// while a and b go on, and starts again. Promise (doc.go, "Several
// reconcilers of one table"): "a slow operation of one costs the others one
// wait of 10 ms at most" and "A reconciler alone on its table writes by
// itself"; (Guarantees) "Stopping the hive and starting it again resumes
// where it stopped: ... changes made meanwhile, deletes included,
// converge."
func TestOutsider55StopOneHiveWhileOthersWrite(t *testing.T) {
	w := newO55(t, []string{"a", "b"}, o55Config{pending: []string{"a", "b", "c"}})
	wc := newO55(t, []string{"c"}, o55Config{db: w.db, tbl: w.tbl, pending: []string{"a", "b", "c"}})
	w.write(o55Keys(50, "v1")...)
	w.reconciledAll()
	wc.reconciledAll()

	// Stop c while a and b are writing.
	stopped := make(chan struct{})
	go func() { defer close(stopped); wc.stop() }()
	for i := range 30 {
		w.write(fmt.Sprintf("k%03d", i), "v2")
	}
	o55Recv(t, stopped, "c's hive to stop")
	for i := range 30 {
		w.write(fmt.Sprintf("k%03d", 30+i), "v3")
	}
	w.remove("k040", "k041")
	w.reconciledAll() // a and b must not wait for c, gone
	for _, name := range []string{"a", "b"} {
		assert.Equal(t, w.table(), w.ops[name].snapshot(), "%s: target while c is stopped", name)
		for k, st := range w.statuses(name) {
			assert.Equal(t, status.KindDone, st.Kind, "%s: %s", name, k)
		}
	}
	for k, st := range w.statuses("c") {
		if k >= "k030" && st.Kind == status.KindDone {
			t.Errorf("c: %s Done although c was stopped before its version", k)
			break
		}
	}

	// c comes back and writes beside a and b again.
	wc.start()
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		for i := range 20 {
			w.write(fmt.Sprintf("k%03d", i), "v4")
		}
	}()
	wc.reconciled("c")
	o55Recv(t, wrote, "the writer")
	w.waitTable("every name Done", func(txn statedb.ReadTxn) bool {
		for o := range w.tbl.All(txn) {
			if !o.Set.IsDone() {
				return false
			}
		}
		return true
	})
	w.reconciledAll()
	wc.reconciledAll()
	for _, name := range []string{"a", "b"} {
		assert.Equal(t, w.table(), w.ops[name].snapshot(), "%s: target", name)
	}
	assert.Equal(t, w.table(), wc.ops["c"].snapshot(), "c: target after its restart")
}

// TestOutsider55PruneDuringWritesAndWaitsAfter: prunes asked for over and
// over while a writer inserts and deletes; then, on the quiet table, one
// more prune per reconciler and every wait. Promise (Reconciler.Prune):
// "asks for a prune as soon as possible ... It never blocks"; (WithPruning)
// "it never removes what an operation is applying for a newer object";
// (Guarantees) "Once the table is quiet, the target holds the latest
// version of every object and nothing of deleted ones"; WaitUntilReconciled
// and WaitForReconciliation (per name, and over the set) return on a quiet
// table after prunes.
func TestOutsider55PruneDuringWritesAndWaitsAfter(t *testing.T) {
	w := newO55(t, []string{"a", "b", "c"}, o55Config{opts: func(name string) []reconciler.Option {
		if name == "b" {
			return []reconciler.Option{reconciler.WithPruning(0), reconciler.WithConcurrency(4)}
		}
		return []reconciler.Option{reconciler.WithPruning(0)}
	}})
	for i := range 300 {
		w.write(fmt.Sprintf("k%03d", i%60), fmt.Sprintf("v%d", i))
		if i%7 == 0 {
			w.remove(fmt.Sprintf("k%03d", (i+13)%60))
		}
		for _, r := range w.recs {
			r.Prune()
		}
	}
	w.reconciledAll()
	before := map[string]int{}
	for name, o := range w.ops {
		o.mu.Lock()
		before[name] = o.prunes
		o.mu.Unlock()
		w.recs[name].Prune()
	}
	for name, o := range w.ops {
		o.await(t, "a prune on the quiet table", func(o *o55Ops) bool { return o.prunes > before[name] })
	}
	w.reconciledAll()
	ctx, cancel := context.WithTimeout(context.Background(), o55Timeout)
	defer cancel()
	for _, name := range []string{"a", "b", "c"} {
		require.NoError(t, reconciler.WaitForReconciliation(ctx, w.db, w.tbl, o55NameIndex[name]), "%s: WaitForReconciliation", name)
		assert.Equal(t, w.table(), w.ops[name].snapshot(), "%s: target", name)
		for k, st := range w.statuses(name) {
			assert.Equal(t, status.KindDone, st.Kind, "%s: %s", name, k)
		}
	}
	require.NoError(t, reconciler.WaitForReconciliation(ctx, w.db, w.tbl, o55SetIndex), "WaitForReconciliation over the set")
}

// TestOutsider55JoinWhileOthersWrite registers "late" once the hive has
// started, while a writer keeps writing objects for a and b only. Promise
// (docs/control.md): a name that joins needs "nothing: its reconciler reads
// a missing entry as Pending (status.Set.Get) and reconciles every object
// already in the table"; (Lifecycle) "Register may be called ... once the
// hive has started; its jobs then start at once".
func TestOutsider55JoinWhileOthersWrite(t *testing.T) {
	w := newO55(t, []string{"a", "b"}, o55Config{batch: true, opts: func(string) []reconciler.Option {
		return []reconciler.Option{reconciler.WithConcurrency(2), reconciler.WithRoundLimits(16, nil)}
	}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			w.write(fmt.Sprintf("k%03d", i%120), fmt.Sprintf("v%d", i))
		}
	}()
	w.write(o55Keys(100, "v0")...)
	require.NoError(t, w.register("late"))
	o55Recv(t, done, "the writer")
	w.reconciledAll()
	ctx, cancel := context.WithTimeout(context.Background(), o55Timeout)
	defer cancel()
	require.NoError(t, reconciler.WaitForReconciliation(ctx, w.db, w.tbl, o55NameIndex["late"]))
	for _, name := range []string{"a", "b", "late"} {
		assert.Equal(t, w.table(), w.ops[name].snapshot(), "%s: target", name)
		for k, st := range w.statuses(name) {
			assert.Equal(t, status.KindDone, st.Kind, "%s: %s", name, k)
		}
	}
}

// TestOutsider55BatchWorkersEachNamesFailuresItsOwn: batch operations on
// workers; a fails k001 (retryable), b fails k002 (retryable), c fails
// k003 terminally. Promise (doc.go): "Each reconciler's metrics, health and
// waits are its own"; statuses "with each reconciler's own setStatus": a
// failing name never disturbs another's Done, nor makes it apply again.
func TestOutsider55BatchWorkersEachNamesFailuresItsOwn(t *testing.T) {
	w := newO55(t, []string{"a", "b", "c"}, o55Config{batch: true, opts: func(string) []reconciler.Option {
		return []reconciler.Option{reconciler.WithConcurrency(3), reconciler.WithRoundLimits(8, nil)}
	}})
	w.ops["a"].failing("k001", errors.New("a: no"))
	w.ops["b"].failing("k002", errors.New("b: no"))
	w.ops["c"].failing("k003", reconciler.TerminalError(errors.New("c: never")))
	const n = 60
	w.write(o55Keys(n, "v1")...)
	for _, name := range []string{"a", "b"} {
		key := map[string]string{"a": "k001", "b": "k002"}[name]
		w.ops[name].await(t, "ten failures", func(o *o55Ops) bool { return o.updates[key] >= 10 })
	}
	w.reconciled("c")
	want := map[string]string{"a": "k001", "b": "k002", "c": "k003"}
	for name, bad := range want {
		for k, st := range w.statuses(name) {
			if k == bad {
				assert.Equal(t, status.KindError, st.Kind, "%s: %s", name, k)
				continue
			}
			assert.Equal(t, status.KindDone, st.Kind, "%s: %s", name, k)
		}
		for k, c := range w.ops[name].counts() {
			if k != bad {
				assert.Equal(t, 1, c, "%s applied %s again while another name failed it: %q", name, k, w.ops[name].callsOf(k))
			}
		}
	}
	assert.Equal(t, 1, w.ops["c"].count("k003"), "c: a terminal error is not retried")
	assert.Contains(t, w.healthOf("a", cell.StatusDegraded), "k001")
	assert.NotContains(t, w.healthOf("a", cell.StatusDegraded), "k002")
	assert.Contains(t, w.healthOf("b", cell.StatusDegraded), "k002")
	w.healthOf("c", cell.StatusOK) // terminal errors are settled
	assert.NotZero(t, w.reconciled("a"))
	assert.Zero(t, w.reconciled("c"))
	w.ops["a"].failing("k001", nil)
	w.ops["b"].failing("k002", nil)
	w.healthOf("a", cell.StatusOK)
	w.healthOf("b", cell.StatusOK)
	w.waitTable("a and b Done everywhere", func(txn statedb.ReadTxn) bool {
		for o := range w.tbl.All(txn) {
			if o.Set.Get("a").Kind != status.KindDone || o.Set.Get("b").Kind != status.KindDone {
				return false
			}
		}
		return true
	})
	_, errsC := w.metrics.get("c")
	assert.Equal(t, 1, errsC, "c: one failed operation in its metrics")
}

// TestOutsider55RecheckFiresDespiteAnotherNamesWrites: a's Update of x asks
// for a re-check after 50ms; meanwhile b is asked to apply x again, three
// times, so x changes under a's Done (b's statuses only). Promise
// (RecheckAfter): "once d has passed it is marked Refreshing ... if it
// still carries that Done status, so Update is called for it again"; a's
// Done identity is untouched by b's writes.
func TestOutsider55RecheckFiresDespiteAnotherNamesWrites(t *testing.T) {
	w := newO55(t, []string{"a", "b"}, o55Config{})
	w.ops["a"].mu.Lock()
	w.ops["a"].recheck["x"] = 50 * time.Millisecond
	w.ops["a"].mu.Unlock()
	w.write("x", "v1")
	w.reconciledAll()
	for i := range 3 {
		txn := w.db.WriteTxn(w.tbl)
		o, _, _ := w.tbl.Get(txn, o55ID.Query("x"))
		o = o.clone()
		o.Set = o.Set.Set("b", status.Pending())
		_, _, err := w.tbl.Insert(txn, o)
		require.NoError(t, err)
		txn.Commit()
		w.ops["b"].await(t, "b applied x again", func(o *o55Ops) bool { return o.updates["x"] == 2+i })
	}
	w.ops["a"].await(t, "a's re-check of x", func(o *o55Ops) bool { return o.updates["x"] == 2 })
	w.reconciledAll()
	o, _ := w.get("x")
	assert.Equal(t, status.KindDone, o.Set.Get("a").Kind)
	assert.Equal(t, status.KindDone, o.Set.Get("b").Kind)
}

// TestOutsider55DependencyAndRefreshOfOneNameLeaveTheOthersAlone: a has a
// dependency and a periodic refresh; b has neither. Promise
// (WithDependency): "Each object found is given a new status ... so that
// the table stays the only source of truth and other reconcilers sharing a
// status.Set are not disturbed"; (doc.go) each reconciler's statuses are
// its own: b never applies again, its Done identity stays.
func TestOutsider55DependencyAndRefreshOfOneNameLeaveTheOthersAlone(t *testing.T) {
	var dep statedb.RWTable[*o55Obj]
	w := newO55(t, []string{"a", "b"}, o55Config{opts: func(name string) []reconciler.Option {
		if name != "a" {
			return nil
		}
		return []reconciler.Option{reconciler.WithRefreshing(30*time.Millisecond, nil),
			reconciler.WithDependency(dep, func(d *o55Obj, _ bool) []statedb.Query[*o55Obj] {
				return []statedb.Query[*o55Obj]{o55ID.Query(d.ID)}
			})}
	}, before: func(db *statedb.DB) error {
		var err error
		dep, err = statedb.NewTable(db, "o55dep", o55ID)
		return err
	}})
	w.write(o55Keys(20, "v1")...)
	w.reconciledAll()
	bDone := w.statuses("b")
	txn := w.db.WriteTxn(dep)
	for i := range 10 {
		_, _, err := dep.Insert(txn, &o55Obj{ID: fmt.Sprintf("k%03d", i)})
		require.NoError(t, err)
	}
	txn.Commit()
	w.ops["a"].await(t, "a applied every object again, three times", func(o *o55Ops) bool {
		for i := range 20 {
			if o.updates[fmt.Sprintf("k%03d", i)] < 4 {
				return false
			}
		}
		return true
	})
	w.reconciled("b")
	now := w.statuses("b")
	for k, st := range bDone {
		assert.Equal(t, st.ID(), now[k].ID(), "b: %s's status rewritten", k)
	}
	for k, c := range w.ops["b"].counts() {
		assert.Equal(t, 1, c, "b applied %s again for a's refresh or dependency", k)
	}
}

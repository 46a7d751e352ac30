package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"strconv"
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
	"github.com/cilium/statedb/index"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	convergeindex "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// timeout bounds every wait of these tests.
const timeout = 20 * time.Second

// item is the object of the items table: Status for a single reconciler,
// Statuses for named ones.
type item struct {
	ID       string        `json:"id" yaml:"id"`
	Value    string        `json:"value" yaml:"value"`
	Status   status.Status `json:"status" yaml:"status"`
	Statuses status.Set    `json:"statuses" yaml:"statuses"`
	// Other is a second set, for reconcilers of WithStatusSet that keep
	// their statuses apart from those of Statuses.
	Other status.Set `json:"-" yaml:"-"`
	// NoKey gives the object no primary key (the table cannot store it).
	NoKey bool `json:"-" yaml:"-"`
}

func (it *item) clone() *item                    { c := *it; return &c }
func (it *item) getStatus() status.Status        { return it.Status }
func (it *item) setStatus(s status.Status) *item { it.Status = s; return it }
func itemKey(it *item) string                    { return it.ID }
func itemValue(it *item) string                  { return it.Value }
func (it *item) TableHeader() []string {
	return []string{"ID", "Value", "StatusKind", "StatusError", "A", "B"}
}

func (it *item) TableRow() []string {
	return []string{
		it.ID, it.Value, it.Status.Kind.String(), it.Status.Error,
		it.Statuses.Get("a").Kind.String(), it.Statuses.Get("b").Kind.String(),
	}
}

var itemID = statedb.Index[*item, string]{
	Name: "id",
	FromObject: func(it *item) index.KeySet {
		if it.NoKey {
			return index.EmptyKeySet
		}
		return index.NewKeySet(index.String(it.ID))
	},
	FromKey:    index.String,
	FromString: index.FromString,
	Unique:     true,
}

// fixture is a running hive with an items table and a reconciler of it.
type fixture struct {
	t      testing.TB
	log    *slog.Logger
	hive   *hive.Hive
	up     bool // started and not stopped since
	db     *statedb.DB
	table  statedb.RWTable[*item]
	index  statedb.Index[*item, status.Kind] // of the reconciler's status
	status func(*item) status.Status         // the reconciler's status
	rec    reconciler.Reconciler[*item]
	health *cell.SimpleHealth
	tables *tables.Tables // with.tables only
	params reconciler.Params
	// register registers the reconciler, for with.register == byTheTest.
	register func() error
}

// with is what a fixture has besides its operations and options; nil is
// one reconciler of item.Status, registered as the hive is populated.
type with struct {
	batch reconciler.BatchOperations[*item]
	// setup runs once the items table exists, before Register; it returns
	// more options.
	setup     func(f *fixture) []reconciler.Option
	getStatus func(*item) status.Status
	setStatus func(*item, status.Status) *item
	// inSet, if not nil, is the set function of WithStatusSet (of
	// item.Statuses) for the fixture's reconciler, which must be named.
	inSet    func(*item, status.Set) *item
	tables   bool         // tables.Cell in the hive
	log      *slog.Logger // the hive's logger instead of the test's
	register registerAt
	// first and last are cells put before and after all others.
	first, last []cell.Cell
}

// registerAt is where a fixture's reconciler is registered.
type registerAt int

const (
	inInvoke    registerAt = iota // as the hive is populated
	inStartHook                   // by a start hook, as some agents do
	byTheTest                     // by the test, with f.register
)

// startFixture starts a hive whose reconciler has ops, w and opts; it is
// stopped when the test ends, or with stop.
func startFixture(t testing.TB, ops reconciler.Operations[*item], w *with, opts ...reconciler.Option) *fixture {
	f := newFixture(t, ops, w, opts...)
	f.start()
	return f
}

// newFixture is startFixture without the start: the hive is populated.
func newFixture(t testing.TB, ops reconciler.Operations[*item], w *with, opts ...reconciler.Option) *fixture {
	if w == nil {
		w = &with{}
	}
	get, set := (*item).getStatus, (*item).setStatus
	if w.getStatus != nil {
		get = w.getStatus
	}
	if w.setStatus != nil {
		set = w.setStatus
	}
	f := &fixture{t: t, log: w.log, index: convergeindex.NewStatusIndex(get), status: get}
	if f.log == nil {
		f.log = hivetest.Logger(t)
	}
	cells := append(slices.Clip(w.first), statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth),
		cell.Module("test", "Test module",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(p reconciler.Params, h *cell.SimpleHealth, lc cell.Lifecycle) error {
				f.db, f.params, f.health = p.DB, p, h
				f.tables, _ = p.Tables.(*tables.Tables)
				var err error
				if f.table, err = statedb.NewTable(p.DB, "items", itemID, f.index); err != nil {
					return err
				}
				if w.setup != nil {
					opts = append(slices.Clip(opts), w.setup(f)...)
				}
				f.register = func() (err error) {
					if w.inSet != nil {
						f.rec, err = reconciler.Register(p, f.table, (*item).clone, nil, nil, ops, w.batch,
							append(slices.Clip(opts), reconciler.WithStatusSet(getSet, w.inSet))...)
						return err
					}
					f.rec, err = reconciler.Register(p, f.table, (*item).clone, set, get, ops, w.batch, opts...)
					return err
				}
				switch w.register {
				case inInvoke:
					return f.register()
				case inStartHook:
					lc.Append(cell.Hook{OnStart: func(cell.HookContext) error { return f.register() }})
				}
				return nil
			})))
	if w.tables {
		cells = append(cells, tables.Cell)
	}
	f.hive = hive.New(append(cells, w.last...)...)
	// Populated here, so that the setup runs on the test's goroutine.
	require.NoError(t, f.hive.Populate(f.log))
	t.Cleanup(f.stop)
	return f
}

// start starts the hive (again), failing the test if Start fails.
func (f *fixture) start() {
	f.t.Helper()
	require.NoError(f.t, f.tryStart())
}

// tryStart starts the hive and returns Start's error.
func (f *fixture) tryStart() error {
	f.t.Helper()
	started := make(chan error, 1)
	go func() { started <- f.hive.Start(f.log, context.Background()) }()
	err := recv(f.t, started, "hive.Start to return")
	f.up = true
	return err
}

// stop stops the hive if it runs.
func (f *fixture) stop() {
	f.t.Helper()
	if f.up {
		f.up = false
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		require.NoError(f.t, f.hive.Stop(f.log, ctx))
	}
}

// upsert writes objects with a fresh Pending status in one transaction and
// returns the transaction's revision (with none, the table's revision).
func (f *fixture) upsert(objs ...*item) statedb.Revision {
	for _, o := range objs {
		o.Status = status.Pending()
	}
	return f.insertAs(objs...)
}

// insertAs writes objects as they are, status (and its identity) included.
func (f *fixture) insertAs(objs ...*item) statedb.Revision {
	wtxn := f.db.WriteTxn(f.table)
	for _, o := range objs {
		_, _, err := f.table.Insert(wtxn, o)
		require.NoError(f.t, err)
	}
	rev := f.table.Revision(wtxn)
	wtxn.Commit()
	return rev
}

func (f *fixture) remove(ids ...string) statedb.Revision {
	wtxn := f.db.WriteTxn(f.table)
	for _, id := range ids {
		_, _, err := f.table.Delete(wtxn, &item{ID: id})
		require.NoError(f.t, err)
	}
	rev := f.table.Revision(wtxn)
	wtxn.Commit()
	return rev
}

// get returns the stored object with id.
func (f *fixture) get(id string) (*item, bool) {
	obj, _, found := f.table.Get(f.db.ReadTxn(), itemID.Query(id))
	return obj, found
}

// settle makes sure the reconciler has read every change so far, even
// while an operation is held, by waiting for a new marker to be Done.
func (f *fixture) settle(n int) {
	id := "marker" + strconv.Itoa(n)
	f.upsert(&item{ID: id})
	f.waitKind(id, status.KindDone)
}

// reconciledTo waits until the reconciler has handled every change up to
// rev and returns what WaitUntilReconciled does.
func (f *fixture) reconciledTo(rev statedb.Revision) (reached, retryLow statedb.Revision) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	reached, retryLow, err := f.rec.WaitUntilReconciled(ctx, rev)
	require.NoError(f.t, err)
	return reached, retryLow
}

// caughtUp waits until the reconciler has handled every change so far and
// nothing is Pending or Refreshing.
func (f *fixture) caughtUp() {
	f.t.Helper()
	f.reconciledTo(f.table.Revision(f.db.ReadTxn()))
	f.waitReconciled()
}

// waitReconciled waits for nothing to be Pending or Refreshing.
func (f *fixture) waitReconciled() {
	f.t.Helper()
	require.NoError(f.t, reconciler.WaitForReconciliation(ctxFor(f.t, timeout), f.db, f.table, f.index))
}

// waitKind waits until the object with id has a status of kind.
func (f *fixture) waitKind(id string, kind status.Kind) *item {
	f.t.Helper()
	var obj *item
	f.waitTable("object "+id+" to be "+kind.String(), func(txn statedb.ReadTxn) bool {
		var found bool
		obj, _, found = f.table.Get(txn, itemID.Query(id))
		return found && f.status(obj).Kind == kind
	})
	return obj
}

// countKind returns how many objects have a status of kind.
func (f *fixture) countKind(txn statedb.ReadTxn, kind status.Kind) (n int) {
	for range f.table.List(txn, f.index.Query(kind)) {
		n++
	}
	return n
}

// waitTable waits, on the table's watch channel, until cond holds.
func (f *fixture) waitTable(what string, cond func(statedb.ReadTxn) bool) {
	f.t.Helper()
	waitUntil(f.t, what, func() (bool, <-chan struct{}) {
		txn := f.db.ReadTxn()
		_, watch := f.table.AllWatch(txn)
		return cond(txn), watch
	})
}

// waitUntil waits until check reports done, checking again whenever the
// channel it returned with is closed, and fails the test at the timeout.
func waitUntil(t testing.TB, what string, check func() (done bool, changed <-chan struct{})) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		done, changed := check()
		if done {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// waitApplied waits until the reconciler has handled every change so far
// and key is Done with value, and checks that the target holds key=value.
func (f *fixture) waitApplied(tg reconcilertest.TargetReader, key, value string) {
	f.t.Helper()
	f.caughtUp()
	obj := f.waitKind(key, status.KindDone)
	assert.Equal(f.t, value, obj.Value)
	got, ok, err := tg.Get(key)
	require.NoError(f.t, err)
	assert.True(f.t, ok, "the table says Done, the target lacks %s", key)
	assert.Equal(f.t, value, got)
}

// waitHealth waits until the health of the reconcile job (or of scope)
// satisfies ok. SimpleHealth offers nothing to wait on: it is polled.
func (f *fixture) waitHealth(ok func(level cell.Level, message string) bool, scope ...string) {
	f.t.Helper()
	name := "job-reconcile"
	if len(scope) > 0 {
		name = scope[0]
	}
	require.EventuallyWithT(f.t, func(c *assert.CollectT) {
		child := f.health.GetChild(name)
		if !assert.NotNil(c, child, "no health scope %s", name) {
			return
		}
		child.Lock()
		level, msg := child.Level, child.Status
		if child.Error != nil {
			msg += ": " + child.Error.Error()
		}
		child.Unlock()
		assert.True(c, ok(level, msg), "health of %s: %s %s", name, level, msg)
	}, timeout, time.Millisecond)
}

// waitInfo waits, on the watch channel of tables.Cell's reconcilers table,
// until the row of the fixture's reconciler satisfies cond, and returns it
// (with.tables).
func (f *fixture) waitInfo(what string, cond func(*tables.Info) bool) (info *tables.Info) {
	f.t.Helper()
	waitUntil(f.t, what, func() (bool, <-chan struct{}) {
		txn := f.db.ReadTxn()
		_, watch := f.tables.Reconcilers().AllWatch(txn)
		var found bool
		info, _, found = f.tables.Reconcilers().Get(txn, tables.InfoByID.Query("test"))
		return found && cond(info), watch
	})
	return info
}

// recv receives from ch, failing the test after the timeout.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// ctxFor returns a context that ends after d, or with the test.
func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// describe renders key→value pairs as sorted "key=value" words.
func describe(data map[string]string) string {
	words := make([]string, 0, len(data))
	for k, v := range data {
		words = append(words, k+"="+v)
	}
	slices.Sort(words)
	return strings.Join(words, " ")
}

// variant is a reconciler's workers and whether it has batch operations.
type variant struct {
	workers int
	batch   bool
}

var variants = []variant{{1, false}, {4, false}, {1, true}, {4, true}}

// forVariants runs test as a subtest of t in each of vs, named after it.
func forVariants(t *testing.T, vs []variant, test func(t *testing.T, v variant)) {
	for _, v := range vs {
		t.Run(v.String(), func(t *testing.T) { test(t, v) })
	}
}

func (v variant) String() string { return fmt.Sprintf("workers=%d,batch=%v", v.workers, v.batch) }

// fixture populates (does not start) a fixture of v over ops (a target or
// a FaultyOps around one), without pruning unless opts ask for it.
func (v variant) fixture(t testing.TB, ops interface {
	reconciler.Operations[*item]
	reconciler.BatchOperations[*item]
}, w *with, opts ...reconciler.Option) *fixture {
	if w == nil {
		w = &with{}
	}
	if v.batch {
		w.batch = ops
	}
	return newFixture(t, ops, w, append([]reconciler.Option{reconciler.WithConcurrency(v.workers), reconciler.WithPruning(0)}, opts...)...)
}

// start is fixture, started.
func (v variant) start(t testing.TB, ops interface {
	reconciler.Operations[*item]
	reconciler.BatchOperations[*item]
}, w *with, opts ...reconciler.Option) *fixture {
	f := v.fixture(t, ops, w, opts...)
	f.start()
	return f
}

// items returns n objects prefix-00000... with value.
func items(prefix string, n int, value string) []*item {
	objs := make([]*item, n)
	for i := range objs {
		objs[i] = &item{ID: fmt.Sprintf("%s-%05d", prefix, i), Value: value}
	}
	return objs
}

func ids(objs []*item) []string {
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.ID
	}
	return keys
}

// statusOf returns the getter and setter of reconciler name's status in
// item.Statuses.
// getSet and putSet reach item.Statuses, for WithStatusSet.
func getSet(it *item) status.Set          { return it.Statuses }
func putSet(it *item, s status.Set) *item { it.Statuses = s; return it }

func statusOf(name string) (func(*item) status.Status, func(*item, status.Status) *item) {
	return func(it *item) status.Status { return it.Statuses.Get(name) },
		func(it *item, s status.Status) *item { it.Statuses = it.Statuses.Set(name, s); return it }
}

// target is the tests' one target: a reconcilertest.Target, which keeps
// what is applied and records every call, with hooks around it. A test can
// hold an operation at a precise point (hold, holdAfterApply, holdUpdates),
// fail calls (fail, failIDs, failWhen, down) and read figures of what it
// was given (calls, prunes, inflight, maxInflight, maxBatch, callTimes).
// Faults can also come from wrapping it in a reconcilertest.FaultyOps. Set
// the hooks before the hive starts, or later holding mu (setFail, setAfter
// do). It is BatchOperations too, entry by entry.
type target struct {
	*reconcilertest.Target[*item] // nil: nothing is kept, not even times (TestScale)

	mu sync.Mutex
	hooks
	holds    map[string]*hold // by key; pruneKey for the next prune
	returned int              // prunes that returned
	changed  chan struct{}    // closed and replaced when a prune returns
	times    []kitcall        // every call's start, with its op
	started  chan struct{}    // closed and replaced whenever a call starts
	held     chan struct{}    // non-nil: updates that start wait for it (holdAll)

	// calls and prunes count the calls started; inflight those under way
	// (maxInflight the most at once); maxBatch is the longest batch.
	calls, prunes, inflight, maxInflight, maxBatch atomic.Int64
}

// hooks run in a target's operations. update and prune run first: an
// error they return is the operation's, with nothing applied nor counted.
// fail then decides a started call's failure, before anything is applied.
// updated runs once the object is applied, and may fail it then; deleted
// and pruned run after a successful Delete or Prune; ask gives a batch
// entry's RecheckAfter.
type hooks struct {
	update, updated func(ctx context.Context, it *item) error
	deleted         func(ctx context.Context, it *item)
	prune           func(ctx context.Context) error
	pruned          func(ctx context.Context)
	fail            func(op reconcilertest.Op, it *item) error
	ask             func(it *item) time.Duration
}

// kitcall is a call's start.
type kitcall struct {
	op  reconcilertest.Op
	key string
	at  time.Time
}

// pruneKey is the key of a hold on the next prune.
const pruneKey = "(prune)"

func newTarget() *target {
	return &target{Target: reconcilertest.NewTarget(itemKey, itemValue), holds: map[string]*hold{},
		changed: make(chan struct{}), started: make(chan struct{})}
}

func (tg *target) setFail(f func(op reconcilertest.Op, it *item) error) {
	tg.mu.Lock()
	tg.fail = f
	tg.mu.Unlock()
}

// setAfter runs f after every successful Update (nil: nothing).
func (tg *target) setAfter(f func(ctx context.Context, it *item)) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.updated = nil
	if f != nil {
		tg.updated = func(ctx context.Context, it *item) error { f(ctx, it); return nil }
	}
}

// failIDs makes every call on an object with one of ids fail with
// errKitObject, and returns tg.
func (tg *target) failIDs(ids ...string) *target {
	return tg.failWhen(errKitObject, func(_ reconcilertest.Op, it *item) bool { return it != nil && slices.Contains(ids, it.ID) })
}

// failWhen makes every call for which when holds fail with err, and
// returns tg.
func (tg *target) failWhen(err error, when func(op reconcilertest.Op, it *item) bool) *target {
	tg.setFail(func(op reconcilertest.Op, it *item) error {
		if when(op, it) {
			return err
		}
		return nil
	})
	return tg
}

func (tg *target) down()    { tg.setFail(func(reconcilertest.Op, *item) error { return errKitDown }) }
func (tg *target) recover() { tg.setFail(nil) }

// holdUpdates holds the updates of the objects match takes at their start
// (before they count as started), until release is closed or their context
// ends; entered receives (if nothing waits in it already) as one is held.
func (tg *target) holdUpdates(match func(*item) bool) (entered <-chan struct{}, release chan struct{}) {
	in, release := make(chan struct{}, 1), make(chan struct{})
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.update = func(ctx context.Context, it *item) error {
		if !match(it) {
			return nil
		}
		select {
		case in <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}
	return in, release
}

// begin records a call's start and returns the hooks and its fault; end
// must follow.
func (tg *target) begin(op reconcilertest.Op, it *item) (hooks, error) {
	n := tg.inflight.Add(1)
	for m := tg.maxInflight.Load(); n > m && !tg.maxInflight.CompareAndSwap(m, n); m = tg.maxInflight.Load() {
	}
	tg.calls.Add(1)
	if op == reconcilertest.OpPrune {
		tg.prunes.Add(1)
	}
	tg.mu.Lock()
	defer tg.mu.Unlock()
	close(tg.started)
	tg.started = make(chan struct{})
	key := ""
	if it != nil {
		key = it.ID
	}
	if tg.Target != nil {
		tg.times = append(tg.times, kitcall{op: op, key: key, at: time.Now()})
	}
	var err error
	if tg.fail != nil {
		err = tg.fail(op, it)
	}
	return tg.hooks, err
}

func (tg *target) end() { tg.inflight.Add(-1) }

func (tg *target) startedWatch() <-chan struct{} {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.started
}

func (tg *target) callTimes() []kitcall {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return slices.Clone(tg.times)
}

// attempts returns how many calls of op on key have started.
func (tg *target) attempts(op reconcilertest.Op, key string) (n int) {
	for _, c := range tg.callTimes() {
		if c.op == op && c.key == key {
			n++
		}
	}
	return n
}

// holdAll holds every update that starts from now on, counted in flight,
// until let is called (it may be called again) or its context ends.
func (tg *target) holdAll() (let func()) {
	ch := make(chan struct{})
	tg.mu.Lock()
	tg.held = ch
	tg.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			tg.mu.Lock()
			if tg.held == ch {
				tg.held = nil
			}
			tg.mu.Unlock()
			close(ch)
		})
	}
}

func (tg *target) waitHeld(ctx context.Context) error {
	tg.mu.Lock()
	ch := tg.held
	tg.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitStarts waits until cond holds, checking it whenever a call starts.
func (tg *target) waitStarts(t testing.TB, what string, cond func() bool) {
	t.Helper()
	waitUntil(t, what, func() (bool, <-chan struct{}) {
		ch := tg.startedWatch()
		return cond(), ch
	})
}

// appliedTwice returns the versions ("key=value") applied more than once.
func (tg *target) appliedTwice() []string {
	n := map[string]int{}
	var twice []string
	for _, c := range tg.Calls() {
		if c.Op == reconcilertest.OpUpdate && c.Err == nil {
			if n[c.Key+"="+c.Value]++; n[c.Key+"="+c.Value] == 2 {
				twice = append(twice, c.Key+"="+c.Value)
			}
		}
	}
	return twice
}

// hold is an operation held by a target until let go: see target.hold.
type hold struct {
	afterApply    bool
	succeedAtStop bool       // the held update reports success when its context ends
	started       chan *item // receives the object (nil for a prune) when the operation blocks
	release       chan struct{}
	once          sync.Once
}

// hold holds the next operation on key (pruneKey: the next prune) once it
// has started and before it applies anything, until let go or its context
// ends.
func (tg *target) hold(key string) *hold { return tg.setHold(key, false, false) }

// holdAfterApply holds the next update of key once it has applied its
// object; with succeedAtStop it returns success if its context ends.
func (tg *target) holdAfterApply(key string, succeedAtStop bool) *hold {
	return tg.setHold(key, true, succeedAtStop)
}

func (tg *target) setHold(key string, afterApply, succeedAtStop bool) *hold {
	h := &hold{afterApply: afterApply, succeedAtStop: succeedAtStop, started: make(chan *item, 1), release: make(chan struct{})}
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.holds[key] = h
	return h
}

// wait waits until the held operation blocks, and returns its object.
func (h *hold) wait(t testing.TB) *item {
	t.Helper()
	return recv(t, h.started, "the held operation to start")
}

// let lets the held operation, if any, go on. It may be called again.
func (h *hold) let() { h.once.Do(func() { close(h.release) }) }

// block blocks the operation on key if a hold for this point is set.
func (tg *target) block(ctx context.Context, key string, it *item, afterApply bool) error {
	tg.mu.Lock()
	h := tg.holds[key]
	if h == nil || h.afterApply != afterApply {
		tg.mu.Unlock()
		return nil
	}
	delete(tg.holds, key)
	tg.mu.Unlock()
	h.started <- it
	select {
	case <-h.release:
		return nil
	case <-ctx.Done():
		if h.succeedAtStop {
			return nil
		}
		return ctx.Err()
	}
}

// hooked returns the hooks, read under mu.
func (tg *target) hooked() hooks {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.hooks
}

// call calls h if it is set.
func call(h func(context.Context, *item) error, ctx context.Context, it *item) error {
	if h == nil {
		return nil
	}
	return h(ctx, it)
}

func (tg *target) Update(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, it *item) error {
	if err := call(tg.hooked().update, ctx, it); err != nil {
		return err
	}
	defer tg.end()
	h, err := tg.begin(reconcilertest.OpUpdate, it)
	if err != nil {
		return err
	}
	if err := tg.waitHeld(ctx); err != nil {
		return err
	}
	if err := tg.block(ctx, it.ID, it, false); err != nil {
		return err
	}
	if tg.Target != nil {
		if err := tg.Target.Update(ctx, txn, rev, it); err != nil {
			return err
		}
	}
	if err := call(h.updated, ctx, it); err != nil {
		return err
	}
	return tg.block(ctx, it.ID, it, true)
}

func (tg *target) Delete(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, it *item) error {
	defer tg.end()
	h, err := tg.begin(reconcilertest.OpDelete, it)
	if err != nil {
		return err
	}
	if err := tg.block(ctx, it.ID, it, false); err != nil || tg.Target == nil {
		return err
	}
	if err := tg.Target.Delete(ctx, txn, rev, it); err != nil {
		return err
	}
	if h.deleted != nil {
		h.deleted(ctx, it)
	}
	return nil
}

func (tg *target) Prune(ctx context.Context, txn statedb.ReadTxn, objs iter.Seq2[*item, statedb.Revision]) error {
	defer func() {
		tg.mu.Lock()
		tg.returned++
		close(tg.changed)
		tg.changed = make(chan struct{})
		tg.mu.Unlock()
	}()
	if h := tg.hooked(); h.prune != nil {
		if err := h.prune(ctx); err != nil {
			return err
		}
	}
	defer tg.end()
	h, err := tg.begin(reconcilertest.OpPrune, nil)
	if err != nil {
		return err
	}
	if err := tg.block(ctx, pruneKey, nil, false); err != nil {
		return err
	}
	if tg.Target != nil {
		if err := tg.Target.Prune(ctx, txn, objs); err != nil {
			return err
		}
	}
	if h.pruned != nil {
		h.pruned(ctx)
	}
	return nil
}

func (tg *target) batchSize(n int) {
	for m := tg.maxBatch.Load(); int64(n) > m && !tg.maxBatch.CompareAndSwap(m, int64(n)); m = tg.maxBatch.Load() {
	}
}

func (tg *target) UpdateBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	tg.batchSize(len(batch))
	for i := range batch {
		batch[i].Result = tg.Update(ctx, txn, batch[i].Revision, batch[i].Object)
		if ask := tg.hooked().ask; batch[i].Result == nil && ask != nil {
			batch[i].RecheckAfter = ask(batch[i].Object)
		}
	}
}

func (tg *target) DeleteBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	tg.batchSize(len(batch))
	for i := range batch {
		batch[i].Result = tg.Delete(ctx, txn, batch[i].Revision, batch[i].Object)
	}
}

// pruneNow asks f's reconciler for a prune and waits until a prune has
// returned after the request.
func (tg *target) pruneNow(f *fixture) {
	f.t.Helper()
	tg.mu.Lock()
	before := tg.returned
	tg.mu.Unlock()
	f.rec.Prune()
	tg.waitPrunes(f.t, before+1)
}

// waitPrunes waits until n prunes have returned.
func (tg *target) waitPrunes(t testing.TB, n int) {
	t.Helper()
	waitUntil(t, fmt.Sprint("prune ", n), func() (bool, <-chan struct{}) {
		tg.mu.Lock()
		defer tg.mu.Unlock()
		return tg.returned >= n, tg.changed
	})
}

// has reports whether the target holds key=value.
func (tg *target) has(key, value string) bool {
	v, ok, _ := tg.Get(key)
	return ok && v == value
}

// updates returns the values of the successful updates of key, in order.
func (tg *target) updates(key string) []string {
	var vals []string
	for _, c := range tg.Calls() {
		if c.Op == reconcilertest.OpUpdate && c.Key == key && c.Err == nil {
			vals = append(vals, c.Value)
		}
	}
	return vals
}

// waitUpdates waits until key has had n successful updates.
func (tg *target) waitUpdates(t testing.TB, key string, n int) {
	t.Helper()
	waitUntil(t, key+" updated", func() (bool, <-chan struct{}) {
		_, ch := tg.CallsWatch()
		return len(tg.updates(key)) >= n, ch
	})
}

// waitCalls waits until the target has seen at least n calls start.
func (tg *target) waitCalls(t testing.TB, n int64) {
	t.Helper()
	waitUntil(t, "calls", func() (bool, <-chan struct{}) {
		ch := tg.startedWatch()
		return tg.calls.Load() >= n, ch
	})
}

// count returns how many calls of op on key (on any key if "") tr
// recorded, and how many of them succeeded.
func count(tr reconcilertest.CallRecorder, op reconcilertest.Op, key string) (all, ok int) {
	for _, c := range tr.Calls() {
		if c.Op == op && (key == "" || c.Key == key) {
			all++
			if c.Err == nil {
				ok++
			}
		}
	}
	return all, ok
}

// applied returns the updates and deletes the target applied, in order,
// as "update key=value" and "delete key".
func (tg *target) applied() []string {
	var words []string
	for _, c := range tg.Calls() {
		switch {
		case c.Err != nil:
		case c.Op == reconcilertest.OpUpdate:
			words = append(words, "update "+c.Key+"="+c.Value)
		case c.Op == reconcilertest.OpDelete:
			words = append(words, "delete "+c.Key)
		}
	}
	return words
}

// waitCalls waits until tr has recorded n successful calls of op on key.
func waitCalls(t testing.TB, tr reconcilertest.CallRecorder, op reconcilertest.Op, key string, n int) {
	t.Helper()
	waitUntil(t, fmt.Sprint(n, " calls of ", op, " on ", key), func() (bool, <-chan struct{}) {
		_, changed := tr.CallsWatch()
		_, ok := count(tr, op, key)
		return ok >= n, changed
	})
}

// errKitDown is the error of a target that is down as a whole.
var errKitDown = errors.New("kit: target down")

// errKitObject is an error about one object, not the target.
var errKitObject = errors.New("kit: bad object")

// kitmetrics records the round figures.
type kitmetrics struct {
	mu      sync.Mutex
	last    metrics.RoundStats
	rounds  int
	changed chan struct{}
}

func newKitMetrics() *kitmetrics { return &kitmetrics{changed: make(chan struct{})} }

func (m *kitmetrics) ReconciliationDuration(cell.FullModuleID, string, string, time.Duration) {}
func (m *kitmetrics) ReconciliationErrors(cell.FullModuleID, string, int, int)                {}
func (m *kitmetrics) PruneError(cell.FullModuleID, string, error)                             {}
func (m *kitmetrics) PruneDuration(cell.FullModuleID, string, time.Duration)                  {}
func (m *kitmetrics) Round(_ cell.FullModuleID, _ string, s metrics.RoundStats) {
	m.mu.Lock()
	m.last = s
	m.rounds++
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
}

func (m *kitmetrics) get() (metrics.RoundStats, <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last, m.changed
}

// waitRound waits until the last round's figures satisfy cond.
func (m *kitmetrics) waitRound(t testing.TB, what string, cond func(metrics.RoundStats) bool) metrics.RoundStats {
	t.Helper()
	var s metrics.RoundStats
	waitUntil(t, what, func() (bool, <-chan struct{}) {
		var ch <-chan struct{}
		s, ch = m.get()
		return cond(s), ch
	})
	return s
}

// waitOpen waits until the breaker has been seen open with at least n
// openings.
func (m *kitmetrics) waitOpen(t testing.TB, n uint64) {
	t.Helper()
	m.waitRound(t, "breaker open", func(s metrics.RoundStats) bool { return s.BreakerOpen && s.BreakerOpened >= n })
}

func (m *kitmetrics) waitClosed(t testing.TB) {
	t.Helper()
	m.waitRound(t, "breaker closed", func(s metrics.RoundStats) bool { return !s.BreakerOpen })
}

// kititems returns objects with the given ids and value.
func kititems(value string, ids ...string) []*item {
	objs := make([]*item, len(ids))
	for i, id := range ids {
		objs[i] = &item{ID: id, Value: value}
	}
	return objs
}

// converged waits until every object is Done, every change so far handled
// with no retry left, and the target (a *target, a kitops' tg) holds
// exactly the table. On failure it logs what is not settled.
func (f *fixture) converged(tg interface {
	Diff(statedb.ReadTxn, statedb.Table[*item]) string
}) {
	f.t.Helper()
	rev := f.table.Revision(f.db.ReadTxn())
	f.t.Cleanup(func() {
		if !f.t.Failed() {
			return
		}
		txn := f.db.ReadTxn()
		for obj := range f.table.All(txn) {
			if obj.Status.Kind != status.KindDone {
				f.t.Logf("not Done: %s=%s %+v", obj.ID, obj.Value, obj.Status)
			}
		}
		if f.tables != nil {
			for r := range f.tables.Retries().All(txn) {
				f.t.Logf("retry row: %+v", *r)
			}
			for i := range f.tables.Reconcilers().All(txn) {
				f.t.Logf("info: %+v", *i)
			}
		}
	})
	f.waitTable("every object Done", func(txn statedb.ReadTxn) bool {
		return f.countKind(txn, status.KindDone) == f.table.NumObjects(txn)
	})
	waitUntil(f.t, "no retry left", func() (bool, <-chan struct{}) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		_, low, err := f.rec.WaitUntilReconciled(ctx, rev)
		ch := make(chan struct{})
		close(ch)
		return err == nil && low == 0, ch
	})
	if d := tg.Diff(f.db.ReadTxn(), f.table); d != "" {
		f.t.Fatalf("the target differs from the table:\n%s", d)
	}
}

// eventually waits until cond holds, checking it whenever the table
// changes and every millisecond (for conditions on a target, a callback's
// calls or health), and fails the test at the timeout.
func (f *fixture) eventually(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.After(timeout)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		_, watch := f.table.AllWatch(f.db.ReadTxn())
		if cond() {
			return
		}
		select {
		case <-watch:
		case <-tick.C:
		case <-deadline:
			f.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// info returns the fixture reconciler's row of the reconcilers table
// (with.tables), or nil.
func (f *fixture) info() *tables.Info {
	info, _, _ := f.tables.Reconcilers().Get(f.db.ReadTxn(), tables.InfoByID.Query("test"))
	return info
}

// put writes id=value with a fresh Pending status and returns the
// revision.
func (f *fixture) put(id, value string) statedb.Revision {
	return f.upsert(&item{ID: id, Value: value})
}

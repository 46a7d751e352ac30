package reconciler_test

// An outsider's tests of the documented guarantees of "Several reconcilers
// of one table" (package doc): reconcilers of one status.Set that write
// together must never wait for one another's slow operation, never lose or
// clobber a status, keep their waits, health and metrics their own, survive
// stops, starts and Pause, store Update's changes as documented, and never
// write a status for an older version of an object.

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"slices"
	"strconv"
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

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
)

const o53Timeout = 30 * time.Second

// o53Obj is an object served by several named reconcilers through one Set.
type o53Obj struct {
	ID    string
	Value string
	Tag   string // written by Update, in the Update test
	Set   status.Set
	// Fields are the reconcilers' statuses when each has a field of its
	// own (o53Ops.fields) instead of a Set entry.
	Fields [4]status.Status
}

func (o *o53Obj) clone() *o53Obj { c := *o; return &c }

func (o *o53Obj) TableHeader() []string { return []string{"ID", "Value", "Tag", "Set"} }
func (o *o53Obj) TableRow() []string    { return []string{o.ID, o.Value, o.Tag, o.Set.String()} }

var o53ID = statedb.Index[*o53Obj, string]{
	Name:       "id",
	FromObject: func(o *o53Obj) index.KeySet { return index.NewKeySet(index.String(o.ID)) },
	FromKey:    index.String,
	FromString: index.FromString,
	Unique:     true,
}

// o53Ops is what a reconciler's operations are built from: the recording
// target, wrapped by gates the test opens, wrapped by a FaultyOps.
type o53Ops struct {
	name   string
	target *reconcilertest.Target[*o53Obj]
	// refuse, if set, fails Update terminally with an error naming the
	// reconciler for the keys it returns true for.
	refuse func(key string) bool
	// tag makes Update write its name into the object's Tag.
	tag bool
	// fields gives each reconciler a status field of its own, by its
	// place in the fixture, instead of a Set entry. All or none have it.
	fields bool
	// batch registers the target's batch operations (through
	// FaultyOps.Processor) instead: gates, refuse and tag do not apply.
	batch bool
	// opts are this reconciler's own options.
	opts []reconciler.Option

	mu      sync.Mutex
	gates   map[string]chan struct{} // value → closed to let its Update go on
	entered map[string]chan struct{} // value → closed when its Update started
}

func (o *o53Ops) gate(value string) (release func(), entered <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.gates == nil {
		o.gates, o.entered = map[string]chan struct{}{}, map[string]chan struct{}{}
	}
	g, e := make(chan struct{}), make(chan struct{})
	o.gates[value], o.entered[value] = g, e
	var once sync.Once
	return func() { once.Do(func() { close(g) }) }, e
}

func (o *o53Ops) Update(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, obj *o53Obj) error {
	o.mu.Lock()
	g, e := o.gates[obj.Value], o.entered[obj.Value]
	if e != nil {
		delete(o.entered, obj.Value)
	}
	o.mu.Unlock()
	if e != nil {
		close(e)
	}
	if g != nil {
		select {
		case <-g:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if o.refuse != nil && o.refuse(obj.ID) {
		return reconciler.TerminalError(fmt.Errorf("%s refuses %s", o.name, obj.ID))
	}
	if o.tag {
		obj.Tag = o.name
	}
	return o.target.Update(ctx, txn, rev, obj)
}

func (o *o53Ops) Delete(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, obj *o53Obj) error {
	return o.target.Delete(ctx, txn, rev, obj)
}

func (o *o53Ops) Prune(ctx context.Context, txn statedb.ReadTxn, objs iter.Seq2[*o53Obj, statedb.Revision]) error {
	return o.target.Prune(ctx, txn, objs)
}

// o53Rec is one named reconciler of the fixture.
type o53Rec struct {
	name   string
	ops    *o53Ops
	faults *reconcilertest.FaultyOps[*o53Obj]
	rec    reconciler.Reconciler[*o53Obj]
	get    func(*o53Obj) status.Status
}

func (r *o53Rec) status(o *o53Obj) status.Status { return r.get(o) }

type o53Fixture struct {
	t       *testing.T
	hive    *hive.Hive
	up      bool
	db      *statedb.DB
	table   statedb.RWTable[*o53Obj]
	health  *cell.SimpleHealth
	metrics *metrics.ExpVar
	module  cell.FullModuleID
	params  reconciler.Params
	recs    []*o53Rec
	names   []string
}

// newO53 starts a hive with one table and a named reconciler per ops, each
// on its own Set entry, with its own target and FaultyOps.
func newO53(t *testing.T, ops []*o53Ops, opts ...reconciler.Option) *o53Fixture {
	f := &o53Fixture{t: t, metrics: metrics.NewUnpublishedExpVar()}
	for _, o := range ops {
		f.names = append(f.names, o.name)
	}
	log := hivetest.Logger(t)
	f.hive = hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth),
		cell.Module("o53", "outsider 53",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(p reconciler.Params, h *cell.SimpleHealth) error {
				f.db, f.health, f.module, f.params = p.DB, h, p.ModuleID, p
				var err error
				if f.table, err = statedb.NewTable(p.DB, "o53", o53ID); err != nil {
					return err
				}
				for _, o := range ops {
					if err := f.register(o, opts...); err != nil {
						return err
					}
				}
				return nil
			})))
	require.NoError(t, f.hive.Populate(log))
	f.start()
	t.Cleanup(f.stop)
	return f
}

// register registers a reconciler for o, the next of the fixture.
func (f *o53Fixture) register(o *o53Ops, opts ...reconciler.Option) error {
	i := len(f.recs)
	r := &o53Rec{name: o.name, ops: o}
	var batch reconciler.BatchOperations[*o53Obj]
	if o.batch {
		r.faults = reconcilertest.NewFaultyOps(func(x *o53Obj) string { return x.ID }, reconciler.Operations[*o53Obj](o), reconciler.BatchOperations[*o53Obj](o.target))
		batch = r.faults.Processor()
	} else {
		r.faults = reconcilertest.NewFaultyOps(func(x *o53Obj) string { return x.ID }, reconciler.Operations[*o53Obj](o), nil)
	}
	name := o.name
	set := func(x *o53Obj, st status.Status) *o53Obj { x.Set = x.Set.Set(name, st); return x }
	r.get = func(x *o53Obj) status.Status { return x.Set.Get(name) }
	if o.fields {
		set = func(x *o53Obj, st status.Status) *o53Obj { x.Fields[i] = st; return x }
		r.get = func(x *o53Obj) status.Status { return x.Fields[i] }
	}
	var err error
	r.rec, err = reconciler.Register(f.params, f.table, (*o53Obj).clone, set, r.get, r.faults, batch,
		append([]reconciler.Option{reconciler.WithName(name), reconciler.WithMetrics(f.metrics),
			reconciler.WithRetry(time.Millisecond, 20*time.Millisecond)}, append(slices.Clip(opts), o.opts...)...)...)
	if err != nil {
		return err
	}
	f.recs = append(f.recs, r)
	return nil
}

func (f *o53Fixture) start() {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), o53Timeout)
	defer cancel()
	require.NoError(f.t, f.hive.Start(hivetest.Logger(f.t), ctx))
	f.up = true
}

func (f *o53Fixture) stop() {
	f.t.Helper()
	if !f.up {
		return
	}
	f.up = false
	ctx, cancel := context.WithTimeout(context.Background(), o53Timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.hive.Stop(hivetest.Logger(f.t), ctx) }()
	select {
	case err := <-done:
		require.NoError(f.t, err)
	case <-time.After(o53Timeout + 5*time.Second):
		f.t.Fatal("hive.Stop hangs")
	}
}

func newOps(names ...string) []*o53Ops {
	var ops []*o53Ops
	for _, n := range names {
		ops = append(ops, &o53Ops{name: n, target: reconcilertest.NewTarget(
			func(o *o53Obj) string { return o.ID }, func(o *o53Obj) string { return o.Value })})
	}
	return ops
}

// upsert writes objects with a fresh Pending for every name.
func (f *o53Fixture) upsert(kv ...string) statedb.Revision {
	txn := f.db.WriteTxn(f.table)
	for i := 0; i < len(kv); i += 2 {
		o := &o53Obj{ID: kv[i], Value: kv[i+1], Set: status.NewSet().Pending(f.names...)}
		if old, _, ok := f.table.Get(txn, o53ID.Query(kv[i])); ok {
			o.Set = old.Set.Pending(f.names...)
		}
		for j := range f.names {
			o.Fields[j] = status.Pending()
		}
		_, _, err := f.table.Insert(txn, o)
		require.NoError(f.t, err)
	}
	txn.Commit()
	return f.table.Revision(f.db.ReadTxn())
}

func (f *o53Fixture) remove(keys ...string) statedb.Revision {
	txn := f.db.WriteTxn(f.table)
	for _, k := range keys {
		_, _, err := f.table.Delete(txn, &o53Obj{ID: k})
		require.NoError(f.t, err)
	}
	txn.Commit()
	return f.table.Revision(f.db.ReadTxn())
}

func (f *o53Fixture) get(key string) *o53Obj {
	o, _, ok := f.table.Get(f.db.ReadTxn(), o53ID.Query(key))
	require.True(f.t, ok, "no object %s", key)
	return o
}

// waitAll waits until every reconciler reconciled the table's revision.
func (f *o53Fixture) waitAll() {
	f.t.Helper()
	rev := f.table.Revision(f.db.ReadTxn())
	for _, r := range f.recs {
		ctx, cancel := context.WithTimeout(context.Background(), o53Timeout)
		_, _, err := r.rec.WaitUntilReconciled(ctx, rev)
		cancel()
		require.NoError(f.t, err, "%s: WaitUntilReconciled(%d)", r.name, rev)
	}
}

// settledUpTo checks, in one read, that every object at or below rev has
// a settled status (Done or Error) for r, and returns a description of
// those that do not.
func (f *o53Fixture) unsettledUpTo(r *o53Rec, rev statedb.Revision) []string {
	var bad []string
	for o, orev := range f.table.All(f.db.ReadTxn()) {
		if orev > rev {
			continue
		}
		if st := r.status(o); st.Kind != status.KindDone && st.Kind != status.KindError {
			bad = append(bad, fmt.Sprintf("%s(rev=%d %s)", o.ID, orev, st.Kind))
		}
	}
	return bad
}

func (f *o53Fixture) healthOf(name string) (cell.Level, string) {
	child := f.health.GetChild("job-reconcile-" + name)
	if child == nil {
		return "", "no scope"
	}
	child.Lock()
	defer child.Unlock()
	msg := child.Status
	if child.Error != nil {
		msg += ": " + child.Error.Error()
	}
	return child.Level, msg
}

func o53Wait(t *testing.T, what string, cond func() (bool, <-chan struct{})) {
	t.Helper()
	deadline := time.After(o53Timeout)
	for {
		ok, ch := cond()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func o53Recv(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(o53Timeout):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// A blocked Update of one reconciler must not hold the others' writes:
// object after object, A settles and writes Done while B stays blocked on
// the first object it took.
func TestOutsider53SlowPeerNeverHoldsTheOthersWrites(t *testing.T) {
	f := newO53(t, newOps("a", "b"))
	a, b := f.recs[0], f.recs[1]
	require.NoError(t, b.faults.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay, Op: reconcilertest.OpUpdate}))

	rev := f.upsert("k0", "v0")
	o53Wait(t, "b to hold k0", func() (bool, <-chan struct{}) {
		in, ch := b.faults.InFlightWatch()
		return len(in) > 0, ch
	})
	var worst time.Duration
	for i := range 20 {
		if i > 0 {
			rev = f.upsert("k"+strconv.Itoa(i), "v"+strconv.Itoa(i))
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		reached, _, err := a.rec.WaitUntilReconciled(ctx, rev)
		cancel()
		require.NoError(t, err, "a's wait for rev %d (write %d) while b blocks", rev, i)
		require.GreaterOrEqual(t, reached, rev)
		worst = max(worst, time.Since(start))
		o := f.get("k" + strconv.Itoa(i))
		require.Equal(t, status.KindDone, a.status(o).Kind, "a's status of k%d once a's wait returned", i)
		require.Equal(t, status.KindPending, b.status(o).Kind, "b's status of k%d while b blocks", i)
	}
	t.Logf("a's longest wait while b blocks: %v", worst)
	assert.Less(t, worst, 3*time.Second)

	// b's own wait does not pretend: it cannot reach the revision.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, _, err := b.rec.WaitUntilReconciled(ctx, rev)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)

	b.faults.Clear("")
	f.waitAll()
	for _, r := range f.recs {
		assert.Empty(t, f.unsettledUpTo(r, f.table.Revision(f.db.ReadTxn())), r.name)
		assert.Empty(t, r.ops.target.Diff(f.db.ReadTxn(), f.table), r.name)
	}
}

// Concurrent inserts, updates and deletes with four reconcilers, two of
// them failing at random and one refusing some keys for good: at the end
// each name's status is its own and matches its own target.
func TestOutsider53ConcurrentWritesKeepEachNamesStatus(t *testing.T) {
	for _, v := range []struct{ fields, batch bool }{{false, false}, {true, false}, {false, true}} {
		t.Run(fmt.Sprintf("fields=%v,batch=%v", v.fields, v.batch), func(t *testing.T) { testO53ConcurrentWrites(t, v.fields, v.batch) })
	}
}

func testO53ConcurrentWrites(t *testing.T, fields, batch bool) {
	ops := newOps("a", "b", "c", "d")
	for _, o := range ops {
		o.fields, o.batch = fields, batch
	}
	if !batch {
		ops[2].refuse = func(k string) bool { return k == "k3" || k == "k7" }
		ops[3].refuse = func(k string) bool { return k == "k5" }
	}
	f := newO53(t, ops, reconciler.WithConcurrency(2))
	for i, r := range f.recs[:2] {
		require.NoError(t, r.faults.Inject(reconcilertest.Fault{
			Mode: reconcilertest.ModeError, Probability: 0.3, Seed: uint64(i + 1), Op: reconcilertest.OpUpdate}))
	}

	var wg sync.WaitGroup
	var mu sync.Mutex // guards waitFailures
	var waitFailures []string
	for w := range 3 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 53))
			for i := range 150 {
				k := "k" + strconv.Itoa(rng.IntN(12))
				var rev statedb.Revision
				if rng.IntN(5) == 0 {
					rev = f.remove(k)
				} else {
					rev = f.upsert(k, fmt.Sprintf("w%d-%d", w, i))
				}
				if i%5 == 0 {
					// Every reconciler's wait returns only once its
					// statuses (Done or Error) are in the table.
					for _, r := range f.recs {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						_, _, err := r.rec.WaitUntilReconciled(ctx, rev)
						cancel()
						bad := f.unsettledUpTo(r, rev)
						if err != nil || len(bad) > 0 {
							mu.Lock()
							waitFailures = append(waitFailures, fmt.Sprintf("%s after wait(%d): %v %v", r.name, rev, err, bad))
							mu.Unlock()
						}
					}
				}
			}
		})
	}
	wg.Wait()
	assert.Empty(t, waitFailures)
	for _, r := range f.recs {
		r.faults.Clear("")
	}
	f.waitAll()
	// The random failures' retries: wait until only the refusals fail.
	o53Wait(t, "retries to clear", func() (bool, <-chan struct{}) {
		objs, watch := f.table.AllWatch(f.db.ReadTxn())
		for o := range objs {
			for _, r := range f.recs {
				if st := r.status(o); st.Kind == status.KindError && !st.Terminal {
					return false, watch
				}
			}
		}
		return true, watch
	})

	txn := f.db.ReadTxn()
	for _, r := range f.recs {
		state := r.ops.target.State()
		for o := range f.table.All(txn) {
			st := r.status(o)
			refused := r.ops.refuse != nil && r.ops.refuse(o.ID)
			switch {
			case refused:
				assert.Equal(t, status.KindError, st.Kind, "%s of %s", r.name, o.ID)
				assert.Equal(t, fmt.Sprintf("%s refuses %s", r.name, o.ID), st.Error, "%s of %s: the error is its own", r.name, o.ID)
				assert.True(t, st.Terminal)
			default:
				assert.Equal(t, status.KindDone, st.Kind, "%s of %s: %s", r.name, o.ID, st)
				assert.Equal(t, o.Value, state[o.ID], "%s: Done but the target holds another value of %s", r.name, o.ID)
			}
		}
		for k := range state {
			_, _, ok := f.table.Get(txn, o53ID.Query(k))
			assert.True(t, ok, "%s's target holds deleted %s", r.name, k)
		}
	}
}

// WaitUntilReconciled of each reconciler returns only once its statuses are
// in the table, also when another reconciler of the table is slow.
func TestOutsider53WaitReturnsOnlyOnceStatusesAreInTheTable(t *testing.T) {
	f := newO53(t, newOps("a", "b", "c"), reconciler.WithConcurrency(3))
	c := f.recs[2]
	require.NoError(t, c.faults.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay, Duration: 30 * time.Millisecond}))
	for round := range 30 {
		kv := []string{}
		for i := range 5 {
			kv = append(kv, fmt.Sprintf("k%d", (round*5+i)%17), fmt.Sprintf("r%d", round))
		}
		rev := f.upsert(kv...)
		for _, r := range f.recs {
			ctx, cancel := context.WithTimeout(context.Background(), o53Timeout)
			_, _, err := r.rec.WaitUntilReconciled(ctx, rev)
			cancel()
			require.NoError(t, err)
			// No other writer: every object is at most rev as the user
			// wrote it, so none may be Pending for r, whoever wrote last.
			require.Empty(t, f.unsettledUpTo(r, ^statedb.Revision(0)), "%s: Pending in the table after WaitUntilReconciled(%d) returned", r.name, rev)
		}
	}
}

// Health and metrics stay per reconciler: one failing is Degraded with its
// errors counted; the others stay OK with none.
func TestOutsider53HealthAndMetricsArePerReconciler(t *testing.T) {
	f := newO53(t, newOps("a", "b", "c"))
	b := f.recs[1]
	require.NoError(t, b.faults.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Key: "bad"}))
	f.upsert("ok1", "1", "bad", "2", "ok2", "3")

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		lvl, msg := f.healthOf("b")
		assert.Equal(c, cell.StatusDegraded, lvl, msg)
		assert.Contains(c, msg, "bad")
		for _, n := range []string{"a", "c"} {
			lvl, msg := f.healthOf(n)
			assert.Equal(c, cell.StatusOK, lvl, "%s: %s", n, msg)
			assert.Contains(c, msg, "OK, 3 object(s)", n)
		}
	}, o53Timeout, 5*time.Millisecond)

	key := func(n string) string { return metrics.Key(f.module, n) }
	errs := func(n string) int64 {
		v := f.metrics.ReconciliationTotalErrorsVar.Get(key(n))
		if v == nil {
			return 0
		}
		i, err := strconv.ParseInt(v.String(), 10, 64)
		require.NoError(t, err)
		return i
	}
	assert.Positive(t, errs("b"))
	assert.Zero(t, errs("a"))
	assert.Zero(t, errs("c"))
	for _, n := range []string{"a", "c"} {
		v := f.metrics.ConvergenceCountVar.Get(key(n))
		require.NotNil(t, v, "convergence count of %s", n)
		assert.Equal(t, "3", v.String(), "objects %s brought to Done: its own, not the table's", n)
	}
	if v := f.metrics.ConvergenceCountVar.Get(key("b")); v != nil {
		assert.Equal(t, "2", v.String(), "objects b brought to Done")
	}

	b.faults.Clear("")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		lvl, msg := f.healthOf("b")
		assert.Equal(c, cell.StatusOK, lvl, msg)
	}, o53Timeout, 5*time.Millisecond)
	f.waitAll()
}

// Stopping the hive while one reconciler holds an operation, changes while
// stopped, one paused while the others run: nothing hangs, nothing is lost.
func TestOutsider53StopStartAndPauseLoseNothing(t *testing.T) {
	f := newO53(t, newOps("a", "b", "c"))
	a, b, c := f.recs[0], f.recs[1], f.recs[2]
	f.upsert("x", "1", "y", "1")
	f.waitAll()

	// c holds an Update of x as the hive stops.
	require.NoError(t, c.faults.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay, Key: "x"}))
	f.upsert("x", "2", "z", "1")
	o53Wait(t, "c to hold x", func() (bool, <-chan struct{}) {
		in, ch := c.faults.InFlightWatch()
		return len(in) > 0, ch
	})
	// a and b settle theirs meanwhile.
	for _, r := range []*o53Rec{a, b} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _, err := r.rec.WaitUntilReconciled(ctx, f.table.Revision(f.db.ReadTxn()))
		cancel()
		require.NoError(t, err, r.name)
	}
	f.stop()
	c.faults.Clear("")
	f.upsert("x", "3", "w", "1")
	f.remove("y")
	f.start()
	f.waitAll()
	for _, r := range f.recs {
		assert.Empty(t, r.ops.target.Diff(f.db.ReadTxn(), f.table), r.name)
		assert.Empty(t, f.unsettledUpTo(r, f.table.Revision(f.db.ReadTxn())), r.name)
	}

	// b paused: a and c go on, b's statuses stay Pending, then converge.
	b.rec.Pause()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, msg := f.healthOf("b")
		assert.Contains(c, msg, "Paused")
	}, o53Timeout, 5*time.Millisecond)
	rev := f.upsert("p1", "1", "p2", "1", "x", "4")
	for _, r := range []*o53Rec{a, c} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _, err := r.rec.WaitUntilReconciled(ctx, rev)
		cancel()
		require.NoError(t, err, r.name)
		assert.Empty(t, f.unsettledUpTo(r, rev), r.name)
	}
	for _, k := range []string{"p1", "p2", "x"} {
		o := f.get(k)
		assert.Equal(t, status.KindPending, b.status(o).Kind, "paused b's status of %s", k)
		assert.Equal(t, status.KindDone, a.status(o).Kind, "a's status of %s", k)
	}
	_, ok, _ := b.ops.target.Get("p1")
	assert.False(t, ok, "paused b applied p1")
	for _, n := range []string{"a", "c"} {
		lvl, msg := f.healthOf(n)
		assert.Equal(t, cell.StatusOK, lvl, n)
		assert.NotContains(t, msg, "Paused", "%s's health while b is paused", n)
	}
	b.rec.Resume()
	f.waitAll()
	for _, r := range f.recs {
		assert.Empty(t, r.ops.target.Diff(f.db.ReadTxn(), f.table), r.name)
		failed := 0
		for _, c := range r.faults.Calls() {
			if c.Err != nil {
				failed++
			}
		}
		t.Logf("%s: %d calls, %d failed", r.name, len(r.faults.Calls()), failed)
	}
	t.Logf("table revision %d", f.table.Revision(f.db.ReadTxn()))
}

// Update may modify its object; with several reconcilers the doc says the
// changes are stored only for the first in the write, as when they wrote in
// turn. What must hold: every status Done, the object's desired fields
// untouched, and the Tag one reconciler's (not lost to a status write of
// the others, not a mix), and no reconciler applies the object again
// because of it.
func TestOutsider53UpdatesChangesStoredForOneOfTheWrite(t *testing.T) {
	ops := newOps("a", "b", "c")
	for _, o := range ops {
		o.tag = true
	}
	f := newO53(t, ops)
	var keys []string
	for i := range 20 {
		keys = append(keys, "k"+strconv.Itoa(i), "v")
	}
	f.upsert(keys...)
	f.waitAll()
	for i := range 20 {
		o := f.get("k" + strconv.Itoa(i))
		assert.Equal(t, "v", o.Value)
		assert.Contains(t, f.names, o.Tag, "k%d: Update's change to its object was lost", i)
		for _, r := range f.recs {
			assert.Equal(t, status.KindDone, r.status(o).Kind, "%s of k%d", r.name, i)
		}
	}
	for _, r := range f.recs {
		n := 0
		for _, call := range r.faults.Calls() {
			if call.Op == reconcilertest.OpUpdate {
				n++
			}
		}
		assert.Equal(t, 20, n, "%s: updates; a stored Tag must not make anyone apply again", r.name)
	}
}

// A user's write between an operation's read and the status write wins:
// the result for the older version is never written over the newer one.
func TestOutsider53NoStatusForAnOlderVersion(t *testing.T) {
	f := newO53(t, newOps("a", "b"))
	a, b := f.recs[0], f.recs[1]
	release1, entered1 := b.ops.gate("v1")
	release2, entered2 := b.ops.gate("v2")
	defer release1()
	defer release2()

	f.upsert("x", "v1")
	o53Recv(t, entered1, "b's Update of v1")
	rev := f.upsert("x", "v2")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, _, err := a.rec.WaitUntilReconciled(ctx, rev)
	cancel()
	require.NoError(t, err)
	release1()
	o53Recv(t, entered2, "b's Update of v2")
	// b's Update of v1 returned and b went on to v2: its Done for v1 must
	// not be on v2.
	o := f.get("x")
	assert.Equal(t, "v2", o.Value)
	assert.Equal(t, status.KindPending, b.status(o).Kind, "b's status of x=v2 while b applies v2 (target %v)", b.ops.target.State())
	assert.Equal(t, status.KindDone, a.status(o).Kind)
	release2()
	f.waitAll()
	assert.Equal(t, status.KindDone, b.status(f.get("x")).Kind)
	assert.Empty(t, b.ops.target.Diff(f.db.ReadTxn(), f.table))
}

// Both reconcilers hold their Update of v1 and are released together, so
// that their results go into one write: a user's v2 written meanwhile gets
// neither's Done.
func TestOutsider53NoStatusForAnOlderVersionWrittenTogether(t *testing.T) {
	f := newO53(t, newOps("a", "b", "c"))
	var rel1, rel2 []func()
	var ent1, ent2 []<-chan struct{}
	for _, r := range f.recs {
		r1, e1 := r.ops.gate("v1")
		r2, e2 := r.ops.gate("v2")
		rel1, rel2, ent1, ent2 = append(rel1, r1), append(rel2, r2), append(ent1, e1), append(ent2, e2)
		defer r1()
		defer r2()
	}
	f.upsert("x", "v1", "other", "o")
	for i, e := range ent1 {
		o53Recv(t, e, f.names[i]+"'s Update of v1")
	}
	f.upsert("x", "v2")
	for _, r := range rel1 {
		r()
	}
	for i, e := range ent2 {
		o53Recv(t, e, f.names[i]+"'s Update of v2")
	}
	o := f.get("x")
	for _, r := range f.recs {
		assert.Equal(t, status.KindPending, r.status(o).Kind, "%s's status of x=v2 while it applies v2", r.name)
		assert.Equal(t, status.KindDone, r.status(f.get("other")).Kind, "%s of other", r.name)
	}
	for _, r := range rel2 {
		r()
	}
	f.waitAll()
	for _, r := range f.recs {
		assert.Equal(t, status.KindDone, r.status(f.get("x")).Kind)
		assert.Empty(t, r.ops.target.Diff(f.db.ReadTxn(), f.table), r.name)
	}
}

// An object deleted (or deleted and written again) while a reconciler
// applies it must not come back with that reconciler's status: the status
// write is a compare-and-swap, not an insert.
func TestOutsider53StatusWriteNeverResurrectsADeletedObject(t *testing.T) {
	for _, again := range []bool{false, true} {
		t.Run(fmt.Sprintf("written-again=%v", again), func(t *testing.T) {
			f := newO53(t, newOps("a", "b"))
			a, b := f.recs[0], f.recs[1]
			release, entered := b.ops.gate("v1")
			defer release()
			f.upsert("x", "v1", "y", "1")
			o53Recv(t, entered, "b's Update of v1")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, _, err := a.rec.WaitUntilReconciled(ctx, f.table.Revision(f.db.ReadTxn()))
			cancel()
			require.NoError(t, err)
			f.remove("x")
			var release2 func()
			var entered2 <-chan struct{}
			if again {
				release2, entered2 = b.ops.gate("v1")
				defer release2()
				f.upsert("x", "v1")
			}
			release()
			if again {
				o53Recv(t, entered2, "b's Update of x written again")
				o := f.get("x")
				assert.Equal(t, status.KindPending, b.status(o).Kind, "b's old Done landed on the new x")
				release2()
			}
			f.waitAll()
			_, _, found := f.table.Get(f.db.ReadTxn(), o53ID.Query("x"))
			assert.Equal(t, again, found, "x in the table")
			for _, r := range f.recs {
				assert.Empty(t, r.ops.target.Diff(f.db.ReadTxn(), f.table), r.name)
				assert.Empty(t, f.unsettledUpTo(r, f.table.Revision(f.db.ReadTxn())), r.name)
			}
		})
	}
}

// Writers keep writing while the hive is stopped and started again and one
// reconciler is paused and resumed, with random failures and one reconciler
// refreshing: every name converges on its own target.
func TestOutsider53ChurnAcrossStopsPausesAndRefreshes(t *testing.T) {
	ops := newOps("a", "b", "c")
	ops[2].opts = []reconciler.Option{reconciler.WithRefreshing(20*time.Millisecond, nil)}
	f := newO53(t, ops, reconciler.WithConcurrency(2))
	for i, r := range f.recs[:2] {
		require.NoError(t, r.faults.Inject(reconcilertest.Fault{
			Mode: reconcilertest.ModeError, Probability: 0.2, Seed: uint64(i + 7), Op: reconcilertest.OpUpdate}))
	}
	require.NoError(t, f.recs[1].faults.Inject(reconcilertest.Fault{
		Mode: reconcilertest.ModeDelay, Duration: 2 * time.Millisecond, Probability: 0.5, Seed: 3}))

	writersDone := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 49))
			for i := range 400 {
				k := "k" + strconv.Itoa(rng.IntN(10))
				if rng.IntN(4) == 0 {
					f.remove(k)
				} else {
					f.upsert(k, fmt.Sprintf("w%d-%d", w, i))
				}
				if i%10 == 0 {
					// Let the reconcilers take some of it.
					ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
					_, _, _ = f.recs[0].rec.WaitUntilReconciled(ctx, f.table.Revision(f.db.ReadTxn()))
					cancel()
				}
			}
		})
	}
	go func() { wg.Wait(); close(writersDone) }()
	cycles := 0
	for done := false; !done || cycles < 3; cycles++ {
		select {
		case <-writersDone:
			done = true
		default:
		}
		f.recs[1].rec.Pause()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, _, err := f.recs[0].rec.WaitUntilReconciled(ctx, f.table.Revision(f.db.ReadTxn()))
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			require.NoError(t, err)
		}
		f.recs[1].rec.Resume()
		ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, _, err = f.recs[1].rec.WaitUntilReconciled(ctx, f.table.Revision(f.db.ReadTxn()))
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			require.NoError(t, err)
		}
		f.stop()
		f.upsert("stopped", strconv.Itoa(cycles))
		f.start()
	}
	<-writersDone
	t.Logf("%d stop/start cycles", cycles)
	for _, r := range f.recs {
		r.faults.Clear("")
	}
	f.waitAll()
	o53Wait(t, "every status Done", func() (bool, <-chan struct{}) {
		objs, watch := f.table.AllWatch(f.db.ReadTxn())
		for o := range objs {
			for _, r := range f.recs {
				if st := r.status(o); st.Kind != status.KindDone && st.Kind != status.KindRefreshing {
					return false, watch
				}
			}
		}
		return true, watch
	})
	for _, r := range f.recs {
		assert.Empty(t, r.ops.target.Diff(f.db.ReadTxn(), f.table), r.name)
		failed := 0
		for _, c := range r.faults.Calls() {
			if c.Err != nil {
				failed++
			}
		}
		t.Logf("%s: %d calls, %d failed", r.name, len(r.faults.Calls()), failed)
	}
	t.Logf("table revision %d", f.table.Revision(f.db.ReadTxn()))
}

// Two reconcilers release results for different versions at once: a's for
// the current version is written, b's for the older one is not, and b goes
// on to the current one.
func TestOutsider53ResultsForDifferentVersionsAtOnce(t *testing.T) {
	f := newO53(t, newOps("a", "b"))
	a, b := f.recs[0], f.recs[1]
	relB1, entB1 := b.ops.gate("v1")
	defer relB1()
	f.upsert("x", "v1")
	o53Recv(t, entB1, "b's Update of v1")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, _, err := a.rec.WaitUntilReconciled(ctx, f.table.Revision(f.db.ReadTxn()))
	cancel()
	require.NoError(t, err)
	relA2, entA2 := a.ops.gate("v2")
	relB2, entB2 := b.ops.gate("v2")
	defer relA2()
	defer relB2()
	rev := f.upsert("x", "v2")
	o53Recv(t, entA2, "a's Update of v2")
	relA2()
	relB1()
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	_, _, err = a.rec.WaitUntilReconciled(ctx, rev)
	cancel()
	require.NoError(t, err)
	o53Recv(t, entB2, "b's Update of v2")
	o := f.get("x")
	assert.Equal(t, status.KindDone, a.status(o).Kind, "a's status of v2")
	assert.Equal(t, status.KindPending, b.status(o).Kind, "b's status of v2 while it applies it")
	relB2()
	f.waitAll()
	for _, r := range f.recs {
		assert.Equal(t, status.KindDone, r.status(f.get("x")).Kind, r.name)
		assert.Empty(t, r.ops.target.Diff(f.db.ReadTxn(), f.table), r.name)
	}
}

// A peer whose every Update takes a little longer than the 10 ms the
// committer waits: the documented cost is one wait of 10 ms at most per
// slow operation, so a's write-and-wait stays far below a second each.
func TestOutsider53SteadilySlowPeerCostsAtMostAShortWait(t *testing.T) {
	f := newO53(t, newOps("a", "b"))
	a, b := f.recs[0], f.recs[1]
	require.NoError(t, b.faults.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay, Duration: 15 * time.Millisecond}))
	var total, worst time.Duration
	const n = 60
	for i := range n {
		rev := f.upsert("k"+strconv.Itoa(i%7), strconv.Itoa(i))
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _, err := a.rec.WaitUntilReconciled(ctx, rev)
		cancel()
		require.NoError(t, err)
		d := time.Since(start)
		total += d
		worst = max(worst, d)
	}
	t.Logf("a's write-and-wait with b at 15ms per Update: mean %v, worst %v", total/n, worst)
	assert.Less(t, worst, 2*time.Second)
	b.faults.Clear("")
	f.waitAll()
	for _, r := range f.recs {
		assert.Empty(t, r.ops.target.Diff(f.db.ReadTxn(), f.table), r.name)
	}
}

// A reconciler registered once the hive runs joins a table whose objects
// the others already settled, and writes with them while one of them is
// blocked: it reconciles every object, and nobody's status is lost.
func TestOutsider53LateReconcilerJoinsTheTable(t *testing.T) {
	f := newO53(t, newOps("a", "b"))
	var kv []string
	for i := range 15 {
		kv = append(kv, "k"+strconv.Itoa(i), "v")
	}
	f.upsert(kv...)
	f.waitAll()
	b := f.recs[1]
	require.NoError(t, b.faults.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay, Key: "k0"}))
	f.upsert("k0", "v2")
	o53Wait(t, "b to hold k0", func() (bool, <-chan struct{}) {
		in, ch := b.faults.InFlightWatch()
		return len(in) > 0, ch
	})
	late := newOps("c")[0]
	require.NoError(t, f.register(late))
	f.names = append(f.names, "c")
	c := f.recs[2]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, _, err := c.rec.WaitUntilReconciled(ctx, f.table.Revision(f.db.ReadTxn()))
	cancel()
	require.NoError(t, err)
	assert.Empty(t, f.unsettledUpTo(c, f.table.Revision(f.db.ReadTxn())), "c")
	txn := f.db.ReadTxn()
	for o := range f.table.All(txn) {
		assert.Equal(t, status.KindDone, f.recs[0].status(o).Kind, "a of %s", o.ID)
		if o.ID != "k0" {
			assert.Equal(t, status.KindDone, b.status(o).Kind, "b of %s", o.ID)
		}
	}
	b.faults.Clear("")
	f.waitAll()
	for _, r := range f.recs {
		assert.Empty(t, r.ops.target.Diff(f.db.ReadTxn(), f.table), r.name)
		assert.Empty(t, f.unsettledUpTo(r, f.table.Revision(f.db.ReadTxn())), r.name)
	}
}

// Large rounds, so that the group's write is merged by several goroutines,
// with a user rewriting objects meanwhile, some failures and Update
// tagging its object: every name ends Done on the latest version, its
// target equal to the table.
func TestOutsider53LargeRoundsWithUserWritesMeanwhile(t *testing.T) {
	ops := newOps("a", "b", "c", "d")
	ops[1].tag = true
	f := newO53(t, ops)
	require.NoError(t, f.recs[2].faults.Inject(reconcilertest.Fault{
		Mode: reconcilertest.ModeError, Probability: 0.05, Seed: 5, Op: reconcilertest.OpUpdate}))
	const n = 3000
	for round := range 4 {
		var kv []string
		for i := range n {
			kv = append(kv, "k"+strconv.Itoa(i), strconv.Itoa(round))
		}
		f.upsert(kv...)
		// Rewrite a few while the round's write is under way.
		for i := 0; i < n; i += 97 {
			f.upsert("k"+strconv.Itoa(i), fmt.Sprintf("%d-again", round))
		}
		if round == 2 {
			var del []string
			for i := 0; i < n; i += 13 {
				del = append(del, "k"+strconv.Itoa(i))
			}
			f.remove(del...)
		}
	}
	f.recs[2].faults.Clear("")
	f.waitAll()
	o53Wait(t, "every status Done", func() (bool, <-chan struct{}) {
		objs, watch := f.table.AllWatch(f.db.ReadTxn())
		for o := range objs {
			for _, r := range f.recs {
				if r.status(o).Kind != status.KindDone {
					return false, watch
				}
			}
		}
		return true, watch
	})
	txn := f.db.ReadTxn()
	for _, r := range f.recs {
		assert.Empty(t, r.ops.target.Diff(txn, f.table), r.name)
	}
	// Only b tags: as documented, its changes are stored only when it is
	// the first in the write (as upstream, where a later writer's status
	// goes on the object as the first wrote it), so some are lost for good.
	tagged, objs := 0, 0
	for o := range f.table.All(txn) {
		objs++
		if o.Tag == "b" {
			tagged++
		} else {
			assert.Empty(t, o.Tag, o.ID)
		}
	}
	t.Logf("b's Tag stored on %d of %d objects", tagged, objs)
}

// The same with large rounds, which the group's write merges on several
// goroutines and whose members go on before it commits: each wait still
// returns only once its statuses can be read.
func TestOutsider53WaitAfterLargeRoundsFindsTheStatuses(t *testing.T) {
	f := newO53(t, newOps("a", "b", "c"))
	for round := range 6 {
		var kv []string
		for i := range 1500 {
			kv = append(kv, "k"+strconv.Itoa(i), strconv.Itoa(round))
		}
		rev := f.upsert(kv...)
		for _, r := range f.recs {
			ctx, cancel := context.WithTimeout(context.Background(), o53Timeout)
			_, _, err := r.rec.WaitUntilReconciled(ctx, rev)
			cancel()
			require.NoError(t, err)
			bad := f.unsettledUpTo(r, ^statedb.Revision(0)) // no other writer
			require.Empty(t, bad, "%s: %d objects not settled after WaitUntilReconciled(%d) returned", r.name, len(bad), rev)
		}
	}
}

// A group write that finds one merged object changed by a user (so that it
// writes every object with its own compare-and-swap) must still leave each
// reconciler's Error as its own: b's failure on x keeps its backoff rather
// than being read back as an Error written by someone else and retried at
// once.
func TestOutsider53ErrorInAWriteWithAChangedObjectKeepsItsBackoff(t *testing.T) {
	ops := newOps("a", "b")
	ops[1].opts = []reconciler.Option{reconciler.WithRetry(time.Hour, time.Hour)}
	f := newO53(t, ops)
	a, b := f.recs[0], f.recs[1]
	require.NoError(t, b.faults.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Key: "x"}))
	relA, entA := a.ops.gate("y1")
	relB, entB := b.ops.gate("y1")
	defer relA()
	defer relB()
	f.upsert("x", "x1", "y", "y1")
	o53Recv(t, entA, "a's Update of y1")
	o53Recv(t, entB, "b's Update of y1")
	f.upsert("y", "y2")
	relA()
	relB()
	f.waitAll()
	// Something else for b to read past x's write.
	rev := f.upsert("z", "z1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, _, err := b.rec.WaitUntilReconciled(ctx, rev)
	cancel()
	require.NoError(t, err)
	var xs []string
	for _, c := range b.faults.Calls() {
		if c.Key == "x" {
			xs = append(xs, c.String())
		}
	}
	assert.Len(t, xs, 1, "b's attempts on x with an hour's backoff: %v", xs)
	st := b.status(f.get("x"))
	assert.Equal(t, status.KindError, st.Kind)
	assert.Equal(t, status.KindDone, a.status(f.get("x")).Kind)
}

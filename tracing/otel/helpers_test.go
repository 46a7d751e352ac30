package convergeotel_test

import (
	"context"
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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	convergeindex "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
	convergeotel "github.com/converge-go/converge/tracing/otel"
)

type item struct {
	ID     string
	Value  string
	Status status.Status
}

func (it *item) clone() *item                    { c := *it; return &c }
func (it *item) getStatus() status.Status        { return it.Status }
func (it *item) setStatus(s status.Status) *item { it.Status = s; return it }
func (it *item) TableHeader() []string           { return []string{"ID", "Value", "Status"} }
func (it *item) TableRow() []string              { return []string{it.ID, it.Value, it.Status.String()} }
func itemKey(it *item) string                    { return it.ID }
func itemValue(it *item) string                  { return it.Value }

var itemID = statedb.Index[*item, string]{
	Name:       "id",
	FromObject: func(it *item) index.KeySet { return index.NewKeySet(index.String(it.ID)) },
	FromKey:    index.String,
	FromString: index.FromString,
	Unique:     true,
}

// recorder is a span processor that records the spans ended, like
// tracetest.SpanRecorder, and lets a test wait for one.
type recorder struct {
	rec     tracetest.SpanRecorder
	mu      sync.Mutex
	changed chan struct{} // closed and replaced when a span ends
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{})} }

func (r *recorder) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) { r.rec.OnStart(ctx, s) }
func (r *recorder) Shutdown(ctx context.Context) error                    { return r.rec.Shutdown(ctx) }
func (r *recorder) ForceFlush(ctx context.Context) error                  { return r.rec.ForceFlush(ctx) }

func (r *recorder) OnEnd(s sdktrace.ReadOnlySpan) {
	r.rec.OnEnd(s)
	r.mu.Lock()
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// ended returns the spans ended so far and a channel closed when another
// ends.
func (r *recorder) ended() ([]sdktrace.ReadOnlySpan, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rec.Ended(), r.changed
}

// waitFor waits up to 10 seconds for the spans ended to satisfy cond, and
// returns them; it fails the test if they do not.
func (r *recorder) waitFor(t testing.TB, what string, cond func([]sdktrace.ReadOnlySpan) bool) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		spans, changed := r.ended()
		if cond(spans) {
			return spans
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("no %s among the %d spans ended:\n%s", what, len(spans), describe(spans))
		}
	}
}

// waitSpan waits for a span named name whose attributes include want, and
// returns the first.
func (r *recorder) waitSpan(t testing.TB, name string, want ...attribute.KeyValue) sdktrace.ReadOnlySpan {
	t.Helper()
	var found sdktrace.ReadOnlySpan
	r.waitFor(t, describeWant(name, want), func(spans []sdktrace.ReadOnlySpan) bool {
		found = first(spans, name, want...)
		return found != nil
	})
	return found
}

// first returns the first of spans named name whose attributes include
// want, or nil.
func first(spans []sdktrace.ReadOnlySpan, name string, want ...attribute.KeyValue) sdktrace.ReadOnlySpan {
	for s := range matching(spans, name, want...) {
		return s
	}
	return nil
}

// matching yields the spans named name whose attributes include want.
func matching(spans []sdktrace.ReadOnlySpan, name string, want ...attribute.KeyValue) iter.Seq[sdktrace.ReadOnlySpan] {
	return func(yield func(sdktrace.ReadOnlySpan) bool) {
		for _, s := range spans {
			if s.Name() != name {
				continue
			}
			got := attrs(s)
			ok := true
			for _, w := range want {
				if v, has := got[w.Key]; !has || v != w.Value {
					ok = false
					break
				}
			}
			if ok && !yield(s) {
				return
			}
		}
	}
}

// attrs returns a span's attributes by key.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// sum adds up the integer attribute key over the spans named name.
func sum(spans []sdktrace.ReadOnlySpan, name string, key attribute.Key) int64 {
	var n int64
	for s := range matching(spans, name) {
		n += attrs(s)[key].AsInt64()
	}
	return n
}

func describeWant(name string, want []attribute.KeyValue) string {
	s := name
	for _, kv := range want {
		s += " " + string(kv.Key) + "=" + kv.Value.String()
	}
	return s
}

func describe(spans []sdktrace.ReadOnlySpan) string {
	var s string
	for _, sp := range spans {
		line := "  " + sp.Name() + " " + sp.SpanContext().SpanID().String() + " parent=" + sp.Parent().SpanID().String()
		for _, kv := range sp.Attributes() {
			line += " " + string(kv.Key) + "=" + kv.Value.String()
		}
		s += line + " status=" + sp.Status().Code.String() + "\n"
	}
	return s
}

// assertChildOf checks that child is a child of parent, in its trace.
func assertChildOf(t testing.TB, child, parent sdktrace.ReadOnlySpan) {
	t.Helper()
	assert.Equal(t, parent.SpanContext().TraceID(), child.SpanContext().TraceID(), "%s in the trace of %s", child.Name(), parent.Name())
	assert.Equal(t, parent.SpanContext().SpanID(), child.Parent().SpanID(), "%s a child of %s", child.Name(), parent.Name())
}

// userOps are a user's operations: each starts a span of its own, named
// "user." and the operation, with the context it is given, and calls the
// FaultyOps within it.
type userOps struct {
	tracer trace.Tracer
	ops    *reconcilertest.FaultyOps[*item]
}

func (u userOps) Update(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, obj *item) error {
	ctx, span := u.tracer.Start(ctx, "user.update")
	defer span.End()
	return u.ops.Update(ctx, txn, rev, obj)
}

func (u userOps) Delete(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, obj *item) error {
	ctx, span := u.tracer.Start(ctx, "user.delete")
	defer span.End()
	return u.ops.Delete(ctx, txn, rev, obj)
}

func (u userOps) Prune(ctx context.Context, txn statedb.ReadTxn, objects iter.Seq2[*item, statedb.Revision]) error {
	ctx, span := u.tracer.Start(ctx, "user.prune")
	defer span.End()
	return u.ops.Prune(ctx, txn, objects)
}

func (u userOps) UpdateBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	ctx, span := u.tracer.Start(ctx, "user.update_batch")
	defer span.End()
	u.ops.UpdateBatch(ctx, txn, batch)
}

func (u userOps) DeleteBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	ctx, span := u.tracer.Start(ctx, "user.delete_batch")
	defer span.End()
	u.ops.DeleteBatch(ctx, txn, batch)
}

// fixture is a running hive with the items table and its reconciler,
// named "r" in module "test", traced by a convergeotel.Tracer into spans.
type fixture struct {
	db          *statedb.DB
	table       statedb.RWTable[*item]
	statusIndex statedb.Index[*item, status.Kind]
	rec         reconciler.Reconciler[*item]
	target      *reconcilertest.Target[*item]
	faults      *reconcilertest.FaultyOps[*item]
	spans       *recorder
}

// start starts a fixture whose operations are userOps over a FaultyOps
// over a Target, batch operations too if batch is set, with opts after
// WithName("r"), WithTracer, WithPruning(0) and a retry backoff of 1ms to
// 2ms. The hive stops when the test ends.
func start(t testing.TB, batch bool, opts ...reconciler.Option) *fixture {
	f := &fixture{spans: newRecorder(), target: reconcilertest.NewTarget(itemKey, itemValue)}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(f.spans))
	t.Cleanup(func() { assert.NoError(t, tp.Shutdown(context.Background())) })
	var batchOps reconciler.BatchOperations[*item]
	if batch {
		batchOps = f.target
	}
	f.faults = reconcilertest.NewFaultyOps(itemKey, f.target, batchOps)
	user := userOps{tracer: tp.Tracer("user"), ops: f.faults}
	batchOps = nil
	if batch {
		batchOps = user
	}
	opts = append([]reconciler.Option{
		reconciler.WithName("r"),
		reconciler.WithTracer(convergeotel.New(tp)),
		reconciler.WithPruning(0),
		reconciler.WithRetry(time.Millisecond, 2*time.Millisecond),
	}, opts...)
	f.db, f.table, f.statusIndex, f.rec = startHive(t, user, batchOps, opts...)
	return f
}

// startHive starts a hive with the items table and its reconciler, in
// module "test", with ops, batch (which may be nil) and opts. The hive
// stops when the test ends. It logs warnings to the test's log, and a
// benchmark's nowhere.
func startHive(t testing.TB, ops reconciler.Operations[*item], batch reconciler.BatchOperations[*item], opts ...reconciler.Option) (
	*statedb.DB, statedb.RWTable[*item], statedb.Index[*item, status.Kind], reconciler.Reconciler[*item],
) {
	var (
		db    *statedb.DB
		table statedb.RWTable[*item]
		rec   reconciler.Reconciler[*item]
	)
	statusIndex := convergeindex.NewStatusIndex((*item).getStatus)
	h := hive.New(
		statedb.Cell,
		job.Cell,
		cell.Provide(cell.NewSimpleHealth),
		cell.Module("test", "Test module",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(p reconciler.Params) error {
				var err error
				db = p.DB
				if table, err = statedb.NewTable(p.DB, "items", itemID, statusIndex); err != nil {
					return err
				}
				rec, err = reconciler.Register(p, table, (*item).clone, (*item).setStatus, (*item).getStatus, ops, batch, opts...)
				return err
			}),
		),
	)
	log := slog.New(slog.DiscardHandler)
	if _, ok := t.(*testing.T); ok {
		log = hivetest.Logger(t, hivetest.LogLevel(slog.LevelWarn))
	}
	require.NoError(t, h.Start(log, context.Background()))
	t.Cleanup(func() { assert.NoError(t, h.Stop(log, context.Background())) })
	return db, table, statusIndex, rec
}

// insert inserts Pending objects of the given IDs in one transaction and
// returns its revision.
func (f *fixture) insert(t testing.TB, ids ...string) statedb.Revision {
	t.Helper()
	wtxn := f.db.WriteTxn(f.table)
	for _, id := range ids {
		_, _, err := f.table.Insert(wtxn, &item{ID: id, Value: "v", Status: status.Pending()})
		require.NoError(t, err)
	}
	rev := f.table.Revision(wtxn)
	wtxn.Commit()
	return rev
}

// delete deletes the objects of the given IDs in one transaction and
// returns its revision.
func (f *fixture) delete(t testing.TB, ids ...string) statedb.Revision {
	t.Helper()
	wtxn := f.db.WriteTxn(f.table)
	for _, id := range ids {
		_, _, err := f.table.Delete(wtxn, &item{ID: id})
		require.NoError(t, err)
	}
	rev := f.table.Revision(wtxn)
	wtxn.Commit()
	return rev
}

// reconciled waits until everything written up to the table's revision
// now has been handed to the operations and its outcome recorded.
func (f *fixture) reconciled(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err := f.rec.WaitUntilReconciled(ctx, f.table.Revision(f.db.ReadTxn()))
	require.NoError(t, err)
}

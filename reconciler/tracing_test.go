package reconciler_test

import (
	"context"
	"fmt"
	"iter"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tracing"
)

// spanRecorder is a tracing.Tracer that records the spans started and
// how they ended, and puts each span in the context it returns.
type spanRecorder struct {
	mu    sync.Mutex
	spans []*recordedSpan
}

type recordedSpan struct {
	rec    *spanRecorder
	start  tracing.Start
	parent *recordedSpan // the span in the context Start was given
	ends   int
	end    tracing.End
}

type spanKey struct{}

func (r *spanRecorder) Start(ctx context.Context, s tracing.Start) (context.Context, tracing.Span) {
	parent, _ := ctx.Value(spanKey{}).(*recordedSpan)
	sp := &recordedSpan{rec: r, start: s, parent: parent}
	r.mu.Lock()
	r.spans = append(r.spans, sp)
	r.mu.Unlock()
	return context.WithValue(ctx, spanKey{}, sp), sp
}

func (s *recordedSpan) End(e tracing.End) {
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	s.ends++
	s.end = e
}

// snapshot returns copies of the spans recorded.
func (r *spanRecorder) snapshot() []recordedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]recordedSpan, len(r.spans))
	for i, s := range r.spans {
		out[i] = *s
	}
	return out
}

// spanOf returns the span in an operation's context.
func spanOf(ctx context.Context) *recordedSpan {
	s, _ := ctx.Value(spanKey{}).(*recordedSpan)
	return s
}

// tracedOps checks that each operation's context carries its span, and
// signals entered when an operation on key slow starts.
type tracedOps struct {
	*reconcilertest.FaultyOps[*item]
	t       *testing.T
	slow    string
	entered chan struct{}
	once    sync.Once
}

func (o *tracedOps) check(ctx context.Context, kind tracing.Kind, key string) {
	s := spanOf(ctx)
	if s == nil {
		o.t.Errorf("%s of %q: no span in its context", kind, key)
		return
	}
	if s.start.Kind != kind || (key != "" && s.start.Key != key) {
		o.t.Errorf("%s of %q: the span in its context is a %s of %q", kind, key, s.start.Kind, s.start.Key)
	}
	if s.start.Module != "test" || s.start.Name != "traced" {
		o.t.Errorf("%s of %q: span of module %q, name %q", kind, key, s.start.Module, s.start.Name)
	}
	if key == o.slow {
		o.once.Do(func() { close(o.entered) })
	}
}

func (o *tracedOps) Update(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, it *item) error {
	o.check(ctx, tracing.Update, it.ID)
	if s := spanOf(ctx); s != nil && s.start.Revision != rev {
		o.t.Errorf("update of %s: span of revision %d, operation of %d", it.ID, s.start.Revision, rev)
	}
	return o.FaultyOps.Update(ctx, txn, rev, it)
}

func (o *tracedOps) Delete(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, it *item) error {
	o.check(ctx, tracing.Delete, it.ID)
	return o.FaultyOps.Delete(ctx, txn, rev, it)
}

func (o *tracedOps) Prune(ctx context.Context, txn statedb.ReadTxn, objs iter.Seq2[*item, statedb.Revision]) error {
	o.check(ctx, tracing.Prune, "")
	if s := spanOf(ctx); s != nil && (s.parent == nil || s.parent.start.Kind != tracing.Round) {
		o.t.Errorf("prune: its span is not a child of a round's")
	}
	return o.FaultyOps.Prune(ctx, txn, objs)
}

func (o *tracedOps) batch(ctx context.Context, kind tracing.Kind, batch []reconciler.BatchEntry[*item]) {
	o.check(ctx, kind, "")
	if s := spanOf(ctx); s != nil && s.start.Objects != len(batch) {
		o.t.Errorf("%s of %d entries: span of %d", kind, len(batch), s.start.Objects)
	}
	for _, e := range batch {
		if e.Object.ID == o.slow {
			o.once.Do(func() { close(o.entered) })
		}
	}
}

func (o *tracedOps) UpdateBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	o.batch(ctx, tracing.UpdateBatch, batch)
	o.FaultyOps.UpdateBatch(ctx, txn, batch)
}

func (o *tracedOps) DeleteBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	o.batch(ctx, tracing.DeleteBatch, batch)
	o.FaultyOps.DeleteBatch(ctx, txn, batch)
}

// With a tracer, every operation, batch call and prune runs with its span
// in its context, of the right kind, key and revision, a prune's under its
// round's; every span started is ended exactly once, also those of the
// operations a stop cuts short and the rounds and refresh sweeps under
// way; a failure's span has its outcome and error, its retry's attempt 2.
func TestTracerSpans(t *testing.T) {
	for _, v := range variants {
		t.Run(v.String(), func(t *testing.T) {
			tgt := reconcilertest.NewTarget(itemKey, itemValue)
			var batch reconciler.BatchOperations[*item]
			if v.batch {
				batch = tgt
			}
			ops := &tracedOps{FaultyOps: reconcilertest.NewFaultyOps(itemKey, tgt, batch), t: t, slow: "slow", entered: make(chan struct{})}
			w := &with{}
			if v.batch {
				w.batch = ops
			}
			rec := &spanRecorder{}
			f := newFixture(t, ops, w, reconciler.WithName("traced"), reconciler.WithTracer(rec),
				reconciler.WithConcurrency(v.workers), reconciler.WithPruning(0),
				reconciler.WithRetry(time.Millisecond, 2*time.Millisecond),
				reconciler.WithRefreshing(time.Hour, nil)) // one sweep, at the start
			f.start()

			require.NoError(t, ops.Inject(reconcilertest.Fault{Mode: reconcilertest.ModePanic, Key: "panics", Next: 1}))
			require.NoError(t, ops.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Key: "fails", Next: 1}))
			objs := append(items("obj", 40, "v"), &item{ID: "panics", Value: "v"}, &item{ID: "fails", Value: "v"})
			f.waitReconciledTo(f.upsert(objs...))
			f.waitReconciledTo(f.remove("obj-00003", "obj-00007"))
			require.NoError(t, ops.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Op: reconcilertest.OpPrune, Next: 1}))
			f.rec.Prune()
			waitUntil(t, "a prune that failed, then one that succeeded", func() (bool, <-chan struct{}) {
				calls, changed := ops.CallsWatch()
				failed, ok := 0, 0
				for _, c := range calls {
					if c.Op == reconcilertest.OpPrune && c.Err != nil {
						failed++
					} else if c.Op == reconcilertest.OpPrune && failed > 0 {
						ok++
					}
				}
				return ok > 0, changed
			})

			// An operation under way when the hive stops.
			require.NoError(t, ops.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay, Key: "slow"}))
			f.upsert(&item{ID: "slow", Value: "v"})
			recv(t, ops.entered, "the slow operation to start")
			f.stop()

			spans := rec.snapshot()
			kinds := map[tracing.Kind]int{}
			for _, s := range spans {
				kinds[s.start.Kind]++
				assert.Equal(t, 1, s.ends, "%s of %q ended once", s.start.Kind, s.start.Key)
				if s.start.Kind != tracing.Prune {
					assert.Nil(t, s.parent, "a %s span has no parent", s.start.Kind)
				}
			}
			t.Logf("spans by kind: %v", kinds)
			for _, k := range []tracing.Kind{tracing.Round, tracing.Prune, tracing.Refresh} {
				assert.Positive(t, kinds[k], "%s spans", k)
			}
			if v.batch {
				assert.Positive(t, kinds[tracing.UpdateBatch])
				assert.Positive(t, kinds[tracing.DeleteBatch])
				assert.Zero(t, kinds[tracing.Update]+kinds[tracing.Delete])
			} else {
				assert.Positive(t, kinds[tracing.Update])
				assert.Equal(t, 2, kinds[tracing.Delete])
				assert.Zero(t, kinds[tracing.UpdateBatch]+kinds[tracing.DeleteBatch])
				assert.Equal(t, []string{"1 panic", "2 success"}, attempts(spans, "panics"))
				assert.Equal(t, []string{"1 error", "2 success"}, attempts(spans, "fails"))
				slow := attempts(spans, "slow")
				require.Len(t, slow, 1)
				assert.Equal(t, "1 error", slow[0], "cut short by the stop")
			}
			var pruneOutcomes []string
			for _, s := range spans {
				if s.start.Kind == tracing.Prune {
					pruneOutcomes = append(pruneOutcomes, s.end.Outcome.String())
					assert.Equal(t, s.end.Outcome != metrics.OutcomeSuccess, s.end.Err != nil)
				}
			}
			assert.Equal(t, []string{"error", "success"}, pruneOutcomes)
		})
	}
}

// attempts returns, for the spans of operations on key, the attempt and
// outcome of each, checking that an error comes with a failure.
func attempts(spans []recordedSpan, key string) []string {
	var out []string
	for _, s := range spans {
		if s.start.Key == key && s.ends > 0 {
			out = append(out, fmt.Sprintf("%d %s", s.start.Attempt, s.end.Outcome))
			if (s.end.Err != nil) != (s.end.Outcome != metrics.OutcomeSuccess) {
				out = append(out, "error "+strings.TrimSpace(fmt.Sprint(s.end.Err))+" with outcome "+s.end.Outcome.String())
			}
		}
	}
	return out
}

// waitReconciledTo waits until the changes up to rev are handled and
// every object is Done.
func (f *fixture) waitReconciledTo(rev statedb.Revision) {
	f.t.Helper()
	f.waitTable("every object Done", func(txn statedb.ReadTxn) bool {
		return f.countKind(txn, status.KindDone) == f.table.NumObjects(txn)
	})
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, low, err := f.rec.WaitUntilReconciled(ctx, max(rev, f.table.Revision(f.db.ReadTxn())))
	require.NoError(f.t, err)
	require.Zero(f.t, low, "no retry left")
}

package convergeotel_test

import (
	"context"
	"iter"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tracing"
	convergeotel "github.com/converge-go/converge/tracing/otel"
)

// nopOps succeed at everything at once.
type nopOps struct{}

func (nopOps) Update(context.Context, statedb.ReadTxn, statedb.Revision, *item) error { return nil }
func (nopOps) Delete(context.Context, statedb.ReadTxn, statedb.Revision, *item) error { return nil }
func (nopOps) Prune(context.Context, statedb.ReadTxn, iter.Seq2[*item, statedb.Revision]) error {
	return nil
}
func (nopOps) UpdateBatch(context.Context, statedb.ReadTxn, []reconciler.BatchEntry[*item]) {}
func (nopOps) DeleteBatch(context.Context, statedb.ReadTxn, []reconciler.BatchEntry[*item]) {}

// nopExporter drops the spans it is given.
type nopExporter struct{}

func (nopExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (nopExporter) Shutdown(context.Context) error                             { return nil }

// newSDKProvider returns the OpenTelemetry SDK's TracerProvider as a
// program would set it up, sampling every span unless opts say otherwise,
// with a batch span processor (blocking, so that none is dropped) in front of an exporter
// that drops them. It is shut down when the benchmark ends.
func newSDKProvider(b *testing.B, opts ...sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	tp := sdktrace.NewTracerProvider(append(opts, sdktrace.WithSpanProcessor(
		sdktrace.NewBatchSpanProcessor(nopExporter{}, sdktrace.WithBlocking())))...)
	b.Cleanup(func() { require.NoError(b, tp.Shutdown(context.Background())) })
	return tp
}

// BenchmarkReconcile is what tracing costs per object reconciled: a
// running reconciler (inline, no-op operations, one at a time or in
// batches) reconciles 1000 objects written in one transaction, per
// iteration, without a tracer (off) and with a Tracer on the SDK (sdk).
// Compare ns/object and B/object of off and sdk; allocations are the whole
// program's, the reconciler's goroutines and the SDK's included.
func BenchmarkReconcile(b *testing.B) {
	const n = 1000
	for _, batch := range []bool{false, true} {
		for _, traced := range []bool{false, true} {
			name := map[bool]string{false: "single", true: "batch"}[batch] + "/" + map[bool]string{false: "off", true: "sdk"}[traced]
			b.Run(name, func(b *testing.B) {
				opts := []reconciler.Option{reconciler.WithPruning(0)}
				if traced {
					opts = append(opts, reconciler.WithTracer(convergeotel.New(newSDKProvider(b))))
				}
				var batchOps reconciler.BatchOperations[*item]
				if batch {
					batchOps = nopOps{}
				}
				db, table, _, rec := startHive(b, nopOps{}, batchOps, opts...)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				objs := make([]*item, n)
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					b.StopTimer()
					value := strconv.Itoa(i)
					for j := range objs {
						objs[j] = &item{ID: strconv.Itoa(j), Value: value, Status: status.Pending()}
					}
					wtxn := db.WriteTxn(table)
					for _, o := range objs {
						if _, _, err := table.Insert(wtxn, o); err != nil {
							b.Fatal(err)
						}
					}
					rev := table.Revision(wtxn)
					b.StartTimer()
					wtxn.Commit()
					if _, _, err := rec.WaitUntilReconciled(ctx, rev); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				perObject(b, n)
			})
		}
	}
}

// BenchmarkSpan is the cost of one span of an Update, started and ended,
// with the SDK as in BenchmarkReconcile: what tracing adds to each object
// reconciled one at a time. adapter is through a Tracer; unsampled the
// same with a sampler that drops every span (a 1% sampler costs about this
// on 99 spans of 100); sdk is the span of adapter made with the SDK
// directly, the floor.
func BenchmarkSpan(b *testing.B) {
	ctx := context.Background()
	s := tracing.Start{Kind: tracing.Update, Module: "agent.routes", Name: "ipv4", Key: "10.0.0.0/8", Revision: 42, Attempt: 1}
	for _, sampled := range []bool{true, false} {
		b.Run(map[bool]string{true: "adapter", false: "unsampled"}[sampled], func(b *testing.B) {
			tp := newSDKProvider(b)
			if !sampled {
				tp = newSDKProvider(b, sdktrace.WithSampler(sdktrace.NeverSample()))
			}
			tr := convergeotel.New(tp)
			b.ReportAllocs()
			for b.Loop() {
				_, span := tr.Start(ctx, s)
				span.End(tracing.End{Outcome: metrics.OutcomeSuccess})
			}
		})
	}
	b.Run("sdk", func(b *testing.B) {
		tr := newSDKProvider(b).Tracer(convergeotel.ScopeName)
		b.ReportAllocs()
		for b.Loop() {
			_, span := tr.Start(ctx, "converge.update", trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
				attribute.String("converge.module", "agent.routes"), attribute.String("converge.reconciler", "ipv4"),
				attribute.String("converge.key", "10.0.0.0/8"), attribute.Int64("converge.revision", 42), attribute.Int("converge.attempt", 1)))
			span.SetAttributes(attribute.String("converge.outcome", "success"))
			span.End()
		}
	})
}

// perObject reports the time of an iteration per object. (Its bytes and
// allocations per object are B/op and allocs/op divided by n.)
func perObject(b *testing.B, n int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/object")
}

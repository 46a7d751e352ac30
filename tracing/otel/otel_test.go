package convergeotel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/tracing"
	convergeotel "github.com/converge-go/converge/tracing/otel"
)

// newProvider returns a TracerProvider recording the spans ended, shut
// down when the test ends.
func newProvider(t *testing.T, opts ...sdktrace.TracerProviderOption) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(append(opts, sdktrace.WithSpanProcessor(rec))...)
	t.Cleanup(func() { assert.NoError(t, tp.Shutdown(context.Background())) })
	return tp, rec
}

// Each kind of span gets its name and exactly its attributes.
func TestSpanNamesAndAttributes(t *testing.T) {
	errBoom := errors.New("boom")
	for _, tc := range []struct {
		start  tracing.Start
		end    tracing.End
		name   string
		attrs  map[string]any
		status codes.Code
	}{
		{
			start: tracing.Start{Kind: tracing.Round},
			end:   tracing.End{Collected: 5, Committed: 4, Failed: 1},
			name:  "converge.round",
			attrs: map[string]any{"converge.round.collected": 5, "converge.round.committed": 4, "converge.round.failed": 1},
		},
		{
			start: tracing.Start{Kind: tracing.Update, Key: "10.0.0.0/8", Revision: 7, Attempt: 3},
			end:   tracing.End{Outcome: metrics.OutcomeSuccess},
			name:  "converge.update",
			attrs: map[string]any{"converge.key": "10.0.0.0/8", "converge.revision": 7, "converge.attempt": 3, "converge.outcome": "success"},
		},
		{
			start:  tracing.Start{Kind: tracing.Delete, Key: "k", Revision: 9, Attempt: 1},
			end:    tracing.End{Outcome: metrics.OutcomeTimeout, Err: errBoom},
			name:   "converge.delete",
			attrs:  map[string]any{"converge.key": "k", "converge.revision": 9, "converge.attempt": 1, "converge.outcome": "timeout", "error.type": "timeout"},
			status: codes.Error,
		},
		{
			start: tracing.Start{Kind: tracing.UpdateBatch, Objects: 10},
			end:   tracing.End{Outcome: metrics.OutcomeSuccess, Failed: 2},
			name:  "converge.update_batch",
			attrs: map[string]any{"converge.batch.size": 10, "converge.batch.failed": 2, "converge.outcome": "success"},
		},
		{
			start:  tracing.Start{Kind: tracing.DeleteBatch, Objects: 3},
			end:    tracing.End{Outcome: metrics.OutcomePanic, Err: errBoom, Failed: 3},
			name:   "converge.delete_batch",
			attrs:  map[string]any{"converge.batch.size": 3, "converge.batch.failed": 3, "converge.outcome": "panic", "error.type": "panic"},
			status: codes.Error,
		},
		{
			start: tracing.Start{Kind: tracing.ProcessBatch, Objects: 5, Deletes: 2},
			end:   tracing.End{Outcome: metrics.OutcomeSuccess, Failed: 1},
			name:  "converge.process_batch",
			attrs: map[string]any{"converge.batch.size": 5, "converge.batch.deletes": 2, "converge.batch.failed": 1, "converge.outcome": "success"},
		},
		{
			// ProcessBatch returned an error: the call failed.
			start:  tracing.Start{Kind: tracing.ProcessBatch, Objects: 4},
			end:    tracing.End{Outcome: metrics.OutcomeError, Err: errBoom, Failed: 4},
			name:   "converge.process_batch",
			attrs:  map[string]any{"converge.batch.size": 4, "converge.batch.deletes": 0, "converge.batch.failed": 4, "converge.outcome": "error", "error.type": "error"},
			status: codes.Error,
		},
		{
			start:  tracing.Start{Kind: tracing.Prune},
			end:    tracing.End{Outcome: metrics.OutcomeTerminal, Err: errBoom, Repaired: 2},
			name:   "converge.prune",
			attrs:  map[string]any{"converge.prune.repaired": 2, "converge.outcome": "terminal", "error.type": "terminal"},
			status: codes.Error,
		},
		{
			start: tracing.Start{Kind: tracing.Refresh},
			end:   tracing.End{Marked: 12},
			name:  "converge.refresh",
			attrs: map[string]any{"converge.refresh.marked": 12},
		},
		{
			// A sweep has no outcome: its error is of the class "error".
			start:  tracing.Start{Kind: tracing.Refresh},
			end:    tracing.End{Err: errBoom},
			name:   "converge.refresh",
			attrs:  map[string]any{"converge.refresh.marked": 0, "error.type": "error"},
			status: codes.Error,
		},
		{
			// A kind package tracing may add later is traced too.
			start: tracing.Start{Kind: 200},
			name:  "converge.unknown",
			attrs: map[string]any{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, rec := newProvider(t)
			tc.start.Module, tc.start.Name = "agent.routes", "ipv4"
			_, span := convergeotel.New(tp).Start(context.Background(), tc.start)
			assert.Empty(t, rec.Ended())
			span.End(tc.end)
			require.Len(t, rec.Ended(), 1)
			s := rec.Ended()[0]
			assert.Equal(t, tc.name, s.Name())
			assert.Equal(t, trace.SpanKindInternal, s.SpanKind())
			want := map[string]string{"converge.module": "agent.routes", "converge.reconciler": "ipv4"}
			for k, v := range tc.attrs {
				want[k] = fmt.Sprint(v)
			}
			got := map[string]string{}
			for _, kv := range s.Attributes() {
				got[string(kv.Key)] = kv.Value.String()
			}
			assert.Equal(t, want, got)
			assert.Equal(t, tc.status, s.Status().Code)
			if tc.status == codes.Error {
				assert.Equal(t, "boom", s.Status().Description)
				require.Len(t, s.Events(), 1)
				assert.Equal(t, "exception", s.Events()[0].Name)
				assert.Contains(t, s.Events()[0].Attributes, attribute.String("exception.message", "boom"))
			} else {
				assert.Empty(t, s.Events())
			}
		})
	}
}

// The context Start returns carries the span, so that spans started with
// it are its children; a span in the context given is the parent.
func TestStartContextCarriesTheSpan(t *testing.T) {
	tp, rec := newProvider(t)
	ctx, parent := tp.Tracer("user").Start(context.Background(), "user.parent")
	ctx, span := convergeotel.New(tp).Start(ctx, tracing.Start{Kind: tracing.Prune})
	_, child := tp.Tracer("user").Start(ctx, "user.child")
	child.End()
	span.End(tracing.End{})
	parent.End()
	spans := rec.Ended()
	require.Len(t, spans, 3)
	assertChildOf(t, spans[0], spans[1])
	assertChildOf(t, spans[1], spans[2])
}

// A span given Start.Time (a round's, started once the round has done
// something) begins then; without it, when Start is called.
func TestStartTime(t *testing.T) {
	tp, rec := newProvider(t)
	tr := convergeotel.New(tp)
	began := time.Now().Add(-time.Second).Round(0)
	_, round := tr.Start(context.Background(), tracing.Start{Kind: tracing.Round, Time: began})
	round.End(tracing.End{Collected: 1, Committed: 1})
	before := time.Now()
	_, update := tr.Start(context.Background(), tracing.Start{Kind: tracing.Update, Key: "k"})
	update.End(tracing.End{})
	spans := rec.Ended()
	require.Len(t, spans, 2)
	assert.True(t, spans[0].StartTime().Equal(began), "round began %s, want %s", spans[0].StartTime(), began)
	assert.False(t, spans[1].StartTime().Before(before), "update began %s, before Start was called at %s", spans[1].StartTime(), before)
}

// WithKinds traces those kinds only; the others return the context given.
func TestWithKinds(t *testing.T) {
	tp, rec := newProvider(t)
	tr := convergeotel.New(tp, convergeotel.WithKinds(tracing.Update, tracing.Prune))
	ctx := context.Background()
	for _, k := range []tracing.Kind{tracing.Round, tracing.Update, tracing.Delete, tracing.UpdateBatch, tracing.DeleteBatch, tracing.Prune, tracing.Refresh} {
		got, span := tr.Start(ctx, tracing.Start{Kind: k})
		if k == tracing.Update || k == tracing.Prune {
			assert.True(t, trace.SpanContextFromContext(got).IsValid(), "%s traced", k)
		} else {
			assert.Equal(t, ctx, got, "%s not traced", k)
		}
		span.End(tracing.End{Err: errors.New("x")})
	}
	var names []string
	for _, s := range rec.Ended() {
		names = append(names, s.Name())
	}
	assert.Equal(t, []string{"converge.update", "converge.prune"}, names)

	// WithKinds() traces nothing; a later WithKinds replaces an earlier.
	_, span := convergeotel.New(tp, convergeotel.WithKinds()).Start(ctx, tracing.Start{Kind: tracing.Update})
	span.End(tracing.End{})
	_, span = convergeotel.New(tp, convergeotel.WithKinds(tracing.Round), convergeotel.WithKinds(tracing.Refresh), nil).Start(ctx, tracing.Start{Kind: tracing.Refresh})
	span.End(tracing.End{})
	require.Len(t, rec.Ended(), 3)
	assert.Equal(t, "converge.refresh", rec.Ended()[2].Name())
}

// A span the sampler drops is not recorded, but its context still goes to
// the operation, so that the operation's spans are dropped too.
func TestSampledOut(t *testing.T) {
	tp, rec := newProvider(t, sdktrace.WithSampler(sdktrace.NeverSample()))
	ctx, span := convergeotel.New(tp).Start(context.Background(), tracing.Start{Kind: tracing.Update, Key: "a"})
	sc := trace.SpanContextFromContext(ctx)
	assert.True(t, sc.IsValid())
	assert.False(t, sc.IsSampled())
	span.End(tracing.End{Outcome: metrics.OutcomeError, Err: errors.New("x")})
	assert.Empty(t, rec.Ended())
}

// A nil TracerProvider is the global one, and so is a zero Tracer's. (That
// the global one forwards to one set after New is OpenTelemetry's to test:
// it does so once per process.) A nil *Tracer traces nothing.
func TestNilProviderIsTheGlobalOne(t *testing.T) {
	prev := otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	tp, rec := newProvider(t)
	otel.SetTracerProvider(tp)
	for i, tr := range []*convergeotel.Tracer{convergeotel.New(nil), {}} {
		_, span := tr.Start(context.Background(), tracing.Start{Kind: tracing.Round})
		span.End(tracing.End{})
		require.Len(t, rec.Ended(), i+1)
		assert.Equal(t, "converge.round", rec.Ended()[i].Name())
		assert.Equal(t, convergeotel.ScopeName, rec.Ended()[i].InstrumentationScope().Name)
	}

	var none *convergeotel.Tracer
	ctx := context.Background()
	got, span := none.Start(ctx, tracing.Start{Kind: tracing.Update})
	span.End(tracing.End{Err: errors.New("x")})
	assert.Equal(t, ctx, got)
	assert.Len(t, rec.Ended(), 2)
}

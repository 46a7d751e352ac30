package convergeotel

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/tracing"
)

// ScopeName is the instrumentation scope of the spans: the name of the
// trace.Tracer that New asks the TracerProvider for.
const ScopeName = "github.com/converge-go/converge/tracing/otel"

// The attributes of the spans; the package documentation says which span
// has which.
const (
	moduleKey     = attribute.Key("converge.module")
	reconcilerKey = attribute.Key("converge.reconciler")
	keyKey        = attribute.Key("converge.key")
	revisionKey   = attribute.Key("converge.revision")
	attemptKey    = attribute.Key("converge.attempt")
	outcomeKey    = attribute.Key("converge.outcome")

	batchSizeKey    = attribute.Key("converge.batch.size")
	batchFailedKey  = attribute.Key("converge.batch.failed")
	batchDeletesKey = attribute.Key("converge.batch.deletes")

	roundCollectedKey = attribute.Key("converge.round.collected")
	roundCommittedKey = attribute.Key("converge.round.committed")
	roundFailedKey    = attribute.Key("converge.round.failed")

	refreshMarkedKey = attribute.Key("converge.refresh.marked")
	pruneRepairedKey = attribute.Key("converge.prune.repaired")

	// errorTypeKey is OpenTelemetry's semantic convention for the class of
	// a failure (error.type).
	errorTypeKey = attribute.Key("error.type")
)

// spanNames are the names of the spans, by tracing.Kind.
var spanNames = [...]string{
	tracing.Round:        "converge.round",
	tracing.Update:       "converge.update",
	tracing.Delete:       "converge.delete",
	tracing.UpdateBatch:  "converge.update_batch",
	tracing.DeleteBatch:  "converge.delete_batch",
	tracing.Prune:        "converge.prune",
	tracing.Refresh:      "converge.refresh",
	tracing.ProcessBatch: "converge.process_batch",
}

// Tracer reports the spans of reconcilers to an OpenTelemetry
// TracerProvider. It implements tracing.Tracer: give it to reconcilers with
// reconciler.WithTracer. One Tracer serves any number of reconcilers. Make
// one with New; the zero Tracer reports every kind to the global
// TracerProvider, as New(nil) does, and a nil *Tracer traces nothing. It
// is safe for concurrent use.
type Tracer struct {
	tracer trace.Tracer // nil: the global TracerProvider's
	only   *kindSet     // the kinds traced; nil: all
}

// kindSet is a set of tracing.Kind.
type kindSet [256 / 64]uint64

func (s *kindSet) add(k tracing.Kind)      { s[k/64] |= 1 << (k % 64) }
func (s *kindSet) has(k tracing.Kind) bool { return s[k/64]&(1<<(k%64)) != 0 }

// Option configures a Tracer.
type Option func(*options)

type options struct {
	only *kindSet
}

// WithKinds traces only the spans of the given kinds, tracing.Round and
// tracing.Update for instance. The others are not started and cost
// nothing; what they would have covered gets the context they were given,
// so that a prune traced without rounds has no parent. By default every
// kind is traced. A later WithKinds replaces an earlier one.
func WithKinds(kinds ...tracing.Kind) Option {
	return func(o *options) {
		o.only = new(kindSet)
		for _, k := range kinds {
			o.only.add(k)
		}
	}
}

// New returns a Tracer that starts its spans with tp's tracer of
// instrumentation scope ScopeName. A nil tp stands for the global
// TracerProvider, otel.GetTracerProvider(), which forwards to one set
// later with otel.SetTracerProvider.
func New(tp trace.TracerProvider, opts ...Option) *Tracer {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Tracer{tracer: tp.Tracer(ScopeName), only: o.only}
}

// Start implements tracing.Tracer: it starts a span of kind internal,
// named after s.Kind, with the attributes known at the start, as a child
// of the span in ctx if there is one, begun at s.Time if it is set.
func (t *Tracer) Start(ctx context.Context, s tracing.Start) (context.Context, tracing.Span) {
	if t == nil || (t.only != nil && !t.only.has(s.Kind)) {
		return ctx, noSpan{}
	}
	tracer := t.tracer
	if tracer == nil {
		tracer = otel.Tracer(ScopeName)
	}
	attrs := make([]attribute.KeyValue, 2, 5)
	attrs[0], attrs[1] = moduleKey.String(s.Module), reconcilerKey.String(s.Name)
	switch s.Kind {
	case tracing.Update, tracing.Delete:
		attrs = append(attrs, keyKey.String(s.Key), revisionKey.Int64(int64(s.Revision)), attemptKey.Int(s.Attempt))
	case tracing.UpdateBatch, tracing.DeleteBatch:
		attrs = append(attrs, batchSizeKey.Int(s.Objects))
	case tracing.ProcessBatch:
		attrs = append(attrs, batchSizeKey.Int(s.Objects), batchDeletesKey.Int(s.Deletes))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...)}
	if !s.Time.IsZero() {
		opts = append(opts, trace.WithTimestamp(s.Time)) // a round's span, dated from the round's start
	}
	ctx, sp := tracer.Start(ctx, spanName(s.Kind), opts...)
	return ctx, &span{span: sp, kind: s.Kind}
}

// spanName returns the name of the spans of kind k; for a kind that
// package tracing added since, "converge." and its String.
func spanName(k tracing.Kind) string {
	if int(k) < len(spanNames) && spanNames[k] != "" {
		return spanNames[k]
	}
	return "converge." + k.String()
}

// span is a tracing.Span that ends an OpenTelemetry span.
type span struct {
	span trace.Span
	kind tracing.Kind
}

// End sets the attributes known at the end and, if e.Err is set, the
// status Error with its message, error.type and an exception event, and
// ends the span.
func (s *span) End(e tracing.End) {
	sp := s.span
	if !sp.IsRecording() {
		sp.End()
		return
	}
	outcome := e.Outcome.String()
	switch s.kind {
	case tracing.Round:
		sp.SetAttributes(roundCollectedKey.Int(e.Collected), roundCommittedKey.Int(e.Committed), roundFailedKey.Int(e.Failed))
		outcome = ""
	case tracing.Update, tracing.Delete:
		sp.SetAttributes(outcomeKey.String(outcome))
	case tracing.UpdateBatch, tracing.DeleteBatch, tracing.ProcessBatch:
		sp.SetAttributes(outcomeKey.String(outcome), batchFailedKey.Int(e.Failed))
	case tracing.Prune:
		sp.SetAttributes(outcomeKey.String(outcome), pruneRepairedKey.Int(e.Repaired))
	case tracing.Refresh:
		sp.SetAttributes(refreshMarkedKey.Int(e.Marked))
		outcome = ""
	}
	if e.Err != nil {
		failure := outcome
		if failure == "" || e.Outcome == metrics.OutcomeSuccess {
			failure = "error" // an error without an outcome saying which
		}
		sp.SetAttributes(errorTypeKey.String(failure))
		sp.RecordError(e.Err)
		sp.SetStatus(codes.Error, e.Err.Error())
	}
	sp.End()
}

// noSpan is the span of a kind not traced.
type noSpan struct{}

func (noSpan) End(tracing.End) {}

package main

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/cilium/hive/cell"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/converge-go/converge/tracing"
	convergeotel "github.com/converge-go/converge/tracing/otel"
)

// traces is the reconciler's tracer: with --trace-stdout, converge's
// OpenTelemetry adapter (tracing/otel) on the SDK, exporting each span as
// a line of JSON to standard output; without, none, and the reconciler
// traces nothing.
//
// The exporter writes nothing before the start succeeded, as it gets spans
// only from the reconciler, which starts last. Spans go to it in batches,
// at least every second, from a goroutine of the SDK's started with the
// hive: a reader of standard output that falls behind never holds the
// reconciler up, the spans it cannot take are dropped. The stop flushes
// what is left once the reconciler has stopped.
type traces struct {
	tracer tracing.Tracer // nil: off
}

// traceOutput is where --trace-stdout writes: run's standard output. A
// hive built without one (in tests) writes to os.Stdout.
type traceOutput struct{ io.Writer }

type tracesParams struct {
	cell.In

	Lifecycle cell.Lifecycle
	Config    config
	Output    traceOutput `optional:"true"`
}

// traceBatchTimeout is how long a span waits at most before it is written.
const traceBatchTimeout = time.Second

func newTraces(p tracesParams) (*traces, error) {
	if !p.Config.TraceStdout {
		return &traces{}, nil
	}
	w := p.Output.Writer
	if w == nil {
		w = os.Stdout
	}
	exp, err := stdouttrace.New(stdouttrace.WithWriter(w))
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(
		resource.NewSchemaless(attribute.String("service.name", "converge-example"))))
	p.Lifecycle.Append(cell.Hook{
		OnStart: func(cell.HookContext) error {
			tp.RegisterSpanProcessor(sdktrace.NewBatchSpanProcessor(exp, sdktrace.WithBatchTimeout(traceBatchTimeout)))
			return nil
		},
		OnStop: func(ctx cell.HookContext) error { return tp.Shutdown(context.Context(ctx)) },
	})
	return &traces{tracer: convergeotel.New(tp)}, nil
}

package convergeotel_test

import (
	"context"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/tracing"
	convergeotel "github.com/converge-go/converge/tracing/otel"
)

func ExampleNew() {
	// The program's TracerProvider, with its exporter: here one that keeps
	// the spans in memory, to print them; a program would export them with
	// OTLP, or to stdout with stdouttrace.
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())

	// One Tracer for every reconciler of the program: hand it to each with
	// reconciler.WithTracer.
	t := convergeotel.New(tp)
	_ = reconciler.WithTracer(t)

	// This is what a reconciler named "ipv4" in module agent.routes
	// reports as it retries an update. The context goes to Update: the
	// spans Update starts with it are children of this one.
	ctx, span := t.Start(context.Background(), tracing.Start{
		Kind: tracing.Update, Module: "agent.routes", Name: "ipv4",
		Key: "10.0.0.0/8", Revision: 42, Attempt: 2,
	})
	_ = ctx
	span.End(tracing.End{Outcome: metrics.OutcomeSuccess})

	for _, s := range exp.GetSpans() {
		fmt.Println(s.Name, s.SpanKind)
		for _, kv := range s.Attributes {
			fmt.Printf("  %s=%s\n", kv.Key, kv.Value.String())
		}
	}
	// Output:
	// converge.update internal
	//   converge.module=agent.routes
	//   converge.reconciler=ipv4
	//   converge.key=10.0.0.0/8
	//   converge.revision=42
	//   converge.attempt=2
	//   converge.outcome=success
}

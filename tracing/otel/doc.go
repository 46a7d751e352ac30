// Package convergeotel reports the spans of reconcilers to OpenTelemetry,
// with go.opentelemetry.io/otel.
//
// [New] returns a [Tracer] that implements tracing.Tracer; hand it to
// reconcilers with reconciler.WithTracer. One Tracer serves every
// reconciler of a program. Only this package imports OpenTelemetry: the
// core packages do not. It is a module of its own,
// github.com/converge-go/converge/tracing/otel, so that OpenTelemetry is in
// the module graph of the programs that import it and of no other. Its
// name is convergeotel rather than otel so that it can be imported beside
// go.opentelemetry.io/otel without renaming either.
//
// # Spans
//
// Every span is of kind internal, from the tracer of instrumentation scope
// [ScopeName], and has the attributes converge.module (the reconciler's
// hive module ID, "agent.routes") and converge.reconciler (its name, ""
// when it has none).
//
//	converge.round         one round of the reconcile loop that collected, committed or pruned
//	                       something (a round that did nothing makes no span)
//	                       converge.round.collected  operations collected: changes and retries
//	                       converge.round.committed  outcomes committed
//	                       converge.round.failed     those of them that are failures
//	converge.update        one call of Operations.Update
//	converge.delete        one call of Operations.Delete
//	                       converge.key       the object's primary key, as the retries table shows it
//	                       converge.revision  the object's revision in the table
//	                       converge.attempt   1 for the first attempt, 2 for the first retry, ...
//	                       converge.outcome   success, error, terminal, panic or timeout
//	converge.update_batch  one call of BatchOperations.UpdateBatch
//	converge.delete_batch  one call of BatchOperations.DeleteBatch
//	                       converge.batch.size    the entries given
//	                       converge.batch.failed  the entries whose result is an error
//	                       converge.outcome       of the call as a whole: success, panic, timeout,
//	                                              or error if a stop cut it short
//	converge.process_batch one call of BatchProcessor.ProcessBatch, a batch's deletes and updates
//	                       converge.batch.size     the entries given, deletes and updates
//	                       converge.batch.deletes  of those, the deletes
//	                       converge.batch.failed   as for the other batch calls
//	                       converge.outcome        as for the other batch calls, or error if
//	                                               ProcessBatch returned one
//	converge.prune         one call of Operations.Prune
//	                       converge.outcome          as for an update
//	                       converge.prune.repaired   drift repaired (reconciler.ReportRepaired)
//	converge.refresh       one refresh sweep, marking stale objects Refreshing
//	                       converge.refresh.marked   objects marked
//
// The key, revision, attempt and batch size are set when the span starts,
// where a sampler sees them; the others when it ends.
//
// A span whose operation failed (an error, a panic, a timeout) has the
// status Error with the error's message, the attribute error.type (the
// outcome: "error", "terminal", "panic" or "timeout"; "error" for a
// refresh sweep) and an exception event recording the error. A batch call
// that returned, whatever its entries' results, has no status (unless
// ProcessBatch returned an error): count the failed entries with
// converge.batch.failed.
//
// # Parents
//
// An operation's span is in the context given to Update, Delete,
// UpdateBatch, DeleteBatch, ProcessBatch and Prune, so the spans the operation starts
// with that context (a netlink call, an HTTP request) are its children.
// A prune's span is a child of the round that ran it, a round of its own
// that collects and commits nothing. A round, an
// operation and a refresh sweep each start a trace of their own: with
// workers an operation runs beside the rounds, often past the end of the
// round that collected it, so it is the root of its own trace, whether
// inline or not; a round says how many operations it collected and
// committed.
//
// # Cost
//
// A reconciler without a tracer (the default) calls nothing and allocates
// nothing for tracing. With this package and the OpenTelemetry SDK, each
// object reconciled costs one span; a round or a batch call costs one span
// for all the objects it covers. See docs/observability.md for figures, and
// [WithKinds] to trace some kinds only.
package convergeotel

// Package tracing defines the hook through which a reconciler reports
// spans: one per round that does something (collects, commits or prunes;
// a round that wakes and finds nothing to do makes none), per operation or
// batch call, per prune and per refresh sweep. Give an implementation to the reconciler with
// reconciler.WithTracer; the module tracing/otel implements it with
// OpenTelemetry, in a module of its own so that a program that does not
// trace does not depend on OpenTelemetry.
//
// Without a Tracer the reconciler calls nothing and allocates nothing for
// tracing.
package tracing

import (
	"context"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/metrics"
)

// Tracer starts the spans of a reconciler. Start returns the context that
// carries the span, which the reconciler passes on to what the span covers:
// an operation's span is in the context given to Update, Delete, the batch
// operations and Prune, so the spans they start are its children. The
// reconciler ends every span it starts, once, with End. Implementations
// must be safe for concurrent use: with workers, operations start on
// several goroutines at once.
type Tracer interface {
	Start(ctx context.Context, s Start) (context.Context, Span)
}

// Span is a span started by a Tracer.
type Span interface {
	End(e End)
}

// Kind is what a span covers.
type Kind uint8

const (
	Round        Kind = iota + 1 // one round of the reconcile loop that collected, committed or pruned
	Update                       // one call of Operations.Update
	Delete                       // one call of Operations.Delete
	UpdateBatch                  // one call of BatchOperations.UpdateBatch
	DeleteBatch                  // one call of BatchOperations.DeleteBatch
	Prune                        // one call of Operations.Prune
	Refresh                      // one refresh sweep, marking stale objects Refreshing
	ProcessBatch                 // one call of BatchProcessor.ProcessBatch: a batch's deletes and updates
)

var kindNames = [...]string{"", "round", "update", "delete", "update-batch", "delete-batch", "prune", "refresh", "process-batch"}

// String returns the kind's name: "round", "update", "delete",
// "update-batch", "delete-batch", "prune", "refresh" or "process-batch".
func (k Kind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return "unknown"
}

// Start describes a span as it starts.
type Start struct {
	Kind   Kind
	Module string // the hive module ID of the reconciler
	Name   string // the reconciler's name (WithName), empty if none

	// Update and Delete: the object's primary key as the retries table
	// shows it, its revision in the table, and the attempt (1 for the
	// first, 2 for the first retry, ...).
	Key      string
	Revision statedb.Revision
	Attempt  int

	// UpdateBatch, DeleteBatch and ProcessBatch: the number of entries;
	// ProcessBatch: also how many of them are deletes.
	Objects int
	Deletes int

	// Time is when the span began, if before the call of Start: a round's
	// span starts only once the round has done something (a round that
	// collects, commits and prunes nothing makes no span), dated from the
	// round's start. Zero for the other kinds: the span begins now.
	Time time.Time
}

// End describes how a span ended.
type End struct {
	// Outcome and Err are those of an operation, a batch call (a panic or
	// a timeout of the whole call, or the error ProcessBatch returned;
	// each entry's result is counted in Failed) or a prune. Err is nil on
	// success.
	Outcome metrics.Outcome
	Err     error

	// Round: the operations collected (changes and retries), the outcomes
	// committed, and how many of those failed. UpdateBatch, DeleteBatch,
	// ProcessBatch: Failed is the number of entries whose result is an
	// error.
	Collected, Committed, Failed int

	// Refresh: the objects marked Refreshing. Prune: the drift repaired
	// (see reconciler.ReportRepaired).
	Marked, Repaired int
}

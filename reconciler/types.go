package reconciler

import (
	"context"
	"iter"
	"log/slog"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler/internal/work"
	"github.com/converge-go/converge/tables"
)

// Reconciler is a registered reconciler. Its methods are safe for concurrent
// use.
type Reconciler[Obj any] interface {
	// Prune asks for a prune as soon as possible, whatever the prune
	// interval. It never blocks; calls made while a request is already
	// waiting are merged into it. The prune still happens only once the
	// table is initialized. Batch operations serving alone without a Prune
	// method (see [Register]) cannot prune: then it does nothing.
	Prune()

	// WaitUntilReconciled blocks until every change of the table up to and
	// including untilRevision has been handed to the operations and its
	// outcome recorded, or until ctx ends: work queued, running, carried
	// over a stop of the hive or deferred counts as not done. It returns
	// the revision reached and the lowest revision among objects that
	// failed and wait for (or are in) another attempt (zero if none), so a
	// caller can tell whether failures remain below its revision.
	//
	// Revisions are the table's own: the revision reached is at most the
	// table's revision (Table.Revision, the revision of its last change),
	// so a wait for a higher revision (one taken from another table's
	// write, or from the database as a whole) returns only once this table
	// has changed up to it, or when ctx ends. Wait for the table's
	// revision after your write, or for the revision a write returned.
	WaitUntilReconciled(ctx context.Context, untilRevision statedb.Revision) (revision statedb.Revision, retryLowWatermark statedb.Revision, err error)

	// Pause stops the reconciler from starting operations, prunes and
	// refresh sweeps until Resume. Once Pause has returned no operation
	// starts: not the rest of a round already collected, not work queued
	// for workers, not a newer version waiting behind an operation that
	// finishes; an operation whose start had been decided as Pause was
	// called may still begin as it returns. Operations already running
	// finish and their outcome is recorded. Changes to the table keep
	// accumulating, dependency triggers keep marking objects, and on Resume
	// every change made while paused converges: the latest version of each
	// object and every delete. Health and the reconcilers table say it is
	// paused. Pause does not block; pausing a paused reconciler does
	// nothing.
	Pause()

	// Resume undoes Pause. Resuming a running reconciler does nothing.
	Resume()

	// Configure changes settings of a running (or stopped) reconciler
	// without a restart: it takes [WithConcurrency], [WithRoundLimits],
	// [WithRefreshing], [WithPruning], [WithRetry] and [WithRetryJitter],
	// applied in order over the settings in force (Register's, and those
	// of earlier calls). Any other option, or a value [Register] would
	// refuse, makes it return an error wrapping [ErrInvalidConfig] and
	// change nothing. It does not block on operations: it returns once the
	// settings are accepted, and they apply before the next round begins
	// (a round already waiting on the old round limiter waits for it), or
	// when a stopped reconciler starts. Nothing is lost or done twice:
	// operations under way finish and their outcomes are committed, work
	// queued for workers keeps its place in the new executor, a retry
	// already timed keeps its time (the new backoff applies to failures
	// from then on; the circuit breaker's probes, which back off up to
	// the retry maximum, come within the new one from the next round,
	// the probe already timed included), round limits apply from the
	// next round, and new
	// refresh and prune intervals restart their timers: a refresh sweep
	// runs at once with the new interval, the next periodic prune comes
	// one new interval later (a prune already due or asked for still runs).
	Configure(opts ...Option) error

	// ConfirmPrune lets a held prune run once (see [WithPruneGuard]),
	// whatever the guard's bounds, as soon as possible: the prune is
	// planned again and Prune called even if the plan is over them. The
	// prune after it is guarded again, even if the confirmed one failed.
	// Without a held prune it does nothing: it does not approve prunes to
	// come. It never blocks.
	ConfirmPrune()
}

// Params holds what a reconciler needs from the hive. Take it as a
// constructor argument and pass it to [Register]. The job group is usually
// provided to the module with cell.Provide(job.Registry.NewGroup).
type Params struct {
	cell.In

	Log      *slog.Logger
	DB       *statedb.DB
	JobGroup job.Group
	ModuleID cell.FullModuleID

	// DefaultMetrics is used when [WithMetrics] is not given. If it is not
	// provided either, the reconciler keeps unpublished expvar metrics.
	DefaultMetrics metrics.Metrics `optional:"true"`

	// Tables, which tables.Cell provides, is what the reconciler writes its
	// row of the reconcilers table and the rows of its failing objects
	// with. Without it (nil, or a nil *tables.Tables) the reconciler
	// keeps none. A Writer's methods must not panic: they run on the
	// reconciler's goroutines, where nothing recovers them.
	Tables tables.Writer `optional:"true"`
}

// Operations applies objects to the target. Every method is given a context
// that ends when the reconciler stops (or the operation times out, see
// [WithOperationTimeout]) and a read transaction for looking up related
// state. Operations must be idempotent: an object may be applied again after
// a failure, a refresh or a restart.
//
// The method set is that of the StateDB reconciler's Operations, so an
// existing implementation satisfies it unchanged.
type Operations[Obj any] interface {
	// Update creates or updates obj in the target. obj is a clone made with
	// the clone function given to Register; Update may modify it, and with
	// a single reconciler per object the modifications are stored with the
	// Done status. revision is the object's revision in the table.
	Update(ctx context.Context, txn statedb.ReadTxn, revision statedb.Revision, obj Obj) error

	// Delete removes obj from the target. Deleting what does not exist is
	// not an error.
	Delete(ctx context.Context, txn statedb.ReadTxn, revision statedb.Revision, obj Obj) error

	// Prune removes from the target whatever is not in objects, the full
	// desired set: the table as of txn, read after the statuses of the
	// round before it were written. A failed prune is tried again after
	// the retry backoff (see [WithPruning]).
	Prune(ctx context.Context, txn statedb.ReadTxn, objects iter.Seq2[Obj, statedb.Revision]) error
}

// BatchEntry is one object of a batch operation. The operation reports the
// object's outcome by setting Result. Each entry carries what binds its
// Result to its object, so an implementation may reorder the slice it is
// given (sort it, group it); an entry it overwrites with one it made itself
// loses that binding, and its object is tried again.
type BatchEntry[Obj any] struct {
	Object   Obj
	Revision statedb.Revision
	Result   error

	// RecheckAfter, set by UpdateBatch (or ProcessBatch, on an upserted
	// entry) on an entry it applied, asks for the object to be reconciled
	// again once it has passed, as [RecheckAfter] does for Update. Zero
	// asks for nothing.
	RecheckAfter time.Duration

	original *work.Op[Obj] // the op this entry stands for
}

// BatchOperations applies many objects in one call, for targets where that
// is cheaper. When given to [Register] it is used for every update and
// delete, including retries, with the context and read transaction
// described for [Operations]. A batch never holds the same object twice.
// Deletes of a round are applied before its updates. Set each entry's
// Result; a nil Result is success. Entries bind to their objects as
// [BatchEntry] describes, so the slice may be reordered.
//
// Pruning still uses [Operations.Prune]. When Register is given no
// Operations, the batch operations serve alone: they must then also have a
// method Prune with the signature of [Operations.Prune], which pruning
// uses, unless pruning is off (WithPruning(0)).
//
// If the implementation also implements [BatchProcessor], the reconciler
// calls ProcessBatch instead of DeleteBatch and UpdateBatch. With workers
// (see [WithConcurrency]) several batches may run at once, on different
// objects.
type BatchOperations[Obj any] interface {
	UpdateBatch(ctx context.Context, txn statedb.ReadTxn, batch []BatchEntry[Obj])
	DeleteBatch(ctx context.Context, txn statedb.ReadTxn, batch []BatchEntry[Obj])
}

// BatchProcessor is an optional interface of [BatchOperations]: batch
// operations that implement it get the deletes and the updates of a batch
// in one call of ProcessBatch, in place of a DeleteBatch then an
// UpdateBatch, so that work done once per batch (waiting for the target to
// catch up, say) covers both. The reconciler checks for it once, in
// [Register].
//
// deleted and upserted are never both empty, and no object is in both, so
// the order in which ProcessBatch applies them is its own choice. Entries
// are set and bound as for the other batch calls: set each entry's
// Result, a nil Result being success; either slice may be reordered, and
// an entry overwritten with one made by the implementation loses its
// binding, so its object is tried again. An upserted entry's Object is a
// clone that ProcessBatch may modify, as UpdateBatch may.
//
// The error ProcessBatch returns is the outcome of every entry whose Result
// is nil, as if each had returned it (so it may be a [TerminalError] or a
// [RetryAfter]); those objects are tried again, through the batch, as any
// failed entry is. A nil error leaves the entries' Results as they are.
// A panic (recovered unless [WithoutPanicRecovery]) or the operation timeout
// ([WithOperationTimeout]) fails every entry without a Result, as for the
// other batch calls. With workers, ProcessBatch may be called concurrently
// on different objects.
//
// A call is one span of kind tracing.ProcessBatch, and one duration for
// [metrics.Metrics.ReconciliationDuration], reported as metrics.OpUpdate if
// the batch has updates and as metrics.OpDelete if it has only deletes.
type BatchProcessor[Obj any] interface {
	ProcessBatch(ctx context.Context, txn statedb.ReadTxn, deleted, upserted []BatchEntry[Obj]) error
}

// pruner is what prunes: Operations, or batch operations that serve alone
// and have Operations' Prune method.
type pruner[Obj any] interface {
	Prune(ctx context.Context, txn statedb.ReadTxn, objects iter.Seq2[Obj, statedb.Revision]) error
}

// TerminalError marks err as one that retrying cannot fix. From Update (or
// an UpdateBatch entry), the object is marked Error with err's text and is
// not retried until it changes. It is counted in the error metrics but,
// being settled, not in health. From Delete it makes no difference: a
// deleted object cannot change any more, and a delete must not be lost, so
// it is retried with backoff like any failure. Errors wrapping the returned
// error are recognised too. TerminalError(nil) is nil.
func TerminalError(err error) error { return work.Terminal(err) }

// IsTerminal reports whether err is or wraps an error made by [TerminalError].
func IsTerminal(err error) bool { return work.IsTerminal(err) }

// RetryAfter asks for the next attempt after d instead of after the backoff.
// d <= 0 means as soon as possible. The object is marked Error with err's
// text (or [ErrRetryRequested] if err is nil), and the backoff still grows as
// for any failure, so a later plain error backs off from where it was.
// Errors wrapping the returned error are recognised too.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = ErrRetryRequested
	}
	return work.RetryAfter(d, err)
}

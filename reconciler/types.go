package reconciler

import (
	"context"
	"iter"
	"log/slog"

	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/metrics"
)

// Reconciler is a registered reconciler. Its methods are safe for concurrent
// use.
type Reconciler[Obj any] interface {
	// Prune asks for a prune as soon as possible, whatever the prune
	// interval. It never blocks; calls made while a request is already
	// waiting are merged into it. The prune still happens only once the
	// table is initialized.
	Prune()

	// WaitUntilReconciled blocks until every change of the table up to and
	// including untilRevision has been handed to the operations and its
	// outcome recorded, or until ctx ends. It returns the revision reached
	// and the lowest revision among objects waiting for a retry (zero if
	// none), so a caller can tell whether failures remain below its revision.
	WaitUntilReconciled(ctx context.Context, untilRevision statedb.Revision) (revision statedb.Revision, retryLowWatermark statedb.Revision, err error)

	// Pause stops the reconciler from starting operations, prunes and
	// refresh sweeps until Resume. Operations already running finish and
	// their outcome is recorded. Changes to the table keep accumulating,
	// dependency triggers keep marking objects, and on Resume every change
	// made while paused converges: the latest version of each object and
	// every delete. Health and the reconcilers table say it is paused.
	// Pause does not block; pausing a paused reconciler does nothing.
	Pause()

	// Resume undoes Pause. Resuming a running reconciler does nothing.
	Resume()
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

	// Tables, provided by [TablesCell], are where the reconciler keeps its
	// row of the reconcilers table and the rows of its failing objects.
	// Without them it keeps none.
	Tables *Tables `optional:"true"`
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
// object's outcome by setting Result.
type BatchEntry[Obj any] struct {
	Object   Obj
	Revision statedb.Revision
	Result   error
}

// BatchOperations applies many objects in one call, for targets where that
// is cheaper. When given to [Register] it is used for every update and
// delete, including retries; [Operations.Prune] is still used for pruning.
// A batch never holds the same object twice. Deletes of a round are applied
// before its updates. Set each entry's Result; a nil Result is success.
type BatchOperations[Obj any] interface {
	UpdateBatch(ctx context.Context, txn statedb.ReadTxn, batch []BatchEntry[Obj])
	DeleteBatch(ctx context.Context, txn statedb.ReadTxn, batch []BatchEntry[Obj])
}

package reconciler

import (
	"context"
	"iter"
	"sync/atomic"

	"github.com/cilium/statedb"
)

// target is the user's operations, as Register was given them and sorted
// them: ops alone, or batchOps for updates and deletes (through processor,
// if batchOps implements BatchProcessor), and what prunes. Register sets it
// once; it is read-only after and called from the loop and the workers, as
// safe for concurrent use as the user's operations are. The zero value has
// no operations.
type target[Obj any] struct {
	ops       Operations[Obj] // nil if batchOps serves alone
	batchOps  BatchOperations[Obj]
	processor BatchProcessor[Obj] // batchOps, if it implements it; else nil
	pruner    pruner[Obj]         // ops, or batchOps serving alone; nil if it cannot prune
	drift     *driftCheck[Obj]    // WithDriftCheck; nil without
	guard     *pruneGuard[Obj]    // WithPruneGuard's, or nil
}

// newTarget sorts the operations given to Register, one of which is not
// nil: without ops, batchOps prune if they have Operations.Prune's method.
func newTarget[Obj any](ops Operations[Obj], batchOps BatchOperations[Obj]) target[Obj] {
	t := target[Obj]{ops: ops, batchOps: batchOps}
	t.processor, _ = batchOps.(BatchProcessor[Obj])
	if ops != nil {
		t.pruner = ops
	} else {
		t.pruner, _ = batchOps.(pruner[Obj])
	}
	return t
}

// batch makes the batch call call: DeleteBatch with deleted, UpdateBatch
// with upserted, or ProcessBatch with both. Only ProcessBatch returns an
// error; the others report in the entries.
func (t *target[Obj]) batch(ctx context.Context, txn statedb.ReadTxn, call batchCall, deleted, upserted []BatchEntry[Obj]) error {
	switch call {
	case deleteBatch:
		t.batchOps.DeleteBatch(ctx, txn, deleted)
	case updateBatch:
		t.batchOps.UpdateBatch(ctx, txn, upserted)
	default:
		return t.processor.ProcessBatch(ctx, txn, deleted, upserted)
	}
	return nil
}

// batchCall is the batch operation a batch call makes.
type batchCall uint8

const (
	deleteBatch  batchCall = iota // BatchOperations.DeleteBatch
	updateBatch                   // BatchOperations.UpdateBatch
	processBatch                  // BatchProcessor.ProcessBatch
)

// driftCheck is the state of WithDriftCheck, owned by the target: the
// check and its mode, read-only after Register and read by the loop and
// the workers; and rows, the drifted objects, owned by the loop's
// goroutine.
type driftCheck[Obj any] struct {
	check      func(ctx context.Context, txn statedb.ReadTxn, revision statedb.Revision, obj Obj) (bool, error)
	reportOnly bool
	rows       driftRows
}

// applies reports whether the check runs for o.
func (d *driftCheck[Obj]) applies(o *op[Obj]) bool {
	return d != nil && o.Refresh && !o.Delete
}

// pruneGuard is the guard of WithPruneGuard, part of the target: its plan
// and bounds, read-only after Register, and the hold in effect. The loop's
// goroutine plans and holds; ConfirmPrune, from any goroutine, confirms:
// the atomics make it safe for concurrent use. A nil *pruneGuard guards
// nothing.
type pruneGuard[Obj any] struct {
	plan      func(ctx context.Context, txn statedb.ReadTxn, objects iter.Seq2[Obj, statedb.Revision]) (remove, held int, err error)
	maxRemove int
	maxShare  float64

	// hold identifies the hold in effect, 0 if none: a prune was held and
	// Prune not called since. Each hold has an identity of its own (from
	// holds), so that a confirmation of an earlier hold, stored as a later
	// one began, confirms nothing. It lasts across stops of the hive.
	hold      atomic.Uint64
	confirmed atomic.Uint64 // the hold ConfirmPrune last confirmed
	holds     atomic.Uint64 // holds so far
}

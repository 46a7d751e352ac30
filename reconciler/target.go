package reconciler

import (
	"context"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/drift"
	"github.com/converge-go/converge/reconciler/internal/operate"
	"github.com/converge-go/converge/reconciler/internal/prune"
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
	drift     *drift.Check[Obj]   // WithDriftCheck; nil without
	guard     *prune.Guard[Obj]   // WithPruneGuard's, or nil
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
func (t *target[Obj]) batch(ctx context.Context, txn statedb.ReadTxn, call operate.Call, deleted, upserted []BatchEntry[Obj]) error {
	switch call {
	case operate.DeleteBatch:
		t.batchOps.DeleteBatch(ctx, txn, deleted)
	case operate.UpdateBatch:
		t.batchOps.UpdateBatch(ctx, txn, upserted)
	default:
		return t.processor.ProcessBatch(ctx, txn, deleted, upserted)
	}
	return nil
}

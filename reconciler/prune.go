package reconciler

import (
	"context"
	"fmt"
	"time"

	"github.com/cilium/statedb"
)

// prune hands the whole desired set to Operations.Prune and reports the
// outcome. A failure is returned for health and waits for the next prune.
func (r *reconciler[Obj]) prune(ctx context.Context, txn statedb.ReadTxn) error {
	start := time.Now()
	err := r.callPrune(ctx, txn)
	r.metrics.PruneDuration(r.moduleID, r.opts.name, time.Since(start))
	r.metrics.PruneError(r.moduleID, r.opts.name, err)
	if err != nil {
		r.log.Warn("Reconciler prune failed; waiting for the next prune", "error", err)
		return fmt.Errorf("prune: %w", err)
	}
	return nil
}

func (r *reconciler[Obj]) callPrune(ctx context.Context, txn statedb.ReadTxn) (err error) {
	if r.opts.operationTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.opts.operationTimeout)
		defer cancel()
	}
	if r.opts.recoverPanics {
		defer func() {
			if v := recover(); v != nil {
				err = r.recovered("prune", v)
			}
		}()
	}
	return r.ops.Prune(ctx, txn, r.table.All(txn))
}

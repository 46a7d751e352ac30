package reconciler

import (
	"context"
	"fmt"
	"time"

	"github.com/cilium/statedb"
)

// prune hands the whole desired set to Operations.Prune and reports the
// outcome. A failure is returned for health; the loop prunes again after
// the retry backoff.
func (r *reconciler[Obj]) prune(ctx context.Context, txn statedb.ReadTxn) error {
	start := time.Now()
	err := r.call(ctx, txn, callPrune, nil, nil)
	r.metrics.PruneDuration(r.moduleID, r.opts.name, time.Since(start))
	r.metrics.PruneError(r.moduleID, r.opts.name, err)
	if err != nil {
		r.log.Warn("Reconciler prune failed; trying again after the retry backoff", "error", err)
		return fmt.Errorf("prune: %w", err)
	}
	return nil
}

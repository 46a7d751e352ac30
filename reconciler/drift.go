package reconciler

import (
	"context"
	"sync/atomic"
)

// ReportRepaired lets an operation say that it repaired n pieces of drift:
// Prune counting what it removed from the target that should not have been
// there, or Update counting what it had to put right in the target for an
// object marked Refreshing. Call it with the context the operation was
// given, any number of times. The counts go to the metrics (drift repaired,
// by source "prune" or "refresh"; see [metrics.PruneStats] and
// [metrics.CommitStats]) and to the reconcilers table. With a context that
// does not come from a reconciler it does nothing. It is safe for
// concurrent use and does not allocate.
func ReportRepaired(ctx context.Context, n int) {
	if c, ok := ctx.Value(driftKey{}).(*driftCounter); ok && n > 0 {
		c.n.Add(int64(n))
	}
}

type driftKey struct{}

// driftCounter collects ReportRepaired calls of the operations an executor
// runs. The executor reads and resets it around each operation.
type driftCounter struct{ n atomic.Int64 }

func (c *driftCounter) take() int { return int(c.n.Swap(0)) }

package metrics

import (
	"time"

	"github.com/cilium/hive/cell"
)

// Operation names passed to [Metrics.ReconciliationDuration].
const (
	OpUpdate = "update"
	OpDelete = "delete"
)

// Metrics receives the figures of reconciliation and pruning.
type Metrics interface {
	// ReconciliationDuration reports how long one operation took: a single
	// Update or Delete, or one batch of them. operation is OpUpdate or
	// OpDelete.
	ReconciliationDuration(moduleID cell.FullModuleID, name, operation string, duration time.Duration)

	// ReconciliationErrors is called once per reconciliation round with the
	// number of operations that failed in the round (new) and the number of
	// objects currently failing (current).
	ReconciliationErrors(moduleID cell.FullModuleID, name string, new, current int)

	// PruneError is called after each prune with its error, nil on success.
	PruneError(moduleID cell.FullModuleID, name string, err error)

	// PruneDuration reports how long a prune took.
	PruneDuration(moduleID cell.FullModuleID, name string, duration time.Duration)
}

// QueueMetrics is implemented by metrics that also want converge's queue
// and latency figures. The reconciler checks for it once, when registered.
type QueueMetrics interface {
	// QueueLength is called after each round with the number of objects
	// waiting for a retry and the number of operations started but not yet
	// committed.
	QueueLength(moduleID cell.FullModuleID, name string, retrying, inFlight int)

	// Converged is called after each commit of statuses with the number of
	// objects committed as Done and the total and the longest of their times
	// from the Pending (or Refreshing) status being written to Done. It is
	// not called when count is zero.
	Converged(moduleID cell.FullModuleID, name string, count int, total, longest time.Duration)
}

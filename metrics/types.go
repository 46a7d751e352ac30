package metrics

import (
	"time"

	"github.com/cilium/hive/cell"
)

// Operation names passed to [Metrics.ReconciliationDuration], and the
// operation of a prune in [OutcomeCounts] and the Prometheus labels.
const (
	OpUpdate = "update"
	OpDelete = "delete"
	OpPrune  = "prune"
)

// Metrics receives the figures of reconciliation and pruning. It has the
// method set of the StateDB reconciler's Metrics. A reconciler may also
// report to the optional interfaces [QueueMetrics], [RoundMetrics],
// [CommitMetrics], [PruneMetrics] and [RefreshMetrics]; it checks which
// ones a Metrics value implements once, when registered, and calls every
// one it implements.
type Metrics interface {
	// ReconciliationDuration reports how long one operation took: a single
	// Update or Delete, or one batch of them. operation is OpUpdate or
	// OpDelete. It is called on the goroutine that ran the operation (a
	// worker with WithConcurrency), once per operation or batch.
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
// and latency summaries.
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

// RoundMetrics is implemented by metrics that want the state of the work
// queue. Round is called once per reconciliation round, on the reconcile
// loop's goroutine, after the round's commit and after ReconciliationErrors
// and QueueLength.
type RoundMetrics interface {
	Round(moduleID cell.FullModuleID, name string, s RoundStats)
}

// RoundStats are the figures of one round. Gauges (every field but Adds
// and Retries) describe the queue as the round leaves it.
type RoundStats struct {
	// Adds is the number of objects taken for work in the round: changes
	// collected (an update or a delete to apply) plus retries that fell due.
	Adds int
	// Retries is how many of Adds are retries of a failed attempt.
	Retries int

	// Depth is the number of operations collected but not started: waiting
	// for a worker, or parked behind an operation in flight on the same
	// object. With one worker every collected operation runs within its
	// round, so it is zero.
	Depth int
	// Retrying is the number of objects waiting for a retry (the retrying
	// figure of QueueLength).
	Retrying int
	// InFlight is the number of operations handed to workers and not yet
	// committed (the inFlight figure of QueueLength).
	InFlight int

	// OldestPending is how long ago the status of the oldest unfinished
	// object was written Pending or Refreshing, over the objects collected
	// and not yet committed Done and those waiting for a retry. Zero when
	// there is none.
	OldestPending time.Duration
	// UnfinishedWork is the sum, over the operations running now, of how
	// long each has been running. Zero when none is running.
	UnfinishedWork time.Duration
	// LongestRunning is how long the longest running operation has been
	// running. Zero when none is running.
	LongestRunning time.Duration

	// Workers is the number of operations the reconciler runs at once
	// (WithConcurrency), and BusyWorkers how many of them were running an
	// operation at the end of the round, or taking one queued for them
	// (unless paused). One worker runs its operations within the round, so
	// its BusyWorkers is zero. When the reconciler stops, a last round
	// reports nothing running.
	Workers, BusyWorkers int

	// BreakerOpen says whether the circuit breaker (WithCircuitBreaker) is
	// open: the target fails as a whole and only probes start.
	// BreakerOpened counts its openings since the reconciler was
	// registered (a counter). Both are zero without a breaker.
	BreakerOpen   bool
	BreakerOpened uint64
}

// CommitMetrics is implemented by metrics that want the outcome of every
// operation and the per-object latencies. Committed is called once per
// commit of operation outcomes, on the reconcile loop's goroutine, after
// the statuses are committed and before Converged, including when no status
// was written (a commit of deletes only, or of results for stale objects).
// It is not called for an empty commit. The slices in [CommitStats] are
// reused by the reconciler once Committed returns: implementations must not
// retain them.
type CommitMetrics interface {
	Committed(moduleID cell.FullModuleID, name string, s CommitStats)
}

// CommitStats are the figures of one commit. Every finished operation
// counts, whether or not its status could be written; each entry of a
// batch counts as one operation.
type CommitStats struct {
	// Update and Delete count the committed operations by outcome.
	Update, Delete OutcomeCounts

	// QueueWaits holds, for each committed operation, how long it waited
	// before starting: from its object becoming ready for work (its status
	// written Pending or Refreshing, or for a delete the object's deletion,
	// or for a retry its backoff expiring) to the operation starting. Its
	// order is unspecified.
	QueueWaits []time.Duration

	// Latencies holds, for each object committed Done, the time from its
	// Pending or Refreshing status being written to Done: the same objects
	// as Converged. Its order is unspecified.
	Latencies []time.Duration

	// RefreshRepaired is the drift that Update calls on objects marked
	// Refreshing reported repairing, summed over the commit.
	RefreshRepaired int
}

// PruneMetrics is implemented by metrics that want the outcome of each
// prune and the drift it repaired. Pruned is called once after each prune,
// on the reconcile loop's goroutine, after PruneDuration and PruneError.
type PruneMetrics interface {
	Pruned(moduleID cell.FullModuleID, name string, s PruneStats)
}

// Drift sources: the last part of the keys of the expvar drift_repaired
// map, and the operation label of the Prometheus drift counter.
const (
	DriftPrune   = "prune"   // reported by Prune, through PruneStats
	DriftRefresh = "refresh" // reported by Update of a Refreshing object, through CommitStats
)

// PruneStats are the figures of one prune.
type PruneStats struct {
	Outcome Outcome
	// Repaired is the drift that Prune reported removing.
	Repaired int
}

// RefreshMetrics is implemented by metrics that want the objects marked
// Refreshing. RefreshMarked is called on the refresh job's goroutine once
// per write transaction of a refresh sweep (at most a thousand objects
// each) that marked at least one object, with the number it marked.
type RefreshMetrics interface {
	RefreshMarked(moduleID cell.FullModuleID, name string, marked int)
}

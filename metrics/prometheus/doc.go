// Package prometheus exports a reconciler's figures as Prometheus metrics,
// with github.com/prometheus/client_golang.
//
// [New] returns a [Metrics] that implements every interface of package
// metrics (Metrics, QueueMetrics, RoundMetrics, CommitMetrics, PruneMetrics
// and RefreshMetrics) and is a prometheus.Collector. Register it on your
// own registry and hand it to reconcilers with reconciler.WithMetrics (or as
// reconciler.Params' DefaultMetrics); nothing is registered globally and the
// package has no init. One Metrics serves every reconciler of a program.
// Only this package imports client_golang: the core packages do not. It
// is a module of its own, github.com/converge-go/converge/metrics/prometheus,
// so that client_golang is in the module graph of the programs that import
// it and of no other.
//
// # Names
//
// Every name starts with the namespace, "converge" unless [WithNamespace]
// says otherwise (an empty namespace gives the bare client-go and
// controller-runtime names). The families follow those that Kubernetes
// operators already read. The client-go workqueue family:
//
//	converge_workqueue_depth                              gauge      module, name
//	converge_workqueue_adds_total                         counter    module, name
//	converge_workqueue_retries_total                      counter    module, name
//	converge_workqueue_queue_duration_seconds             histogram  module, name
//	converge_workqueue_work_duration_seconds              histogram  module, name, operation
//	converge_workqueue_unfinished_work_seconds            gauge      module, name
//	converge_workqueue_longest_running_processor_seconds  gauge      module, name
//
// The controller-runtime reconcile family:
//
//	converge_reconcile_total                   counter    module, name, operation, result
//	converge_reconcile_errors_total            counter    module, name
//	converge_terminal_reconcile_errors_total   counter    module, name, operation
//	converge_reconcile_panics_total            counter    module, name, operation
//	converge_reconcile_timeouts_total          counter    module, name, operation
//	converge_reconcile_time_seconds            histogram  module, name, operation
//	converge_max_concurrent_reconciles         gauge      module, name
//	converge_active_workers                    gauge      module, name
//
// converge's own:
//
//	converge_convergence_latency_seconds  histogram  module, name
//	converge_objects_failing              gauge      module, name
//	converge_retry_queue_length           gauge      module, name
//	converge_operations_in_flight         gauge      module, name
//	converge_oldest_pending_seconds       gauge      module, name
//	converge_reconcile_rounds_total       counter    module, name
//	converge_prune_total                  counter    module, name
//	converge_prune_errors_total           counter    module, name
//	converge_prune_failing                gauge      module, name
//	converge_prune_duration_seconds       histogram  module, name
//	converge_refresh_marks_total          counter    module, name
//	converge_drift_repaired_total         counter    module, name, operation
//	converge_breaker_open                 gauge      module, name
//	converge_breaker_openings_total       counter    module, name
//
// # Labels
//
// module is the hive module ID ("agent.routes"), name the reconciler's name
// (empty when it has none), operation "update", "delete" or "prune" ("prune"
// or "refresh" for drift), and result an outcome: "success", "error",
// "terminal", "panic" or "timeout". No label is per object, so the number
// of series is bounded by the number of reconcilers.
//
// # What feeds what
//
// reconcile_total counts every operation by outcome, each entry of a batch
// as one, from CommitMetrics (updates, deletes) and PruneMetrics (prunes).
// reconcile_errors_total is the failed operations of each round
// (ReconciliationErrors' new) plus failed prunes, so it moves with the
// seed's four-method interface alone; objects_failing is set, never added
// to, from ReconciliationErrors' current. work_duration_seconds and
// reconcile_time_seconds are the same series under two names, observing
// each ReconciliationDuration: one operation, or one batch with batch
// operations. queue_duration_seconds
// observes each committed operation's wait and convergence_latency_seconds
// each object's Pending-to-Done time, from CommitMetrics. The gauges of the
// queue are set after each round. Histograms use metrics.DurationBuckets,
// except the latency one, which uses metrics.ConvergenceBuckets. They are
// counted with atomic counters, in a few nanoseconds per observation, and
// converted to Prometheus histograms when scraped.
//
// A reconciler's series are all created, at zero, when it first reports,
// so that rates and alerts work before the first failure.
package prometheus

// Package metrics defines what a reconciler reports about its work and
// provides an implementation that publishes it through the standard
// library's expvar, so it can be scraped at /debug/vars. The package
// metrics/prometheus implements the same interfaces for Prometheus.
//
// # Interfaces
//
// [Metrics] has the same method set as the metrics interface of the StateDB
// reconciler, so an existing implementation can be used unchanged. A
// Metrics value may also implement optional interfaces; the reconciler
// checks which once, when it is registered, and calls every one that is
// implemented:
//
//   - [QueueMetrics]: retry-queue length and operations in flight after
//     each round, and a summary of Pending-to-Done times after each commit.
//   - [RoundMetrics]: once per round, the work taken (adds, retries) and
//     the queue as the round leaves it (depth, retrying, in flight, oldest
//     pending age, running time of the operations in flight).
//   - [CommitMetrics]: once per commit, operations counted by [Outcome],
//     each operation's queue wait and each object's Pending-to-Done latency.
//   - [PruneMetrics]: once per prune, its outcome and the drift it repaired.
//   - [RefreshMetrics]: objects marked Refreshing by the refresh sweep.
//
// No method is called once per object: figures of many objects come in one
// call, as counts, a struct or a slice. Every figure is keyed by the hive
// module ID and the reconciler's name, so one value can serve any number of
// reconcilers.
//
// Implementations must be safe for concurrent use: ReconciliationDuration
// is called from the goroutine that ran the operation (one of several
// workers with concurrency), RefreshMarked from the refresh job, and the
// rest from the reconcile loop, of each of the reconcilers the value
// serves. They must not block, since they run in the reconcile loop, and
// must not retain the slices they are given, which the reconciler reuses.
//
// # expvar
//
// [ExpVar] publishes one expvar map per figure, keyed by reconciler (see
// [ExpVar] for the keys and [Key]). Histograms are maps of bucket upper
// bound to cumulative count plus "count" and "sum", with the bounds of
// [DurationBuckets] and [ConvergenceBuckets]. In the steady state its
// methods neither lock (except to keep a maximum) nor allocate.
//
// [NewExpVar] publishes the variables under the names the StateDB
// reconciler's NewExpVarMetrics also uses ("reconciliation_count",
// "prune_duration", ...), plus converge's own, so that existing scrapers
// keep working. NewExpVarMetrics panics if a name is taken, so in a program
// that runs both reconcilers (while migrating one at a time), either call
// the StateDB reconciler's NewExpVarMetrics before [NewExpVar] (converge
// then shares its maps; keys differ by module and name, so figures do not
// mix), or use [NewExpVarWithPrefix], whose names coexist with the StateDB
// reconciler's in any order. [NewUnpublishedExpVar] publishes nothing.
package metrics

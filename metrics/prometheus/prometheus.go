package prometheus

import (
	"time"

	"github.com/cilium/hive/cell"
	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/metrics/internal/histogram"
	"github.com/converge-go/converge/metrics/internal/keycache"
)

// Metrics implements every metrics interface of package metrics with
// Prometheus metrics, and is a [prom.Collector] of them. Register it on a
// registry of your own; nothing is registered globally. One Metrics serves
// any number of reconcilers, told apart by the module and name labels; two
// with the same namespace cannot be registered on one registry.
//
// Its methods are safe for concurrent use and do not block. Build one with
// [New].
type Metrics struct {
	f          *families
	collectors []prom.Collector

	reconcilers keycache.Cache[*series]
	durations   keycache.Cache[*histogram.Histogram]
}

var (
	_ prom.Collector         = (*Metrics)(nil)
	_ metrics.Metrics        = (*Metrics)(nil)
	_ metrics.QueueMetrics   = (*Metrics)(nil)
	_ metrics.RoundMetrics   = (*Metrics)(nil)
	_ metrics.CommitMetrics  = (*Metrics)(nil)
	_ metrics.PruneMetrics   = (*Metrics)(nil)
	_ metrics.RefreshMetrics = (*Metrics)(nil)
)

// DefaultNamespace is the prefix of every metric name unless
// [WithNamespace] sets another.
const DefaultNamespace = "converge"

// Option configures [New].
type Option func(*options)

type options struct {
	namespace string
}

// WithNamespace sets the namespace, the first part of every metric name
// ("<namespace>_workqueue_depth", "<namespace>_reconcile_total", ...). An
// empty namespace drops it ("workqueue_depth", "reconcile_total").
func WithNamespace(namespace string) Option {
	return func(o *options) { o.namespace = namespace }
}

// New returns metrics with every family described in the package
// documentation. Register the result on a registry to export them.
func New(opts ...Option) *Metrics {
	o := options{namespace: DefaultNamespace}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	f := newFamilies(o.namespace)
	return &Metrics{f: f, collectors: f.collectors()}
}

// Describe implements [prom.Collector].
func (m *Metrics) Describe(ch chan<- *prom.Desc) {
	for _, c := range m.collectors {
		c.Describe(ch)
	}
}

// Collect implements [prom.Collector].
func (m *Metrics) Collect(ch chan<- prom.Metric) {
	for _, c := range m.collectors {
		c.Collect(ch)
	}
}

// series returns the series of the named reconciler, creating them on its
// first report.
func (m *Metrics) series(moduleID cell.FullModuleID, name string) *series {
	return m.reconcilers.Get(moduleID, name, "", func(string) *series {
		return newSeries(m.f, moduleID.String(), name)
	})
}

// ReconciliationDuration implements [metrics.Metrics]: it observes d in
// workqueue_work_duration_seconds and reconcile_time_seconds, which
// export the same series.
func (m *Metrics) ReconciliationDuration(moduleID cell.FullModuleID, name, operation string, d time.Duration) {
	h := m.durations.Get(moduleID, name, operation, func(string) *histogram.Histogram {
		return m.f.workDuration.with(moduleID.String(), name, operation)
	})
	h.Observe(d)
}

// ReconciliationErrors implements [metrics.Metrics]: it counts a round in
// reconcile_rounds_total, adds new to reconcile_errors_total and sets
// objects_failing to current.
func (m *Metrics) ReconciliationErrors(moduleID cell.FullModuleID, name string, new, current int) {
	s := m.series(moduleID, name)
	s.rounds.Inc()
	if new > 0 {
		s.reconcileErrors.Add(float64(new))
	}
	s.failing.Set(float64(current))
}

// PruneError implements [metrics.Metrics]: it counts the prune in
// prune_total and, if it failed, in prune_errors_total and
// reconcile_errors_total, and sets prune_failing.
func (m *Metrics) PruneError(moduleID cell.FullModuleID, name string, err error) {
	s := m.series(moduleID, name)
	s.prunes.Inc()
	if err != nil {
		s.pruneErrors.Inc()
		s.reconcileErrors.Inc()
		s.pruneFailing.Set(1)
	} else {
		s.pruneFailing.Set(0)
	}
}

// PruneDuration implements [metrics.Metrics]: it observes d in
// prune_duration_seconds.
func (m *Metrics) PruneDuration(moduleID cell.FullModuleID, name string, d time.Duration) {
	m.series(moduleID, name).pruneDuration.Observe(d)
}

// QueueLength implements [metrics.QueueMetrics]: it sets
// retry_queue_length and operations_in_flight.
func (m *Metrics) QueueLength(moduleID cell.FullModuleID, name string, retrying, inFlight int) {
	s := m.series(moduleID, name)
	s.retryQueue.Set(float64(retrying))
	s.inFlight.Set(float64(inFlight))
}

// Converged implements [metrics.QueueMetrics]. It records nothing:
// convergence_latency_seconds observes each latency of the same objects
// through [Metrics.Committed].
func (m *Metrics) Converged(cell.FullModuleID, string, int, time.Duration, time.Duration) {}

// Round implements [metrics.RoundMetrics]: it adds to
// workqueue_adds_total and workqueue_retries_total and sets the queue
// gauges.
func (m *Metrics) Round(moduleID cell.FullModuleID, name string, r metrics.RoundStats) {
	s := m.series(moduleID, name)
	if r.Adds > 0 {
		s.adds.Add(float64(r.Adds))
	}
	if r.Retries > 0 {
		s.retries.Add(float64(r.Retries))
	}
	s.depth.Set(float64(r.Depth))
	s.retryQueue.Set(float64(r.Retrying))
	s.inFlight.Set(float64(r.InFlight))
	s.oldestPending.Set(r.OldestPending.Seconds())
	s.unfinishedWork.Set(r.UnfinishedWork.Seconds())
	s.longestRunning.Set(r.LongestRunning.Seconds())
	s.maxConcurrent.Set(float64(r.Workers))
	s.activeWorkers.Set(float64(r.BusyWorkers))
	open := 0.0
	if r.BreakerOpen {
		open = 1
	}
	s.breakerOpen.Set(open)
	if seen := s.breakerSeen.Load(); r.BreakerOpened > seen && s.breakerSeen.CompareAndSwap(seen, r.BreakerOpened) {
		s.breakerOpened.Add(float64(r.BreakerOpened - seen))
	}
}

// Committed implements [metrics.CommitMetrics]: it counts outcomes in
// reconcile_total and the terminal, panic and timeout totals, observes
// queue waits and latencies, and adds refresh drift.
func (m *Metrics) Committed(moduleID cell.FullModuleID, name string, c metrics.CommitStats) {
	s := m.series(moduleID, name)
	s.ops[opUpdate].count(&c.Update)
	s.ops[opDelete].count(&c.Delete)
	s.queueDuration.ObserveAll(c.QueueWaits)
	s.convergence.ObserveAll(c.Latencies)
	if c.RefreshRepaired > 0 {
		s.driftRefresh.Add(float64(c.RefreshRepaired))
	}
}

// Pruned implements [metrics.PruneMetrics]: it counts the prune's outcome
// with operation "prune" and adds its drift.
func (m *Metrics) Pruned(moduleID cell.FullModuleID, name string, p metrics.PruneStats) {
	s := m.series(moduleID, name)
	var c metrics.OutcomeCounts
	c.Add(p.Outcome)
	s.ops[opPrune].count(&c)
	if p.Repaired > 0 {
		s.driftPrune.Add(float64(p.Repaired))
	}
}

// RefreshMarked implements [metrics.RefreshMetrics]: it adds to
// refresh_marks_total.
func (m *Metrics) RefreshMarked(moduleID cell.FullModuleID, name string, marked int) {
	if marked > 0 {
		m.series(moduleID, name).refreshMarks.Add(float64(marked))
	}
}

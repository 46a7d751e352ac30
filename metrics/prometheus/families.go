package prometheus

import (
	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/converge-go/converge/metrics"
)

// Label names. Their values are bounded: a module ID, a reconciler name,
// an operation (update, delete, prune, or for drift prune and refresh) and
// an outcome.
const (
	labelModule    = "module"
	labelName      = "name"
	labelOperation = "operation"
	labelResult    = "result"
)

var (
	reconcilerLabels = []string{labelModule, labelName}
	operationLabels  = []string{labelModule, labelName, labelOperation}
	resultLabels     = []string{labelModule, labelName, labelOperation, labelResult}
)

// families holds every metric family of a Metrics.
type families struct {
	// The client-go workqueue family.
	depth          *prom.GaugeVec
	adds           *prom.CounterVec
	retries        *prom.CounterVec
	queueDuration  *histogramVec
	workDuration   *histogramVec // also exported as reconcile_time_seconds
	unfinishedWork *prom.GaugeVec
	longestRunning *prom.GaugeVec

	// The controller-runtime reconcile family.
	reconcileTotal  *prom.CounterVec
	reconcileErrors *prom.CounterVec
	terminalErrors  *prom.CounterVec
	panics          *prom.CounterVec
	timeouts        *prom.CounterVec
	maxConcurrent   *prom.GaugeVec
	activeWorkers   *prom.GaugeVec

	// converge's own.
	convergence   *histogramVec
	failing       *prom.GaugeVec
	retryQueue    *prom.GaugeVec
	inFlight      *prom.GaugeVec
	oldestPending *prom.GaugeVec
	rounds        *prom.CounterVec
	prunes        *prom.CounterVec
	pruneErrors   *prom.CounterVec
	pruneFailing  *prom.GaugeVec
	pruneDuration *histogramVec
	refreshMarks  *prom.CounterVec
	drift         *prom.CounterVec
	breakerOpen   *prom.GaugeVec
	breakerOpened *prom.CounterVec
}

func newFamilies(ns string) *families {
	const wq = "workqueue"
	counter := func(sub, name, help string, labels []string) *prom.CounterVec {
		return prom.NewCounterVec(prom.CounterOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help}, labels)
	}
	gauge := func(sub, name, help string, labels []string) *prom.GaugeVec {
		return prom.NewGaugeVec(prom.GaugeOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help}, labels)
	}
	histogram := func(sub, name, help string, buckets []float64, labels []string) *histogramVec {
		return newHistogramVec(buckets, labels, family{prom.BuildFQName(ns, sub, name), help})
	}
	durations := metrics.DurationBuckets()
	return &families{
		depth: gauge(wq, "depth",
			"Operations collected and not yet started: waiting for a worker or parked behind an operation on the same object.", reconcilerLabels),
		adds: counter(wq, "adds_total",
			"Objects taken for work: changes collected and retries that fell due.", reconcilerLabels),
		retries: counter(wq, "retries_total",
			"Objects taken for work that were retries of a failed attempt.", reconcilerLabels),
		queueDuration: histogram(wq, "queue_duration_seconds",
			"How long an object waited, from becoming ready for work to its operation starting.", durations, reconcilerLabels),
		workDuration: newHistogramVec(durations, operationLabels,
			family{prom.BuildFQName(ns, wq, "work_duration_seconds"), "How long an operation, or a batch of operations, took."},
			family{prom.BuildFQName(ns, "", "reconcile_time_seconds"), "How long an operation, or a batch of operations, took (the same observations as workqueue_work_duration_seconds)."}),
		unfinishedWork: gauge(wq, "unfinished_work_seconds",
			"Sum of how long the operations running now have been running. Large values indicate stuck operations.", reconcilerLabels),
		longestRunning: gauge(wq, "longest_running_processor_seconds",
			"How long the longest running operation has been running.", reconcilerLabels),

		reconcileTotal: counter("", "reconcile_total",
			"Operations by operation and result (success, error, terminal, panic, timeout); a batch counts each object.", resultLabels),
		reconcileErrors: counter("", "reconcile_errors_total",
			"Failed operations, including failed prunes.", reconcilerLabels),
		terminalErrors: counter("", "terminal_reconcile_errors_total",
			"Operations that failed with a terminal error, not retried until the object changes.", operationLabels),
		panics: counter("", "reconcile_panics_total",
			"Operations that panicked.", operationLabels),
		timeouts: counter("", "reconcile_timeouts_total",
			"Operations that exceeded the operation timeout.", operationLabels),
		maxConcurrent: gauge("", "max_concurrent_reconciles",
			"Operations the reconciler runs at once, as configured (WithConcurrency).", reconcilerLabels),
		activeWorkers: gauge("", "active_workers",
			"Workers running an operation at the end of the last round.", reconcilerLabels),

		convergence: histogram("", "convergence_latency_seconds",
			"Time from an object's Pending or Refreshing status being written to its Done status.", metrics.ConvergenceBuckets(), reconcilerLabels),
		failing: gauge("", "objects_failing",
			"Objects whose last operation failed and that wait for a retry.", reconcilerLabels),
		retryQueue: gauge("", "retry_queue_length",
			"Objects waiting for a retry.", reconcilerLabels),
		inFlight: gauge("", "operations_in_flight",
			"Operations handed to workers and not yet committed.", reconcilerLabels),
		oldestPending: gauge("", "oldest_pending_seconds",
			"Age of the oldest Pending or Refreshing status not yet reconciled to Done.", reconcilerLabels),
		rounds: counter("", "reconcile_rounds_total",
			"Rounds of the reconcile loop.", reconcilerLabels),
		prunes: counter("", "prune_total",
			"Prunes run.", reconcilerLabels),
		pruneErrors: counter("", "prune_errors_total",
			"Prunes that failed.", reconcilerLabels),
		pruneFailing: gauge("", "prune_failing",
			"1 if the last prune failed, else 0.", reconcilerLabels),
		pruneDuration: histogram("", "prune_duration_seconds",
			"How long a prune took.", durations, reconcilerLabels),
		refreshMarks: counter("", "refresh_marks_total",
			"Objects marked Refreshing by the refresh sweep.", reconcilerLabels),
		drift: counter("", "drift_repaired_total",
			"Drift repaired, as reported by Prune (operation=\"prune\") or by Update of an object being refreshed (operation=\"refresh\").", operationLabels),
		breakerOpen: gauge("", "breaker_open",
			"1 while the circuit breaker is open (the target fails as a whole; only probes start), else 0.", reconcilerLabels),
		breakerOpened: counter("", "breaker_openings_total",
			"Openings of the circuit breaker.", reconcilerLabels),
	}
}

// collectors returns every family, in a fixed order.
func (f *families) collectors() []prom.Collector {
	return []prom.Collector{
		f.depth, f.adds, f.retries, f.queueDuration, f.workDuration, f.unfinishedWork, f.longestRunning,
		f.reconcileTotal, f.reconcileErrors, f.terminalErrors, f.panics, f.timeouts, f.maxConcurrent, f.activeWorkers,
		f.convergence, f.failing, f.retryQueue, f.inFlight, f.oldestPending, f.rounds,
		f.prunes, f.pruneErrors, f.pruneFailing, f.pruneDuration, f.refreshMarks, f.drift,
		f.breakerOpen, f.breakerOpened,
	}
}

package metrics_test

import (
	"expvar"
	"strconv"

	"github.com/converge-go/converge/metrics"
)

// varNames are the published names of the variables, in the order of
// exVars.
var varNames = []string{
	"reconciliation_count",
	"reconciliation_duration",
	"reconciliation_operations",
	"reconciliation_total_errors",
	"reconciliation_current_errors",
	"prune_count",
	"prune_duration",
	"prune_total_errors",
	"prune_current_errors",
	"queue_retrying",
	"queue_in_flight",
	"convergence_count",
	"convergence_duration",
	"convergence_max_duration",
	"reconciliation_duration_histogram",
	"reconciliation_outcomes",
	"convergence_duration_histogram",
	"queue_depth",
	"queue_oldest_pending",
	"queue_unfinished_work",
	"queue_longest_running",
	"queue_adds",
	"queue_retries",
	"queue_wait_histogram",
	"refresh_marks",
	"drift_repaired",
	"workers",
	"busy_workers",
	"breaker_open",
	"breaker_openings",
}

func exVars(m *metrics.ExpVar) []*expvar.Map {
	return []*expvar.Map{
		m.ReconciliationCountVar,
		m.ReconciliationDurationVar,
		m.ReconciliationOperationsVar,
		m.ReconciliationTotalErrorsVar,
		m.ReconciliationCurrentErrorsVar,
		m.PruneCountVar,
		m.PruneDurationVar,
		m.PruneTotalErrorsVar,
		m.PruneCurrentErrorsVar,
		m.QueueRetryingVar,
		m.QueueInFlightVar,
		m.ConvergenceCountVar,
		m.ConvergenceDurationVar,
		m.ConvergenceMaxDurationVar,
		m.ReconciliationDurationHistogramVar,
		m.ReconciliationOutcomesVar,
		m.ConvergenceDurationHistogramVar,
		m.QueueDepthVar,
		m.QueueOldestPendingVar,
		m.QueueUnfinishedWorkVar,
		m.QueueLongestRunningVar,
		m.QueueAddsVar,
		m.QueueRetriesVar,
		m.QueueWaitHistogramVar,
		m.RefreshMarksVar,
		m.DriftRepairedVar,
		m.WorkersVar,
		m.BusyWorkersVar,
		m.BreakerOpenVar,
		m.BreakerOpeningsVar,
	}
}

// wantHistogram returns the JSON-decoded form of a histogram with bounds
// holding observations obs (in seconds).
func wantHistogram(bounds []float64, obs ...float64) map[string]any {
	h := map[string]any{}
	sum := 0.0
	for _, o := range obs {
		sum += o
	}
	for _, b := range bounds {
		n := 0
		for _, o := range obs {
			if o <= b {
				n++
			}
		}
		h[strconv.FormatFloat(b, 'f', -1, 64)] = float64(n)
	}
	h["+Inf"] = float64(len(obs))
	h["count"] = float64(len(obs))
	h["sum"] = sum
	return h
}

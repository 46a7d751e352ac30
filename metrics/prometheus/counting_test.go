package prometheus_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
	convergeprom "github.com/converge-go/converge/metrics/prometheus"
)

var mod = cell.FullModuleID{"agent", "routes"}

func TestErrorsCountOnceAndCurrentIsReplaced(t *testing.T) {
	// Cilium's adapter had a current-errors gauge that also added the new
	// errors, and a total that never moved. Here the total moves by new and
	// the gauge is set to current.
	m := convergeprom.New()
	m.ReconciliationErrors(mod, "r", 2, 3)
	m.ReconciliationErrors(mod, "r", 1, 4)
	m.ReconciliationErrors(mod, "r", 0, 0)

	want := `
# HELP converge_objects_failing Objects whose last operation failed and that wait for a retry.
# TYPE converge_objects_failing gauge
converge_objects_failing{module="agent.routes",name="r"} 0
# HELP converge_reconcile_errors_total Failed operations, including failed prunes.
# TYPE converge_reconcile_errors_total counter
converge_reconcile_errors_total{module="agent.routes",name="r"} 3
# HELP converge_reconcile_rounds_total Rounds of the reconcile loop.
# TYPE converge_reconcile_rounds_total counter
converge_reconcile_rounds_total{module="agent.routes",name="r"} 3
`
	require.NoError(t, testutil.CollectAndCompare(m, strings.NewReader(want),
		"converge_objects_failing", "converge_reconcile_errors_total", "converge_reconcile_rounds_total"))

	m.ReconciliationErrors(mod, "r", 5, 5)
	fams := gather(t, m)
	assert.Equal(t, 5.0, value(t, fams, "converge_objects_failing", rec("r")), "set, not added")
	assert.Equal(t, 8.0, value(t, fams, "converge_reconcile_errors_total", rec("r")), "the total moves")
}

func TestPrune(t *testing.T) {
	m := convergeprom.New()
	m.PruneError(mod, "r", nil)
	m.PruneError(mod, "r", errors.New("boom"))
	m.PruneError(mod, "r", errors.New("boom"))
	m.PruneDuration(mod, "r", 20*time.Millisecond)
	m.PruneDuration(mod, "r", 2*time.Second)
	fams := gather(t, m)
	assert.Equal(t, 3.0, value(t, fams, "converge_prune_total", rec("r")))
	assert.Equal(t, 2.0, value(t, fams, "converge_prune_errors_total", rec("r")))
	assert.Equal(t, 1.0, value(t, fams, "converge_prune_failing", rec("r")))
	assert.Equal(t, 2.0, value(t, fams, "converge_reconcile_errors_total", rec("r")), "failed prunes are reconcile errors")
	h := histogram(t, fams, "converge_prune_duration_seconds", rec("r"))
	assert.Equal(t, uint64(2), h.GetSampleCount())
	assert.InDelta(t, 2.02, h.GetSampleSum(), 1e-9)
	assert.Equal(t, uint64(1), cumulative(t, h, 0.025))

	m.PruneError(mod, "r", nil)
	fams = gather(t, m)
	assert.Equal(t, 0.0, value(t, fams, "converge_prune_failing", rec("r")), "recovers")
	assert.Equal(t, 2.0, value(t, fams, "converge_prune_errors_total", rec("r")))

	m.Pruned(mod, "r", metrics.PruneStats{Outcome: metrics.OutcomeSuccess, Repaired: 3})
	m.Pruned(mod, "r", metrics.PruneStats{Outcome: metrics.OutcomePanic})
	fams = gather(t, m)
	assert.Equal(t, 1.0, value(t, fams, "converge_reconcile_total", withResult(rec("r"), "prune", "success")))
	assert.Equal(t, 1.0, value(t, fams, "converge_reconcile_total", withResult(rec("r"), "prune", "panic")))
	assert.Equal(t, 1.0, value(t, fams, "converge_reconcile_panics_total", withOp(rec("r"), "prune")))
	assert.Equal(t, 3.0, value(t, fams, "converge_drift_repaired_total", withOp(rec("r"), "prune")))
	assert.Equal(t, 0.0, value(t, fams, "converge_drift_repaired_total", withOp(rec("r"), "refresh")))
}

func TestDurationsFeedBothFamilies(t *testing.T) {
	m := convergeprom.New()
	m.ReconciliationDuration(mod, "r", metrics.OpUpdate, time.Millisecond)
	m.ReconciliationDuration(mod, "r", metrics.OpUpdate, 3*time.Millisecond)
	m.ReconciliationDuration(mod, "r", metrics.OpDelete, time.Minute)
	fams := gather(t, m)
	for _, name := range []string{"converge_workqueue_work_duration_seconds", "converge_reconcile_time_seconds"} {
		h := histogram(t, fams, name, withOp(rec("r"), "update"))
		assert.Equal(t, uint64(2), h.GetSampleCount(), name)
		assert.InDelta(t, 0.004, h.GetSampleSum(), 1e-9, name)
		assert.Equal(t, uint64(1), cumulative(t, h, 0.001), "%s: upper bounds are inclusive", name)
		assert.Equal(t, uint64(2), cumulative(t, h, 0.005), name)
		assert.Len(t, h.GetBucket(), len(metrics.DurationBuckets()), "%s uses metrics.DurationBuckets", name)
		d := histogram(t, fams, name, withOp(rec("r"), "delete"))
		assert.Equal(t, uint64(1), d.GetSampleCount(), name)
		assert.Equal(t, uint64(1), cumulative(t, d, 60), name)
		assert.Equal(t, uint64(0), cumulative(t, d, 30), name)
	}
}

func TestCommitted(t *testing.T) {
	m := convergeprom.New()
	var upd, del metrics.OutcomeCounts
	upd[metrics.OutcomeSuccess] = 5
	upd[metrics.OutcomeError] = 2
	upd[metrics.OutcomeTerminal] = 1
	upd[metrics.OutcomeTimeout] = 1
	del[metrics.OutcomeSuccess] = 1
	del[metrics.OutcomePanic] = 1
	m.Committed(mod, "r", metrics.CommitStats{
		Update:          upd,
		Delete:          del,
		QueueWaits:      []time.Duration{50 * time.Microsecond, time.Millisecond},
		Latencies:       []time.Duration{time.Millisecond, 2 * time.Second, 10 * time.Minute},
		RefreshRepaired: 2,
	})
	m.Committed(mod, "r", metrics.CommitStats{Update: upd})

	fams := gather(t, m)
	results := map[string]map[string]float64{
		"update": {"success": 10, "error": 4, "terminal": 2, "panic": 0, "timeout": 2},
		"delete": {"success": 1, "error": 0, "terminal": 0, "panic": 1, "timeout": 0},
		"prune":  {"success": 0, "error": 0, "terminal": 0, "panic": 0, "timeout": 0},
	}
	for op, byResult := range results {
		for result, want := range byResult {
			assert.Equal(t, want, value(t, fams, "converge_reconcile_total", withResult(rec("r"), op, result)), "%s %s", op, result)
		}
		assert.Equal(t, byResult["terminal"], value(t, fams, "converge_terminal_reconcile_errors_total", withOp(rec("r"), op)), op)
		assert.Equal(t, byResult["panic"], value(t, fams, "converge_reconcile_panics_total", withOp(rec("r"), op)), op)
		assert.Equal(t, byResult["timeout"], value(t, fams, "converge_reconcile_timeouts_total", withOp(rec("r"), op)), op)
	}

	w := histogram(t, fams, "converge_workqueue_queue_duration_seconds", rec("r"))
	assert.Equal(t, uint64(2), w.GetSampleCount())
	assert.Equal(t, uint64(1), cumulative(t, w, 0.00005))
	l := histogram(t, fams, "converge_convergence_latency_seconds", rec("r"))
	assert.Equal(t, uint64(3), l.GetSampleCount(), "one observation per object Done")
	assert.Equal(t, uint64(1), cumulative(t, l, 0.001))
	assert.Equal(t, uint64(2), cumulative(t, l, 2.5))
	assert.Equal(t, uint64(3), cumulative(t, l, 600))
	assert.Len(t, l.GetBucket(), len(metrics.ConvergenceBuckets()))
	assert.Equal(t, 2.0, value(t, fams, "converge_drift_repaired_total", withOp(rec("r"), "refresh")))
}

func TestRoundAndQueueLength(t *testing.T) {
	m := convergeprom.New()
	m.Round(mod, "r", metrics.RoundStats{Adds: 10, Retries: 3, Depth: 7, Retrying: 2, InFlight: 4,
		OldestPending: 5 * time.Second, UnfinishedWork: 3 * time.Second, LongestRunning: 2 * time.Second, Workers: 8, BusyWorkers: 5})
	m.Round(mod, "r", metrics.RoundStats{Adds: 1, Depth: 1, Retrying: 1, InFlight: 1, Workers: 8, BusyWorkers: 3})

	assert.Equal(t, 11.0, testutil.ToFloat64(counterOf(t, m, "converge_workqueue_adds_total")))
	fams := gather(t, m)
	assert.Equal(t, 11.0, value(t, fams, "converge_workqueue_adds_total", rec("r")), "adds accumulate")
	assert.Equal(t, 3.0, value(t, fams, "converge_workqueue_retries_total", rec("r")), "retries accumulate")
	assert.Equal(t, 1.0, value(t, fams, "converge_workqueue_depth", rec("r")), "depth is a gauge")
	assert.Equal(t, 1.0, value(t, fams, "converge_retry_queue_length", rec("r")))
	assert.Equal(t, 1.0, value(t, fams, "converge_operations_in_flight", rec("r")))
	assert.Equal(t, 0.0, value(t, fams, "converge_oldest_pending_seconds", rec("r")))
	assert.Equal(t, 0.0, value(t, fams, "converge_workqueue_unfinished_work_seconds", rec("r")))
	assert.Equal(t, 0.0, value(t, fams, "converge_workqueue_longest_running_processor_seconds", rec("r")))
	assert.Equal(t, 8.0, value(t, fams, "converge_max_concurrent_reconciles", rec("r")), "workers as configured")
	assert.Equal(t, 3.0, value(t, fams, "converge_active_workers", rec("r")), "busy workers, as of the last round")
	assert.Equal(t, 0.0, value(t, fams, "converge_breaker_open", rec("r")))
	assert.Equal(t, 0.0, value(t, fams, "converge_breaker_openings_total", rec("r")))

	// The openings are a count since registration; the counter adds what
	// is new, once, whatever rounds repeat it.
	m.Round(mod, "r", metrics.RoundStats{BreakerOpen: true, BreakerOpened: 2})
	m.Round(mod, "r", metrics.RoundStats{BreakerOpen: true, BreakerOpened: 2})
	fams = gather(t, m)
	assert.Equal(t, 1.0, value(t, fams, "converge_breaker_open", rec("r")))
	assert.Equal(t, 2.0, value(t, fams, "converge_breaker_openings_total", rec("r")))
	m.Round(mod, "r", metrics.RoundStats{BreakerOpened: 3})
	fams = gather(t, m)
	assert.Equal(t, 0.0, value(t, fams, "converge_breaker_open", rec("r")))
	assert.Equal(t, 3.0, value(t, fams, "converge_breaker_openings_total", rec("r")))

	m.Round(mod, "r", metrics.RoundStats{OldestPending: 1500 * time.Millisecond, UnfinishedWork: time.Second, LongestRunning: 250 * time.Millisecond})
	m.QueueLength(mod, "r", 6, 9)
	fams = gather(t, m)
	assert.Equal(t, 1.5, value(t, fams, "converge_oldest_pending_seconds", rec("r")))
	assert.Equal(t, 1.0, value(t, fams, "converge_workqueue_unfinished_work_seconds", rec("r")))
	assert.Equal(t, 0.25, value(t, fams, "converge_workqueue_longest_running_processor_seconds", rec("r")))
	assert.Equal(t, 6.0, value(t, fams, "converge_retry_queue_length", rec("r")), "QueueLength sets the same gauges")
	assert.Equal(t, 9.0, value(t, fams, "converge_operations_in_flight", rec("r")))
}

func TestRefreshMarked(t *testing.T) {
	m := convergeprom.New()
	m.RefreshMarked(mod, "r", 1000)
	m.RefreshMarked(mod, "r", 1)
	m.RefreshMarked(mod, "other", 2)
	fams := gather(t, m)
	assert.Equal(t, 1001.0, value(t, fams, "converge_refresh_marks_total", rec("r")))
	assert.Equal(t, 2.0, value(t, fams, "converge_refresh_marks_total", rec("other")))
}

func TestConvergedRecordsNothing(t *testing.T) {
	// The latency histogram takes each latency from Committed; Converged,
	// which only has a sum, must not add a second observation.
	m := convergeprom.New()
	m.Converged(mod, "r", 3, 3*time.Second, 2*time.Second)
	assert.Zero(t, testutil.CollectAndCount(m), "no series")
}

func TestSteadyStateCallsDoNotAllocate(t *testing.T) {
	m := convergeprom.New()
	var upd metrics.OutcomeCounts
	upd[metrics.OutcomeSuccess] = 3
	upd[metrics.OutcomeTerminal] = 1
	commit := metrics.CommitStats{Update: upd, Delete: upd,
		QueueWaits: []time.Duration{time.Millisecond}, Latencies: []time.Duration{time.Second}, RefreshRepaired: 1}
	err := errors.New("x")
	calls := func() {
		m.ReconciliationDuration(mod, "r", metrics.OpUpdate, time.Millisecond)
		m.ReconciliationErrors(mod, "r", 1, 1)
		m.PruneError(mod, "r", err)
		m.PruneDuration(mod, "r", time.Millisecond)
		m.QueueLength(mod, "r", 1, 1)
		m.Round(mod, "r", metrics.RoundStats{Adds: 1, Retries: 1, Depth: 1})
		m.Committed(mod, "r", commit)
		m.Pruned(mod, "r", metrics.PruneStats{Outcome: metrics.OutcomeError, Repaired: 1})
		m.RefreshMarked(mod, "r", 1)
	}
	calls()
	assert.Zero(t, testing.AllocsPerRun(100, calls))
}

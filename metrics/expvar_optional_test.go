package metrics_test

import (
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/stretchr/testify/assert"

	"github.com/converge-go/converge/metrics"
)

func TestRound(t *testing.T) {
	m := metrics.NewUnpublishedExpVar()
	mod := cell.FullModuleID{"mod"}
	key := "mod/r"
	m.Round(mod, "r", metrics.RoundStats{Adds: 10, Retries: 2, Depth: 4, Retrying: 3, InFlight: 6,
		OldestPending: 2 * time.Second, UnfinishedWork: 1500 * time.Millisecond, LongestRunning: time.Second, Workers: 4, BusyWorkers: 2})
	m.Round(mod, "r", metrics.RoundStats{Adds: 5, Retries: 1, Depth: 1, Retrying: 0, InFlight: 2,
		OldestPending: 250 * time.Millisecond, Workers: 4, BusyWorkers: 1})

	assert.Equal(t, int64(15), intVal(t, m.QueueAddsVar, key), "adds accumulate")
	assert.Equal(t, int64(3), intVal(t, m.QueueRetriesVar, key), "retries accumulate")
	assert.Equal(t, int64(1), intVal(t, m.QueueDepthVar, key), "depth is a gauge")
	assert.Equal(t, int64(0), intVal(t, m.QueueRetryingVar, key), "retrying is a gauge")
	assert.Equal(t, int64(2), intVal(t, m.QueueInFlightVar, key))
	assert.InDelta(t, 0.25, floatVal(t, m.QueueOldestPendingVar, key), 1e-9)
	assert.Zero(t, floatVal(t, m.QueueUnfinishedWorkVar, key), "nothing running any more")
	assert.Zero(t, floatVal(t, m.QueueLongestRunningVar, key))
	assert.Equal(t, int64(4), intVal(t, m.WorkersVar, key), "workers as configured")
	assert.Equal(t, int64(1), intVal(t, m.BusyWorkersVar, key), "busy workers are a gauge")

	// QueueLength and Round write the same retrying and in-flight figures.
	m.QueueLength(mod, "r", 9, 8)
	assert.Equal(t, int64(9), intVal(t, m.QueueRetryingVar, key))
	m.Round(mod, "r", metrics.RoundStats{Retrying: 7, InFlight: 1})
	assert.Equal(t, int64(7), intVal(t, m.QueueRetryingVar, key))
	assert.Equal(t, int64(1), intVal(t, m.QueueInFlightVar, key))
}

func TestCommitted(t *testing.T) {
	m := metrics.NewUnpublishedExpVar()
	mod := cell.FullModuleID{"mod"}
	var upd, del metrics.OutcomeCounts
	upd[metrics.OutcomeSuccess] = 3
	upd[metrics.OutcomeTimeout] = 1
	del[metrics.OutcomeError] = 2
	m.Committed(mod, "r", metrics.CommitStats{
		Update:     upd,
		Delete:     del,
		QueueWaits: []time.Duration{time.Millisecond, 3 * time.Millisecond, time.Minute},
		Latencies:  []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond},
	})
	upd = metrics.OutcomeCounts{}
	upd[metrics.OutcomePanic] = 1
	upd[metrics.OutcomeTerminal] = 4
	m.Committed(mod, "r", metrics.CommitStats{Update: upd, RefreshRepaired: 3})
	m.Committed(mod, "r", metrics.CommitStats{RefreshRepaired: 2})

	outcomes := map[string]int64{
		"update/success": 3, "update/error": 0, "update/terminal": 4, "update/panic": 1, "update/timeout": 1,
		"delete/success": 0, "delete/error": 2, "delete/terminal": 0, "delete/panic": 0, "delete/timeout": 0,
	}
	for k, want := range outcomes {
		assert.Equal(t, want, intVal(t, m.ReconciliationOutcomesVar, "mod/r/"+k), k)
	}
	assert.Nil(t, m.ReconciliationOutcomesVar.Get("mod/r/prune/success"), "no prune reported")

	w := histogramOf(t, m.QueueWaitHistogramVar, "mod/r")
	assert.Equal(t, 3.0, w["count"], "one wait per operation")
	assert.Equal(t, 1.0, w["0.001"])
	assert.Equal(t, 2.0, w["0.005"])
	assert.Equal(t, 3.0, w["60"])
	l := histogramOf(t, m.ConvergenceDurationHistogramVar, "mod/r")
	assert.Equal(t, 3.0, l["count"], "one latency per object Done")
	assert.InDelta(t, 0.06, l["sum"], 1e-9)
	assert.Equal(t, 1.0, l["0.01"])
	assert.Equal(t, 3.0, l["0.05"])

	assert.Equal(t, int64(5), intVal(t, m.DriftRepairedVar, "mod/r/refresh"))
	assert.Nil(t, m.DriftRepairedVar.Get("mod/r/prune"))
}

func TestCommittedEmptyCreatesNothing(t *testing.T) {
	m := metrics.NewUnpublishedExpVar()
	m.Committed(cell.FullModuleID{"mod"}, "r", metrics.CommitStats{})
	for i, v := range exVars(m) {
		assert.Equal(t, "{}", v.String(), varNames[i])
	}
}

func TestPruned(t *testing.T) {
	m := metrics.NewUnpublishedExpVar()
	mod := cell.FullModuleID{"mod"}
	m.Pruned(mod, "r", metrics.PruneStats{Outcome: metrics.OutcomeSuccess, Repaired: 4})
	m.Pruned(mod, "r", metrics.PruneStats{Outcome: metrics.OutcomeTimeout})
	m.Pruned(mod, "r", metrics.PruneStats{Outcome: metrics.OutcomeSuccess, Repaired: 1})
	assert.Equal(t, int64(2), intVal(t, m.ReconciliationOutcomesVar, "mod/r/prune/success"))
	assert.Equal(t, int64(1), intVal(t, m.ReconciliationOutcomesVar, "mod/r/prune/timeout"))
	assert.Equal(t, int64(0), intVal(t, m.ReconciliationOutcomesVar, "mod/r/prune/error"))
	assert.Equal(t, int64(5), intVal(t, m.DriftRepairedVar, "mod/r/prune"))
	// The seed's prune figures come from PruneError, not from Pruned.
	assert.Nil(t, m.PruneCountVar.Get("mod/r"))
}

func TestRefreshMarked(t *testing.T) {
	m := metrics.NewUnpublishedExpVar()
	mod := cell.FullModuleID{"mod"}
	m.RefreshMarked(mod, "r", 1000)
	m.RefreshMarked(mod, "r", 5)
	m.RefreshMarked(mod, "", 1)
	assert.Equal(t, int64(1005), intVal(t, m.RefreshMarksVar, "mod/r"))
	assert.Equal(t, int64(1), intVal(t, m.RefreshMarksVar, "mod"))
}

func TestSteadyStateCallsDoNotAllocate(t *testing.T) {
	m := metrics.NewUnpublishedExpVar()
	mod := cell.FullModuleID{"agent", "mod"}
	var upd metrics.OutcomeCounts
	upd[metrics.OutcomeSuccess] = 10
	upd[metrics.OutcomeError] = 1
	commit := metrics.CommitStats{
		Update:          upd,
		Delete:          upd,
		QueueWaits:      []time.Duration{time.Millisecond, time.Second},
		Latencies:       []time.Duration{time.Millisecond, time.Second},
		RefreshRepaired: 1,
	}
	round := metrics.RoundStats{Adds: 3, Retries: 1, Depth: 2, Retrying: 1, InFlight: 2,
		OldestPending: time.Second, UnfinishedWork: time.Second, LongestRunning: time.Second}
	calls := func() {
		m.ReconciliationDuration(mod, "r", metrics.OpUpdate, time.Millisecond)
		m.ReconciliationErrors(mod, "r", 1, 2)
		m.PruneError(mod, "r", nil)
		m.PruneDuration(mod, "r", time.Millisecond)
		m.QueueLength(mod, "r", 1, 2)
		m.Converged(mod, "r", 2, time.Second, time.Second)
		m.Round(mod, "r", round)
		m.Committed(mod, "r", commit)
		m.Pruned(mod, "r", metrics.PruneStats{Outcome: metrics.OutcomeSuccess, Repaired: 1})
		m.RefreshMarked(mod, "r", 10)
	}
	calls() // the first calls create the variables
	assert.Zero(t, testing.AllocsPerRun(100, calls))
	assert.Equal(t, int64(102), intVal(t, m.RefreshMarksVar, "agent.mod/r")/10, "every call counted")
}

package metrics

import (
	"expvar"

	"github.com/cilium/hive/cell"

	"github.com/converge-go/converge/metrics/internal/histogram"
)

// The variables of one reconciler that each method of the optional
// interfaces updates.
type (
	roundVars struct {
		adds, retries, depth, retrying, inFlight *expvar.Int
		workers, busy                            *expvar.Int
		breakerOpen, breakerOpenings             *expvar.Int
		oldest, unfinished, longest              *expvar.Float
	}
	commitVars struct {
		wait, latency *histogram.Histogram
	}
	// outcomeVars are the counts of one operation by outcome.
	outcomeVars [numOutcomes]*expvar.Int
)

// Round implements [RoundMetrics].
func (m *ExpVar) Round(moduleID cell.FullModuleID, name string, s RoundStats) {
	v := m.rounds.Get(moduleID, name, "", func(key string) *roundVars {
		return &roundVars{
			adds:       intVar(m.QueueAddsVar, key),
			retries:    intVar(m.QueueRetriesVar, key),
			depth:      intVar(m.QueueDepthVar, key),
			retrying:   intVar(m.QueueRetryingVar, key),
			inFlight:   intVar(m.QueueInFlightVar, key),
			oldest:     floatVar(m.QueueOldestPendingVar, key),
			unfinished: floatVar(m.QueueUnfinishedWorkVar, key),
			longest:    floatVar(m.QueueLongestRunningVar, key),
			workers:    intVar(m.WorkersVar, key),
			busy:       intVar(m.BusyWorkersVar, key),

			breakerOpen:     intVar(m.BreakerOpenVar, key),
			breakerOpenings: intVar(m.BreakerOpeningsVar, key),
		}
	})
	open := int64(0)
	if s.BreakerOpen {
		open = 1
	}
	v.breakerOpen.Set(open)
	v.breakerOpenings.Set(int64(s.BreakerOpened))
	v.adds.Add(int64(s.Adds))
	v.retries.Add(int64(s.Retries))
	v.depth.Set(int64(s.Depth))
	v.retrying.Set(int64(s.Retrying))
	v.inFlight.Set(int64(s.InFlight))
	v.oldest.Set(s.OldestPending.Seconds())
	v.unfinished.Set(s.UnfinishedWork.Seconds())
	v.longest.Set(s.LongestRunning.Seconds())
	v.workers.Set(int64(s.Workers))
	v.busy.Set(int64(s.BusyWorkers))
}

// Committed implements [CommitMetrics].
func (m *ExpVar) Committed(moduleID cell.FullModuleID, name string, s CommitStats) {
	m.countOutcomes(moduleID, name, OpUpdate, &s.Update)
	m.countOutcomes(moduleID, name, OpDelete, &s.Delete)
	if len(s.QueueWaits) > 0 || len(s.Latencies) > 0 {
		v := m.commits.Get(moduleID, name, "", func(key string) *commitVars {
			return &commitVars{
				wait:    histogramVar(m.QueueWaitHistogramVar, key, durationBuckets),
				latency: histogramVar(m.ConvergenceDurationHistogramVar, key, convergenceBuckets),
			}
		})
		v.wait.ObserveAll(s.QueueWaits)
		v.latency.ObserveAll(s.Latencies)
	}
	if s.RefreshRepaired > 0 {
		m.driftVar(moduleID, name, DriftRefresh).Add(int64(s.RefreshRepaired))
	}
}

// Pruned implements [PruneMetrics].
func (m *ExpVar) Pruned(moduleID cell.FullModuleID, name string, s PruneStats) {
	var c OutcomeCounts
	c.Add(s.Outcome)
	m.countOutcomes(moduleID, name, OpPrune, &c)
	m.driftVar(moduleID, name, DriftPrune).Add(int64(s.Repaired))
}

// RefreshMarked implements [RefreshMetrics].
func (m *ExpVar) RefreshMarked(moduleID cell.FullModuleID, name string, marked int) {
	v := m.refreshes.Get(moduleID, name, "", func(key string) *expvar.Int {
		return intVar(m.RefreshMarksVar, key)
	})
	v.Add(int64(marked))
}

// countOutcomes adds c to the outcome counts of operation. The counts of
// every outcome of an operation appear with its first count.
func (m *ExpVar) countOutcomes(moduleID cell.FullModuleID, name, operation string, c *OutcomeCounts) {
	if c.Total() == 0 {
		return
	}
	v := m.outcomes.Get(moduleID, name, operation, func(key string) *outcomeVars {
		var v outcomeVars
		for o := range v {
			v[o] = intVar(m.ReconciliationOutcomesVar, key+"/"+Outcome(o).String())
		}
		return &v
	})
	for o, n := range c {
		if n != 0 {
			v[o].Add(int64(n))
		}
	}
}

func (m *ExpVar) driftVar(moduleID cell.FullModuleID, name, source string) *expvar.Int {
	return m.drift.Get(moduleID, name, source, func(key string) *expvar.Int {
		return intVar(m.DriftRepairedVar, key)
	})
}

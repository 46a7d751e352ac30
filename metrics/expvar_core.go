package metrics

import (
	"expvar"
	"time"

	"github.com/cilium/hive/cell"

	"github.com/converge-go/converge/metrics/internal/histogram"
)

// The variables of one reconciler that each method of [Metrics] and
// [QueueMetrics] updates.
type (
	opVars struct {
		total *expvar.Float
		count *expvar.Int
		hist  *histogram.Histogram
	}
	errorVars struct {
		rounds, total, current *expvar.Int
	}
	pruneVars struct {
		count, total, current *expvar.Int
	}
	queueLengthVars struct {
		retrying, inFlight *expvar.Int
	}
	convergedVars struct {
		total   *expvar.Float
		count   *expvar.Int
		longest *expvar.Float
	}
)

// ReconciliationDuration implements [Metrics]. It is called for every
// operation, so in the steady state it is a lock-free lookup and a few
// atomic adds, and does not allocate.
func (m *ExpVar) ReconciliationDuration(moduleID cell.FullModuleID, name, operation string, d time.Duration) {
	v := m.ops.Get(moduleID, name, operation, func(key string) *opVars {
		return &opVars{
			total: floatVar(m.ReconciliationDurationVar, key),
			count: intVar(m.ReconciliationOperationsVar, key),
			hist:  histogramVar(m.ReconciliationDurationHistogramVar, key, durationBuckets),
		}
	})
	v.total.Add(d.Seconds())
	v.count.Add(1)
	v.hist.Observe(d)
}

// ReconciliationErrors implements [Metrics].
func (m *ExpVar) ReconciliationErrors(moduleID cell.FullModuleID, name string, new, current int) {
	var fresh unpublished
	v := m.errs.Get(moduleID, name, "", func(key string) *errorVars {
		return &errorVars{
			rounds:  fresh.intVar(m.ReconciliationCountVar, key),
			total:   fresh.intVar(m.ReconciliationTotalErrorsVar, key),
			current: fresh.intVar(m.ReconciliationCurrentErrorsVar, key),
		}
	})
	v.rounds.Add(1)
	v.total.Add(int64(new))
	v.current.Set(int64(current))
	fresh.publish()
}

// PruneError implements [Metrics].
func (m *ExpVar) PruneError(moduleID cell.FullModuleID, name string, err error) {
	var fresh unpublished
	v := m.prunes.Get(moduleID, name, "", func(key string) *pruneVars {
		return &pruneVars{
			count:   fresh.intVar(m.PruneCountVar, key),
			total:   fresh.intVar(m.PruneTotalErrorsVar, key),
			current: fresh.intVar(m.PruneCurrentErrorsVar, key),
		}
	})
	var failing int64
	if err != nil {
		failing = 1
	}
	v.count.Add(1)
	v.total.Add(failing)
	v.current.Set(failing)
	fresh.publish()
}

// PruneDuration implements [Metrics].
func (m *ExpVar) PruneDuration(moduleID cell.FullModuleID, name string, d time.Duration) {
	v := m.pruneSeconds.Get(moduleID, name, "", func(key string) *expvar.Float {
		return floatVar(m.PruneDurationVar, key)
	})
	v.Add(d.Seconds())
}

// QueueLength implements [QueueMetrics].
func (m *ExpVar) QueueLength(moduleID cell.FullModuleID, name string, retrying, inFlight int) {
	v := m.queueLengths.Get(moduleID, name, "", func(key string) *queueLengthVars {
		return &queueLengthVars{
			retrying: intVar(m.QueueRetryingVar, key),
			inFlight: intVar(m.QueueInFlightVar, key),
		}
	})
	v.retrying.Set(int64(retrying))
	v.inFlight.Set(int64(inFlight))
}

// Converged implements [QueueMetrics]. The Pending-to-Done histogram is
// fed by [ExpVar.Committed], which receives each latency.
func (m *ExpVar) Converged(moduleID cell.FullModuleID, name string, count int, total, longest time.Duration) {
	if count <= 0 {
		return
	}
	v := m.converged.Get(moduleID, name, "", func(key string) *convergedVars {
		return &convergedVars{
			total:   floatVar(m.ConvergenceDurationVar, key),
			count:   intVar(m.ConvergenceCountVar, key),
			longest: floatVar(m.ConvergenceMaxDurationVar, key),
		}
	})
	v.total.Add(total.Seconds())
	v.count.Add(int64(count))
	m.convergenceMaxMu.Lock()
	defer m.convergenceMaxMu.Unlock()
	if v.longest.Value() < longest.Seconds() {
		v.longest.Set(longest.Seconds())
	}
}

package main

import (
	"net/http"
	"time"

	"github.com/cilium/hive/cell"
	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/converge-go/converge/metrics"
	convergeprom "github.com/converge-go/converge/metrics/prometheus"
)

// promMetrics is the reconciler's metrics and the handler that serves them
// at /metrics. A reconciler has one Metrics; the example's reports every
// figure twice:
//
//   - to converge's Prometheus adapter, registered on a registry of the
//     example's own, never on Prometheus' global one, so that two hives in
//     one process (as in the tests) do not collide;
//   - to converge's expvar metrics, published beside Go's own variables
//     at /debug/vars ("reconciliation_count", "queue_wait_histogram", ...).
//     They are process-wide: hives in one process share them.
//
// One value serves every reconciler of a program; each reconciler's figures
// carry its module ID ("files") and name, as labels or as map keys.
type promMetrics struct {
	teeMetrics
	handler http.Handler
}

func newPromMetrics() promMetrics {
	m := convergeprom.New()
	reg := prom.NewRegistry()
	reg.MustRegister(m)
	return promMetrics{teeMetrics{m, metrics.NewExpVar()}, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}
}

// allMetrics is a Metrics with every optional interface the reconciler
// reports to.
type allMetrics interface {
	metrics.Metrics
	metrics.QueueMetrics
	metrics.RoundMetrics
	metrics.CommitMetrics
	metrics.PruneMetrics
	metrics.RefreshMetrics
}

// teeMetrics reports every figure to each of its metrics, in order.
type teeMetrics []allMetrics

var _ allMetrics = teeMetrics(nil)

func (t teeMetrics) ReconciliationDuration(id cell.FullModuleID, name, operation string, d time.Duration) {
	for _, m := range t {
		m.ReconciliationDuration(id, name, operation, d)
	}
}

func (t teeMetrics) ReconciliationErrors(id cell.FullModuleID, name string, new, current int) {
	for _, m := range t {
		m.ReconciliationErrors(id, name, new, current)
	}
}

func (t teeMetrics) PruneError(id cell.FullModuleID, name string, err error) {
	for _, m := range t {
		m.PruneError(id, name, err)
	}
}

func (t teeMetrics) PruneDuration(id cell.FullModuleID, name string, d time.Duration) {
	for _, m := range t {
		m.PruneDuration(id, name, d)
	}
}

func (t teeMetrics) QueueLength(id cell.FullModuleID, name string, retrying, inFlight int) {
	for _, m := range t {
		m.QueueLength(id, name, retrying, inFlight)
	}
}

func (t teeMetrics) Converged(id cell.FullModuleID, name string, count int, total, longest time.Duration) {
	for _, m := range t {
		m.Converged(id, name, count, total, longest)
	}
}

func (t teeMetrics) Round(id cell.FullModuleID, name string, s metrics.RoundStats) {
	for _, m := range t {
		m.Round(id, name, s)
	}
}

func (t teeMetrics) Committed(id cell.FullModuleID, name string, s metrics.CommitStats) {
	for _, m := range t {
		m.Committed(id, name, s)
	}
}

func (t teeMetrics) Pruned(id cell.FullModuleID, name string, s metrics.PruneStats) {
	for _, m := range t {
		m.Pruned(id, name, s)
	}
}

func (t teeMetrics) RefreshMarked(id cell.FullModuleID, name string, marked int) {
	for _, m := range t {
		m.RefreshMarked(id, name, marked)
	}
}

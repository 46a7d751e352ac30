package main

import (
	"net/http"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	convergeprom "github.com/converge-go/converge/metrics/prometheus"
)

// promMetrics is the reconciler's metrics (converge's Prometheus adapter)
// and the handler that serves them at /metrics. The adapter is registered
// on a registry of the example's own, never on Prometheus' global one, so
// that two hives in one process (as in the tests) do not collide. One
// adapter serves every reconciler of a program; each reconciler's series
// carry its module ID ("files") and name as labels.
//
// A reconciler has one Metrics: the example's reports to Prometheus, and
// /debug/vars (expvar) is left with Go's own variables, such as memstats.
type promMetrics struct {
	*convergeprom.Metrics
	handler http.Handler
}

func newPromMetrics() promMetrics {
	m := convergeprom.New()
	reg := prom.NewRegistry()
	reg.MustRegister(m)
	return promMetrics{m, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}
}

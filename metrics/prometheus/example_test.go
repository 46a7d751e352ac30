package prometheus_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/cilium/hive/cell"
	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/converge-go/converge/metrics"
	convergeprom "github.com/converge-go/converge/metrics/prometheus"
)

func ExampleNew() {
	// One Metrics for every reconciler of the program, registered on the
	// program's own registry and served at /metrics.
	m := convergeprom.New()
	reg := prom.NewRegistry()
	reg.MustRegister(m)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	// Hand it to each reconciler with reconciler.WithMetrics(m), or provide
	// it to the hive as the reconciler.Params' DefaultMetrics. This is what
	// a reconciler named "ipv4" in module agent.routes reports as it works:
	mod := cell.FullModuleID{"agent", "routes"}
	m.ReconciliationDuration(mod, "ipv4", metrics.OpUpdate, 2*time.Millisecond)
	var updates metrics.OutcomeCounts
	updates.Add(metrics.OutcomeSuccess)
	m.Committed(mod, "ipv4", metrics.CommitStats{Update: updates, Latencies: []time.Duration{3 * time.Millisecond}})
	m.ReconciliationErrors(mod, "ipv4", 0, 0)

	fmt.Println(testutil.CollectAndCount(m, "converge_reconcile_total"), "reconcile_total series")
	fmt.Println(testutil.CollectAndCount(m, "converge_convergence_latency_seconds"), "latency histogram")
	// Output:
	// 15 reconcile_total series
	// 1 latency histogram
}

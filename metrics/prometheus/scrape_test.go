package prometheus_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
	convergeprom "github.com/converge-go/converge/metrics/prometheus"
)

func TestScrapeThroughPromhttp(t *testing.T) {
	m := convergeprom.New()
	reg := prom.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	var upd metrics.OutcomeCounts
	upd[metrics.OutcomeSuccess] = 2
	upd[metrics.OutcomeTerminal] = 1
	m.Committed(mod, "r", metrics.CommitStats{Update: upd, Latencies: []time.Duration{time.Millisecond, time.Millisecond}})
	m.ReconciliationErrors(mod, "r", 1, 0)
	m.Round(mod, "r", metrics.RoundStats{Adds: 3, Depth: 2})

	want := `
# HELP converge_reconcile_total Operations by operation and result (success, error, terminal, panic, timeout); a batch counts each object.
# TYPE converge_reconcile_total counter
converge_reconcile_total{module="agent.routes",name="r",operation="delete",result="error"} 0
converge_reconcile_total{module="agent.routes",name="r",operation="delete",result="panic"} 0
converge_reconcile_total{module="agent.routes",name="r",operation="delete",result="success"} 0
converge_reconcile_total{module="agent.routes",name="r",operation="delete",result="terminal"} 0
converge_reconcile_total{module="agent.routes",name="r",operation="delete",result="timeout"} 0
converge_reconcile_total{module="agent.routes",name="r",operation="prune",result="error"} 0
converge_reconcile_total{module="agent.routes",name="r",operation="prune",result="panic"} 0
converge_reconcile_total{module="agent.routes",name="r",operation="prune",result="success"} 0
converge_reconcile_total{module="agent.routes",name="r",operation="prune",result="terminal"} 0
converge_reconcile_total{module="agent.routes",name="r",operation="prune",result="timeout"} 0
converge_reconcile_total{module="agent.routes",name="r",operation="update",result="error"} 0
converge_reconcile_total{module="agent.routes",name="r",operation="update",result="panic"} 0
converge_reconcile_total{module="agent.routes",name="r",operation="update",result="success"} 2
converge_reconcile_total{module="agent.routes",name="r",operation="update",result="terminal"} 1
converge_reconcile_total{module="agent.routes",name="r",operation="update",result="timeout"} 0
# HELP converge_workqueue_adds_total Objects taken for work: changes collected and retries that fell due.
# TYPE converge_workqueue_adds_total counter
converge_workqueue_adds_total{module="agent.routes",name="r"} 3
# HELP converge_workqueue_depth Operations collected and not yet started: waiting for a worker or parked behind an operation on the same object.
# TYPE converge_workqueue_depth gauge
converge_workqueue_depth{module="agent.routes",name="r"} 2
`
	require.NoError(t, testutil.ScrapeAndCompare(srv.URL, strings.NewReader(want),
		"converge_reconcile_total", "converge_workqueue_adds_total", "converge_workqueue_depth"))

	// The raw text a scraper reads.
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	text := string(body)
	assert.Contains(t, text, `converge_convergence_latency_seconds_count{module="agent.routes",name="r"} 2`)
	assert.Contains(t, text, `converge_convergence_latency_seconds_bucket{module="agent.routes",name="r",le="0.001"} 2`)
	assert.Contains(t, text, `converge_terminal_reconcile_errors_total{module="agent.routes",name="r",operation="update"} 1`)
	assert.Contains(t, text, `converge_reconcile_errors_total{module="agent.routes",name="r"} 1`)

	// A later scrape sees later figures.
	m.Round(mod, "r", metrics.RoundStats{Adds: 1})
	require.NoError(t, testutil.ScrapeAndCompare(srv.URL, strings.NewReader(`
# HELP converge_workqueue_adds_total Objects taken for work: changes collected and retries that fell due.
# TYPE converge_workqueue_adds_total counter
converge_workqueue_adds_total{module="agent.routes",name="r"} 4
`), "converge_workqueue_adds_total"))
}

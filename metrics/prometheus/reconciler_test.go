package prometheus_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	convergeindex "github.com/converge-go/converge/index"
	convergeprom "github.com/converge-go/converge/metrics/prometheus"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
)

// The Pending-to-Done histogram counts each object reconciled exactly once,
// however many attempts it took, single and batch, and the outcome counters
// count every attempt. The adapter, fed by a running reconciler, is scraped
// through promhttp, as a Prometheus server would. (The reconciler module's
// test of the same name checks the expvar implementation.)
func TestLatencyHistogramCountsObjectsReconciled(t *testing.T) {
	const n, flaky = 200, 20
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			tgt := reconcilertest.NewTarget(itemKey, itemValue)
			var batchOps reconciler.BatchOperations[*item]
			if batch {
				batchOps = tgt
			}
			ops := reconcilertest.NewFaultyOps(itemKey, tgt, batchOps)
			for i := range flaky {
				require.NoError(t, ops.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Key: strconv.Itoa(i), Next: 1}))
			}
			pm := convergeprom.New()
			reg := prom.NewPedanticRegistry()
			require.NoError(t, reg.Register(pm))
			srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
			defer srv.Close()

			db, table, statusIndex := startReconciler(t, ops, ops.Batch(), reconciler.WithMetrics(pm), reconciler.WithPruning(0),
				reconciler.WithRetry(time.Millisecond, 2*time.Millisecond))
			wtxn := db.WriteTxn(table)
			for i := range n {
				_, _, err := table.Insert(wtxn, &item{ID: strconv.Itoa(i), Value: "v", Status: status.Pending()})
				require.NoError(t, err)
			}
			wtxn.Commit()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			require.NoError(t, reconciler.WaitForReconciliation(ctx, db, table, statusIndex))

			// The commit writes the statuses, then reports: wait for the
			// report of the last one.
			counted := fmt.Sprintf("converge_convergence_latency_seconds_count{module=\"test\",name=\"\"} %d\n", n)
			require.Eventually(t, func() bool {
				body, err := scrapeText(srv.URL)
				return err == nil && strings.Contains(body, counted) && testutil.ScrapeAndCompare(srv.URL, strings.NewReader(`
# HELP converge_objects_failing Objects whose last operation failed and that wait for a retry.
# TYPE converge_objects_failing gauge
converge_objects_failing{module="test",name=""} 0
`), "converge_objects_failing") == nil
			}, 5*time.Second, 2*time.Millisecond, "every object counted and objects_failing back to 0")
			require.NoError(t, testutil.ScrapeAndCompare(srv.URL, strings.NewReader(fmt.Sprintf(`
# HELP converge_reconcile_total Operations by operation and result (success, error, terminal, panic, timeout); a batch counts each object.
# TYPE converge_reconcile_total counter
converge_reconcile_total{module="test",name="",operation="delete",result="error"} 0
converge_reconcile_total{module="test",name="",operation="delete",result="panic"} 0
converge_reconcile_total{module="test",name="",operation="delete",result="success"} 0
converge_reconcile_total{module="test",name="",operation="delete",result="terminal"} 0
converge_reconcile_total{module="test",name="",operation="delete",result="timeout"} 0
converge_reconcile_total{module="test",name="",operation="prune",result="error"} 0
converge_reconcile_total{module="test",name="",operation="prune",result="panic"} 0
converge_reconcile_total{module="test",name="",operation="prune",result="success"} 0
converge_reconcile_total{module="test",name="",operation="prune",result="terminal"} 0
converge_reconcile_total{module="test",name="",operation="prune",result="timeout"} 0
converge_reconcile_total{module="test",name="",operation="update",result="error"} %d
converge_reconcile_total{module="test",name="",operation="update",result="panic"} 0
converge_reconcile_total{module="test",name="",operation="update",result="success"} %d
converge_reconcile_total{module="test",name="",operation="update",result="terminal"} 0
converge_reconcile_total{module="test",name="",operation="update",result="timeout"} 0
# HELP converge_retry_queue_length Objects waiting for a retry.
# TYPE converge_retry_queue_length gauge
converge_retry_queue_length{module="test",name=""} 0
`, flaky, n)), "converge_reconcile_total", "converge_retry_queue_length"))

			body, err := scrapeText(srv.URL)
			require.NoError(t, err)
			assert.Contains(t, body, fmt.Sprintf("converge_convergence_latency_seconds_count{module=\"test\",name=\"\"} %d\n", n))
			assert.Contains(t, body, fmt.Sprintf("converge_convergence_latency_seconds_bucket{module=\"test\",name=\"\",le=\"+Inf\"} %d\n", n))
			assert.Contains(t, body, fmt.Sprintf("converge_workqueue_retries_total{module=\"test\",name=\"\"} %d\n", flaky))
		})
	}
}

// scrapeText returns the text a scraper reads from url.
func scrapeText(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(body), err
}

// startReconciler starts a hive with the items table and its reconciler in
// module "test", with ops, batch (which may be nil) and opts, and returns
// the table and its status index. The hive stops when the test ends. It
// logs to the test's log, and a benchmark's nowhere.
func startReconciler(t testing.TB, ops reconciler.Operations[*item], batch reconciler.BatchOperations[*item], opts ...reconciler.Option) (*statedb.DB, statedb.RWTable[*item], statedb.Index[*item, status.Kind]) {
	statusIndex := convergeindex.NewStatusIndex((*item).getStatus)
	var (
		db    *statedb.DB
		table statedb.RWTable[*item]
	)
	h := hive.New(
		statedb.Cell,
		job.Cell,
		cell.Provide(cell.NewSimpleHealth),
		cell.Module("test", "Test module",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(p reconciler.Params) error {
				var err error
				db = p.DB
				if table, err = statedb.NewTable(p.DB, "items", itemID, statusIndex); err != nil {
					return err
				}
				_, err = reconciler.Register(p, table, (*item).clone, (*item).setStatus, (*item).getStatus, ops, batch, opts...)
				return err
			}),
		),
	)
	// A benchmark's log would bury its figures.
	log := slog.New(slog.DiscardHandler)
	if _, ok := t.(*testing.T); ok {
		log = hivetest.Logger(t)
	}
	require.NoError(t, h.Start(log, context.Background()))
	t.Cleanup(func() { assert.NoError(t, h.Stop(log, context.Background())) })
	return db, table, statusIndex
}

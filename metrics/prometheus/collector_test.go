package prometheus_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
	convergeprom "github.com/converge-go/converge/metrics/prometheus"
)

// exercise reports every kind of figure for two reconcilers.
func exercise(m *convergeprom.Metrics) {
	var c metrics.OutcomeCounts
	for _, o := range metrics.Outcomes() {
		c.Add(o)
	}
	for _, name := range []string{"r1", "r2"} {
		m.ReconciliationDuration(mod, name, metrics.OpUpdate, time.Millisecond)
		m.ReconciliationDuration(mod, name, metrics.OpDelete, time.Millisecond)
		m.ReconciliationErrors(mod, name, 1, 1)
		m.PruneError(mod, name, errors.New("x"))
		m.PruneDuration(mod, name, time.Millisecond)
		m.QueueLength(mod, name, 1, 1)
		m.Converged(mod, name, 1, time.Second, time.Second)
		m.Round(mod, name, metrics.RoundStats{Adds: 1, Retries: 1, Depth: 1, Retrying: 1, InFlight: 1,
			OldestPending: time.Second, UnfinishedWork: time.Second, LongestRunning: time.Second})
		m.Committed(mod, name, metrics.CommitStats{Update: c, Delete: c,
			QueueWaits: []time.Duration{time.Millisecond}, Latencies: []time.Duration{time.Second}, RefreshRepaired: 1})
		m.Pruned(mod, name, metrics.PruneStats{Outcome: metrics.OutcomeTimeout, Repaired: 1})
		m.RefreshMarked(mod, name, 1)
	}
}

// familyNames are the names of every family, without the namespace.
var familyNames = []string{
	"workqueue_depth",
	"workqueue_adds_total",
	"workqueue_retries_total",
	"workqueue_queue_duration_seconds",
	"workqueue_work_duration_seconds",
	"workqueue_unfinished_work_seconds",
	"workqueue_longest_running_processor_seconds",
	"reconcile_total",
	"reconcile_errors_total",
	"terminal_reconcile_errors_total",
	"reconcile_panics_total",
	"reconcile_timeouts_total",
	"reconcile_time_seconds",
	"max_concurrent_reconciles",
	"active_workers",
	"convergence_latency_seconds",
	"objects_failing",
	"retry_queue_length",
	"operations_in_flight",
	"oldest_pending_seconds",
	"reconcile_rounds_total",
	"prune_total",
	"prune_errors_total",
	"prune_failing",
	"prune_duration_seconds",
	"refresh_marks_total",
	"drift_repaired_total",
	"breaker_open",
	"breaker_openings_total",
}

func TestFamiliesAndLabels(t *testing.T) {
	m := convergeprom.New()
	exercise(m)
	fams := gather(t, m)
	var want []string
	for _, n := range familyNames {
		want = append(want, "converge_"+n)
	}
	var got []string
	allowed := map[string]bool{"module": true, "name": true, "operation": true, "result": true}
	for name, f := range fams {
		got = append(got, name)
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				assert.True(t, allowed[l.GetName()], "%s has label %s", name, l.GetName())
			}
		}
	}
	assert.ElementsMatch(t, want, got)

	// Cardinality is bounded by reconcilers, operations and outcomes:
	// 2 reconcilers × 3 operations × 5 results.
	assert.Len(t, fams["converge_reconcile_total"].GetMetric(), 2*3*5)
	assert.Len(t, fams["converge_workqueue_depth"].GetMetric(), 2)
}

func TestLint(t *testing.T) {
	m := convergeprom.New()
	exercise(m)
	problems, err := testutil.CollectAndLint(m)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

func TestNamespace(t *testing.T) {
	m := convergeprom.New(convergeprom.WithNamespace(""))
	exercise(m)
	fams := gather(t, m)
	for _, n := range familyNames {
		assert.Contains(t, fams, n, "without a namespace, client-go's and controller-runtime's own names")
	}
	m = convergeprom.New(convergeprom.WithNamespace("agent"))
	exercise(m)
	assert.Contains(t, gather(t, m), "agent_workqueue_depth")
}

func TestNoGlobalRegistration(t *testing.T) {
	m := convergeprom.New()
	exercise(m)
	fams, err := prom.DefaultGatherer.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		assert.False(t, strings.HasPrefix(f.GetName(), "converge_"), "%s is registered globally", f.GetName())
	}
}

func TestRegistration(t *testing.T) {
	reg := prom.NewPedanticRegistry()
	require.NoError(t, reg.Register(convergeprom.New()))
	err := reg.Register(convergeprom.New())
	var already prom.AlreadyRegisteredError
	assert.ErrorAs(t, err, &already, "a second instance with the same namespace is refused")
	assert.NoError(t, reg.Register(convergeprom.New(convergeprom.WithNamespace("other"))))
}

func TestSeriesExistFromFirstReport(t *testing.T) {
	// A reconciler's counters exist at zero from its first report, so that
	// rate() and absent() work before the first failure.
	m := convergeprom.New()
	m.ReconciliationErrors(cell.FullModuleID{"m"}, "r", 0, 0)
	fams := gather(t, m)
	labels := map[string]string{"module": "m", "name": "r", "operation": "update", "result": "error"}
	assert.Equal(t, 0.0, value(t, fams, "converge_reconcile_total", labels))
	assert.Equal(t, 0.0, value(t, fams, "converge_reconcile_errors_total", map[string]string{"module": "m", "name": "r"}))
}

func TestCorePackagesDoNotImportClientGolang(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH")
	}
	cmd := exec.Command(goBin, "list", "-e", "-deps", "-f", "{{.ImportPath}}",
		"github.com/converge-go/converge/metrics",
		"github.com/converge-go/converge/reconciler",
		"github.com/converge-go/converge/status",
		"github.com/converge-go/converge/index")
	out, err := cmd.Output()
	require.NoError(t, err)
	for _, dep := range strings.Fields(string(out)) {
		assert.False(t, strings.HasPrefix(dep, "github.com/prometheus/"), "a core package depends on %s", dep)
	}
	assert.Contains(t, string(out), "github.com/converge-go/converge/metrics", "go list listed the packages")
}

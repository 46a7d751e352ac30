package metrics_test

import (
	"encoding/json"
	"errors"
	"expvar"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
)

// uniqueModule returns a module ID no other test uses, so tests on the
// process-wide published variables do not see each other's figures, even
// with -count.
var moduleSeq struct {
	sync.Mutex
	n int
}

func uniqueModule(t testing.TB) cell.FullModuleID {
	moduleSeq.Lock()
	defer moduleSeq.Unlock()
	moduleSeq.n++
	return cell.FullModuleID{"test", strings.ReplaceAll(t.Name(), "/", "_"), fmt.Sprint(moduleSeq.n)}
}

func intVal(t testing.TB, m *expvar.Map, key string) int64 {
	t.Helper()
	v := m.Get(key)
	require.NotNil(t, v, "no variable under %q in %s", key, m)
	i, ok := v.(*expvar.Int)
	require.True(t, ok, "%q is a %T, not an *expvar.Int", key, v)
	return i.Value()
}

func floatVal(t testing.TB, m *expvar.Map, key string) float64 {
	t.Helper()
	v := m.Get(key)
	require.NotNil(t, v, "no variable under %q in %s", key, m)
	f, ok := v.(*expvar.Float)
	require.True(t, ok, "%q is a %T, not an *expvar.Float", key, v)
	return f.Value()
}

func TestKey(t *testing.T) {
	tests := []struct {
		module cell.FullModuleID
		name   string
		want   string
	}{
		{cell.FullModuleID{"agent", "routes"}, "", "agent.routes"},
		{cell.FullModuleID{"agent", "routes"}, "ipv4", "agent.routes/ipv4"},
		{cell.FullModuleID{"mod"}, "", "mod"},
		{cell.FullModuleID{"mod"}, "name", "mod/name"},
		{nil, "", ""},
		{nil, "name", "/name"},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, metrics.Key(tc.module, tc.name), "%v %q", tc.module, tc.name)
	}
}

func TestOperationNames(t *testing.T) {
	assert.Equal(t, "update", metrics.OpUpdate)
	assert.Equal(t, "delete", metrics.OpDelete)
}

func TestReconciliationDuration(t *testing.T) {
	m := metrics.NewUnpublishedExpVar()
	mod := cell.FullModuleID{"agent", "mod"}

	m.ReconciliationDuration(mod, "r", metrics.OpUpdate, 2*time.Second)
	m.ReconciliationDuration(mod, "r", metrics.OpUpdate, 500*time.Millisecond)
	m.ReconciliationDuration(mod, "r", metrics.OpDelete, time.Second)
	m.ReconciliationDuration(mod, "", metrics.OpUpdate, 250*time.Millisecond)
	m.ReconciliationDuration(cell.FullModuleID{"other"}, "r", metrics.OpUpdate, time.Second)

	assert.InDelta(t, 2.5, floatVal(t, m.ReconciliationDurationVar, "agent.mod/r/update"), 1e-9)
	assert.Equal(t, int64(2), intVal(t, m.ReconciliationOperationsVar, "agent.mod/r/update"))
	assert.InDelta(t, 1.0, floatVal(t, m.ReconciliationDurationVar, "agent.mod/r/delete"), 1e-9)
	assert.Equal(t, int64(1), intVal(t, m.ReconciliationOperationsVar, "agent.mod/r/delete"))
	assert.InDelta(t, 0.25, floatVal(t, m.ReconciliationDurationVar, "agent.mod/update"), 1e-9)
	assert.Equal(t, int64(1), intVal(t, m.ReconciliationOperationsVar, "agent.mod/update"))
	assert.InDelta(t, 1.0, floatVal(t, m.ReconciliationDurationVar, "other/r/update"), 1e-9)

	// Nothing else is touched.
	assert.Nil(t, m.ReconciliationCountVar.Get("agent.mod/r"))
	assert.Nil(t, m.ReconciliationDurationVar.Get("agent.mod/r"))
	assert.Nil(t, m.PruneDurationVar.Get("agent.mod/r"))
}

func TestReconciliationDurationModuleIDNotRetained(t *testing.T) {
	// The key cache must not keep a reference to the caller's slice.
	m := metrics.NewUnpublishedExpVar()
	mod := cell.FullModuleID{"a", "b"}
	m.ReconciliationDuration(mod, "r", metrics.OpUpdate, time.Second)
	mod[1] = "c"
	m.ReconciliationDuration(mod, "r", metrics.OpUpdate, time.Second)
	assert.Equal(t, int64(1), intVal(t, m.ReconciliationOperationsVar, "a.b/r/update"))
	assert.Equal(t, int64(1), intVal(t, m.ReconciliationOperationsVar, "a.c/r/update"))
}

func TestReconciliationDurationManyKeys(t *testing.T) {
	// More reconcilers than the key cache holds still get correct keys.
	m := metrics.NewUnpublishedExpVar()
	mod := cell.FullModuleID{"m"}
	const n = 100
	for round := range 3 {
		for i := range n {
			op := metrics.OpUpdate
			if i%2 == 1 {
				op = metrics.OpDelete
			}
			m.ReconciliationDuration(mod, fmt.Sprintf("r%d", i), op, time.Duration(i+1)*time.Millisecond)
			_ = round
		}
	}
	for i := range n {
		op := metrics.OpUpdate
		if i%2 == 1 {
			op = metrics.OpDelete
		}
		key := fmt.Sprintf("m/r%d/%s", i, op)
		assert.Equal(t, int64(3), intVal(t, m.ReconciliationOperationsVar, key), key)
		assert.InDelta(t, 3*float64(i+1)/1000, floatVal(t, m.ReconciliationDurationVar, key), 1e-9, key)
	}
}

func TestReconciliationErrors(t *testing.T) {
	m := metrics.NewUnpublishedExpVar()
	mod := cell.FullModuleID{"mod"}

	m.ReconciliationErrors(mod, "name", 2, 3)
	assert.Equal(t, int64(1), intVal(t, m.ReconciliationCountVar, "mod/name"))
	assert.Equal(t, int64(2), intVal(t, m.ReconciliationTotalErrorsVar, "mod/name"))
	assert.Equal(t, int64(3), intVal(t, m.ReconciliationCurrentErrorsVar, "mod/name"))

	m.ReconciliationErrors(mod, "name", 1, 0)
	assert.Equal(t, int64(2), intVal(t, m.ReconciliationCountVar, "mod/name"))
	assert.Equal(t, int64(3), intVal(t, m.ReconciliationTotalErrorsVar, "mod/name"), "total accumulates")
	assert.Equal(t, int64(0), intVal(t, m.ReconciliationCurrentErrorsVar, "mod/name"), "current is replaced")

	m.ReconciliationErrors(mod, "", 0, 5)
	assert.Equal(t, int64(1), intVal(t, m.ReconciliationCountVar, "mod"))
	assert.Equal(t, int64(0), intVal(t, m.ReconciliationTotalErrorsVar, "mod"))
	assert.Equal(t, int64(5), intVal(t, m.ReconciliationCurrentErrorsVar, "mod"))
	assert.Equal(t, int64(0), intVal(t, m.ReconciliationCurrentErrorsVar, "mod/name"), "keys are independent")
}

func TestPrune(t *testing.T) {
	m := metrics.NewUnpublishedExpVar()
	mod := cell.FullModuleID{"mod"}
	key := "mod/name"

	m.PruneError(mod, "name", nil)
	assert.Equal(t, int64(1), intVal(t, m.PruneCountVar, key))
	assert.Equal(t, int64(0), intVal(t, m.PruneTotalErrorsVar, key))
	assert.Equal(t, int64(0), intVal(t, m.PruneCurrentErrorsVar, key))

	m.PruneError(mod, "name", errors.New("boom"))
	m.PruneError(mod, "name", errors.New("boom again"))
	assert.Equal(t, int64(3), intVal(t, m.PruneCountVar, key))
	assert.Equal(t, int64(2), intVal(t, m.PruneTotalErrorsVar, key))
	assert.Equal(t, int64(1), intVal(t, m.PruneCurrentErrorsVar, key))

	m.PruneError(mod, "name", nil)
	assert.Equal(t, int64(4), intVal(t, m.PruneCountVar, key))
	assert.Equal(t, int64(2), intVal(t, m.PruneTotalErrorsVar, key))
	assert.Equal(t, int64(0), intVal(t, m.PruneCurrentErrorsVar, key), "recovers")

	m.PruneDuration(mod, "name", 1500*time.Millisecond)
	m.PruneDuration(mod, "name", 500*time.Millisecond)
	m.PruneDuration(mod, "", time.Second)
	assert.InDelta(t, 2.0, floatVal(t, m.PruneDurationVar, key), 1e-9)
	assert.InDelta(t, 1.0, floatVal(t, m.PruneDurationVar, "mod"), 1e-9)
	assert.Nil(t, m.PruneDurationVar.Get(key+"/update"), "prune durations have no operation suffix")
}

func TestQueueLength(t *testing.T) {
	m := metrics.NewUnpublishedExpVar()
	mod := cell.FullModuleID{"mod"}
	m.QueueLength(mod, "name", 7, 3)
	assert.Equal(t, int64(7), intVal(t, m.QueueRetryingVar, "mod/name"))
	assert.Equal(t, int64(3), intVal(t, m.QueueInFlightVar, "mod/name"))
	m.QueueLength(mod, "name", 0, 1)
	assert.Equal(t, int64(0), intVal(t, m.QueueRetryingVar, "mod/name"), "a gauge, not a counter")
	assert.Equal(t, int64(1), intVal(t, m.QueueInFlightVar, "mod/name"))
	m.QueueLength(mod, "", 2, 2)
	assert.Equal(t, int64(2), intVal(t, m.QueueRetryingVar, "mod"))
}

func TestConverged(t *testing.T) {
	m := metrics.NewUnpublishedExpVar()
	mod := cell.FullModuleID{"mod"}
	key := "mod/name"

	m.Converged(mod, "name", 1, time.Second, time.Second)
	assert.InDelta(t, 1.0, floatVal(t, m.ConvergenceMaxDurationVar, key), 1e-9)
	m.Converged(mod, "name", 1, 3*time.Second, 3*time.Second)
	assert.InDelta(t, 3.0, floatVal(t, m.ConvergenceMaxDurationVar, key), 1e-9, "grows")
	m.Converged(mod, "name", 1, 2*time.Second, 2*time.Second)
	assert.InDelta(t, 3.0, floatVal(t, m.ConvergenceMaxDurationVar, key), 1e-9, "never shrinks")
	m.Converged(mod, "name", 1, 3*time.Second, 3*time.Second)

	assert.Equal(t, int64(4), intVal(t, m.ConvergenceCountVar, key))
	assert.InDelta(t, 9.0, floatVal(t, m.ConvergenceDurationVar, key), 1e-9)

	m.Converged(mod, "other", 1, 10*time.Millisecond, 10*time.Millisecond)
	assert.InDelta(t, 0.01, floatVal(t, m.ConvergenceMaxDurationVar, "mod/other"), 1e-9)
	assert.InDelta(t, 3.0, floatVal(t, m.ConvergenceMaxDurationVar, key), 1e-9, "per key")

	// A zero duration still creates the figures.
	m.Converged(mod, "zero", 1, 0, 0)
	assert.Equal(t, int64(1), intVal(t, m.ConvergenceCountVar, "mod/zero"))
	assert.Zero(t, floatVal(t, m.ConvergenceMaxDurationVar, "mod/zero"))
}

func TestMapRendersJSON(t *testing.T) {
	m := metrics.NewUnpublishedExpVar()
	mod := cell.FullModuleID{"agent", "mod"}
	m.ReconciliationDuration(mod, "r", metrics.OpUpdate, 250*time.Millisecond)
	m.ReconciliationErrors(mod, "r", 1, 1)
	m.PruneError(mod, "r", nil)
	m.PruneDuration(mod, "r", time.Second)
	m.QueueLength(mod, "r", 4, 2)
	m.Converged(mod, "r", 1, 2*time.Second, 2*time.Second)
	m.Round(mod, "r", metrics.RoundStats{Adds: 3, Retries: 1, Depth: 5, Retrying: 4, InFlight: 2,
		OldestPending: 3 * time.Second, UnfinishedWork: time.Second, LongestRunning: 500 * time.Millisecond, Workers: 4, BusyWorkers: 3})
	var update metrics.OutcomeCounts
	update.Add(metrics.OutcomeSuccess)
	update.Add(metrics.OutcomeError)
	m.Committed(mod, "r", metrics.CommitStats{
		Update:          update,
		QueueWaits:      []time.Duration{time.Millisecond, 2 * time.Millisecond},
		Latencies:       []time.Duration{2 * time.Second},
		RefreshRepaired: 1,
	})
	m.Pruned(mod, "r", metrics.PruneStats{Outcome: metrics.OutcomeSuccess, Repaired: 2})
	m.RefreshMarked(mod, "r", 7)

	var got map[string]map[string]any
	require.NoError(t, json.Unmarshal([]byte(m.Map().String()), &got), m.Map().String())
	require.Len(t, got, len(varNames))
	for _, name := range varNames {
		require.Contains(t, got, name)
	}
	durations, convergence := metrics.DurationBuckets(), metrics.ConvergenceBuckets()
	want := map[string]map[string]any{
		"reconciliation_count":              {"agent.mod/r": 1.0},
		"reconciliation_duration":           {"agent.mod/r/update": 0.25},
		"reconciliation_operations":         {"agent.mod/r/update": 1.0},
		"reconciliation_total_errors":       {"agent.mod/r": 1.0},
		"reconciliation_current_errors":     {"agent.mod/r": 1.0},
		"prune_count":                       {"agent.mod/r": 1.0},
		"prune_duration":                    {"agent.mod/r": 1.0},
		"prune_total_errors":                {"agent.mod/r": 0.0},
		"prune_current_errors":              {"agent.mod/r": 0.0},
		"queue_retrying":                    {"agent.mod/r": 4.0},
		"queue_in_flight":                   {"agent.mod/r": 2.0},
		"convergence_count":                 {"agent.mod/r": 1.0},
		"convergence_duration":              {"agent.mod/r": 2.0},
		"convergence_max_duration":          {"agent.mod/r": 2.0},
		"reconciliation_duration_histogram": {"agent.mod/r/update": wantHistogram(durations, 0.25)},
		"reconciliation_outcomes": {
			"agent.mod/r/update/success": 1.0, "agent.mod/r/update/error": 1.0,
			"agent.mod/r/update/terminal": 0.0, "agent.mod/r/update/panic": 0.0, "agent.mod/r/update/timeout": 0.0,
			"agent.mod/r/prune/success": 1.0, "agent.mod/r/prune/error": 0.0,
			"agent.mod/r/prune/terminal": 0.0, "agent.mod/r/prune/panic": 0.0, "agent.mod/r/prune/timeout": 0.0,
		},
		"convergence_duration_histogram": {"agent.mod/r": wantHistogram(convergence, 2)},
		"queue_depth":                    {"agent.mod/r": 5.0},
		"queue_oldest_pending":           {"agent.mod/r": 3.0},
		"queue_unfinished_work":          {"agent.mod/r": 1.0},
		"queue_longest_running":          {"agent.mod/r": 0.5},
		"queue_adds":                     {"agent.mod/r": 3.0},
		"queue_retries":                  {"agent.mod/r": 1.0},
		"queue_wait_histogram":           {"agent.mod/r": wantHistogram(durations, 0.001, 0.002)},
		"refresh_marks":                  {"agent.mod/r": 7.0},
		"drift_repaired":                 {"agent.mod/r/prune": 2.0, "agent.mod/r/refresh": 1.0},
		"workers":                        {"agent.mod/r": 4.0},
		"busy_workers":                   {"agent.mod/r": 3.0},
		"breaker_open":                   {"agent.mod/r": 0.0},
		"breaker_openings":               {"agent.mod/r": 0.0},
	}
	assert.Equal(t, want, got)

	// Map exposes the same variables as the fields.
	for i, v := range exVars(m) {
		assert.Same(t, v, m.Map().Get(varNames[i]), varNames[i])
	}
}

func TestNewExpVarPublishesAndShares(t *testing.T) {
	var a, b *metrics.ExpVar
	require.NotPanics(t, func() { a = metrics.NewExpVar() })
	require.NotPanics(t, func() { b = metrics.NewExpVar() }, "a second NewExpVar must not re-publish")

	av, bv := exVars(a), exVars(b)
	for i, name := range varNames {
		published := expvar.Get(name)
		require.NotNil(t, published, "%s is published", name)
		assert.Same(t, published, av[i], name)
		assert.Same(t, av[i], bv[i], "%s is shared", name)
	}

	mod := uniqueModule(t)
	key := metrics.Key(mod, "r")
	a.ReconciliationErrors(mod, "r", 2, 1)
	b.ReconciliationErrors(mod, "r", 1, 0)
	assert.Equal(t, int64(2), intVal(t, expvar.Get("reconciliation_count").(*expvar.Map), key))
	assert.Equal(t, int64(3), intVal(t, b.ReconciliationTotalErrorsVar, key))
	assert.Equal(t, int64(0), intVal(t, a.ReconciliationCurrentErrorsVar, key))

	// Both instances' Map show the shared figures.
	assert.Contains(t, a.Map().String(), fmt.Sprintf("%q: 2", key))
	assert.Contains(t, b.Map().String(), fmt.Sprintf("%q: 2", key))
}

func TestNewExpVarConcurrent(t *testing.T) {
	const n = 8
	got := make([]*metrics.ExpVar, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = metrics.NewExpVar()
		}()
	}
	wg.Wait()
	for i := range n {
		for j, v := range exVars(got[i]) {
			assert.Same(t, expvar.Get(varNames[j]), v)
		}
	}
}

func TestNewUnpublishedExpVarIndependent(t *testing.T) {
	a := metrics.NewUnpublishedExpVar()
	b := metrics.NewUnpublishedExpVar()
	mod := cell.FullModuleID{"mod"}

	a.ReconciliationErrors(mod, "r", 1, 1)
	a.Converged(mod, "r", 1, time.Second, time.Second)
	assert.Equal(t, int64(1), intVal(t, a.ReconciliationCountVar, "mod/r"))
	assert.Nil(t, b.ReconciliationCountVar.Get("mod/r"), "b does not see a's figures")
	assert.Nil(t, b.ConvergenceMaxDurationVar.Get("mod/r"))
	assert.Equal(t, "{}", b.ReconciliationCountVar.String())

	av, bv := exVars(a), exVars(b)
	published := map[*expvar.Map]string{}
	expvar.Do(func(kv expvar.KeyValue) {
		if m, ok := kv.Value.(*expvar.Map); ok {
			published[m] = kv.Key
		}
	})
	for i, name := range varNames {
		require.NotNil(t, av[i], name)
		assert.NotSame(t, av[i], bv[i], name)
		assert.NotContains(t, published, av[i], "%s of an unpublished instance is published", name)
		assert.NotContains(t, published, bv[i], name)
		if p := expvar.Get(name); p != nil {
			assert.NotSame(t, p, av[i], name)
		}
	}
	assert.NotSame(t, a.Map(), b.Map())
}

func TestReconciliationDurationDoesNotAllocate(t *testing.T) {
	m := metrics.NewUnpublishedExpVar()
	mod := cell.FullModuleID{"agent", "mod"}
	d := 3 * time.Millisecond
	// The first calls build the keys and variables.
	m.ReconciliationDuration(mod, "r", metrics.OpUpdate, d)
	m.ReconciliationDuration(mod, "r", metrics.OpDelete, d)
	m.ReconciliationDuration(mod, "", metrics.OpUpdate, d)

	allocs := testing.AllocsPerRun(200, func() {
		m.ReconciliationDuration(mod, "r", metrics.OpUpdate, d)
		m.ReconciliationDuration(mod, "r", metrics.OpDelete, d)
		m.ReconciliationDuration(mod, "", metrics.OpUpdate, d)
	})
	assert.Zero(t, allocs)
	// Each call counted: 3 initial + 201 runs (AllocsPerRun warms up once).
	assert.Equal(t, int64(202), intVal(t, m.ReconciliationOperationsVar, "agent.mod/r/update"))
}

func TestConcurrentUse(t *testing.T) {
	m := metrics.NewUnpublishedExpVar()
	mod := cell.FullModuleID{"mod"}
	const goroutines, iterations = 4, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := "shared"
			for i := range iterations {
				m.ReconciliationDuration(mod, name, metrics.OpUpdate, time.Millisecond)
				m.ReconciliationDuration(mod, fmt.Sprintf("own%d", g), metrics.OpDelete, time.Millisecond)
				m.ReconciliationErrors(mod, name, 1, i)
				var err error
				if i%2 == 0 {
					err = errors.New("x")
				}
				m.PruneError(mod, name, err)
				m.PruneDuration(mod, name, time.Millisecond)
				m.QueueLength(mod, name, i, g)
				m.Converged(mod, name, 1, time.Duration(g*iterations+i)*time.Millisecond, time.Duration(g*iterations+i)*time.Millisecond)
				if i%50 == 0 {
					_ = m.Map().String()
				}
			}
		}()
	}
	wg.Wait()

	key := "mod/shared"
	total := int64(goroutines * iterations)
	assert.Equal(t, total, intVal(t, m.ReconciliationOperationsVar, key+"/update"))
	assert.InDelta(t, float64(total)/1000, floatVal(t, m.ReconciliationDurationVar, key+"/update"), 1e-6)
	for g := range goroutines {
		assert.Equal(t, int64(iterations), intVal(t, m.ReconciliationOperationsVar, fmt.Sprintf("mod/own%d/delete", g)))
	}
	assert.Equal(t, total, intVal(t, m.ReconciliationCountVar, key))
	assert.Equal(t, total, intVal(t, m.ReconciliationTotalErrorsVar, key))
	assert.Equal(t, total, intVal(t, m.PruneCountVar, key))
	assert.Equal(t, total/2, intVal(t, m.PruneTotalErrorsVar, key))
	assert.Equal(t, total, intVal(t, m.ConvergenceCountVar, key))
	assert.InDelta(t, float64(total-1)/1000, floatVal(t, m.ConvergenceMaxDurationVar, key), 1e-9)
	var js map[string]any
	require.NoError(t, json.Unmarshal([]byte(m.Map().String()), &js))
}

func TestConvergenceMaxSharedAcrossPublishedInstances(t *testing.T) {
	// Published instances share their variables, so the maximum must hold
	// across instances too, including when both create the figure at once.
	a, b := metrics.NewExpVar(), metrics.NewExpVar()
	const trials = 5000
	for i := range trials {
		mod := uniqueModule(t)
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			a.Converged(mod, "r", 1, 5*time.Second, 5*time.Second)
		}()
		go func() {
			defer wg.Done()
			<-start
			b.Converged(mod, "r", 1, 3*time.Second, 3*time.Second)
		}()
		close(start)
		wg.Wait()
		key := metrics.Key(mod, "r")
		require.InDelta(t, 5.0, floatVal(t, a.ConvergenceMaxDurationVar, key), 1e-9, "trial %d", i)
		require.Equal(t, int64(2), intVal(t, a.ConvergenceCountVar, key))
	}

	// Interleaved increasing reports: the maximum ends at the largest.
	mod := uniqueModule(t)
	var wg sync.WaitGroup
	for _, m := range []*metrics.ExpVar{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				m.Converged(mod, "r", 1, time.Duration(i)*time.Millisecond, time.Duration(i)*time.Millisecond)
			}
		}()
	}
	wg.Wait()
	assert.InDelta(t, 1.999, floatVal(t, b.ConvergenceMaxDurationVar, metrics.Key(mod, "r")), 1e-9)
}

func TestImplementsInterfaces(t *testing.T) {
	var m any = metrics.NewUnpublishedExpVar()
	_, ok := m.(metrics.Metrics)
	assert.True(t, ok)
	_, ok = m.(metrics.QueueMetrics)
	assert.True(t, ok)
}

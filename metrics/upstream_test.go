package metrics_test

import (
	"expvar"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	upstream "github.com/cilium/statedb/reconciler"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
)

// orderEnv names the order in which TestUpstreamOrderChild creates the
// two packages' published metrics. expvar is process-wide and names can
// never be unpublished, so each order runs in a fresh child process.
const orderEnv = "CONVERGE_METRICS_UPSTREAM_ORDER"

// runOrder runs TestUpstreamOrderChild with the given order in a child
// process and returns its combined output and whether it succeeded.
func runOrder(t *testing.T, order string) (string, bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestUpstreamOrderChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), orderEnv+"="+order)
	out, err := cmd.CombinedOutput()
	if err != nil {
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "running the child: %s", out)
	}
	return string(out), err == nil
}

func TestUpstreamCoexistence(t *testing.T) {
	// Orders that work: the StateDB reconciler's NewExpVarMetrics first
	// and then NewExpVar, which shares its maps; and NewExpVarWithPrefix in
	// either order.
	for _, order := range []string{"upstream-then-converge", "prefix-then-upstream", "upstream-then-prefix"} {
		t.Run(order, func(t *testing.T) {
			out, ok := runOrder(t, order)
			assert.True(t, ok, "child failed:\n%s", out)
			assert.Contains(t, out, "child checked "+order, "the child ran the check:\n%s", out)
		})
	}
}

func TestUpstreamAfterNewExpVarPanics(t *testing.T) {
	// The order that cannot work, and that the package documentation warns
	// about: NewExpVar first takes the names the StateDB reconciler then
	// publishes with expvar.NewMap, which panics on a taken name. If this
	// starts passing, NewExpVar's documentation must change.
	out, ok := runOrder(t, "converge-then-upstream")
	assert.False(t, ok, "upstream's NewExpVarMetrics did not panic:\n%s", out)
	assert.Contains(t, out, "Reuse of exported var name: reconciliation_count", out)
}

// TestUpstreamOrderChild is the child process of the tests above; it does
// nothing in a normal run.
func TestUpstreamOrderChild(t *testing.T) {
	order := os.Getenv(orderEnv)
	if order == "" {
		t.Skip("run by TestUpstreamCoexistence in a child process")
	}
	mod := cell.FullModuleID{"test", "upstream"}
	switch order {
	case "upstream-then-converge":
		up := upstream.NewExpVarMetrics()
		conv := metrics.NewExpVar()
		checkShared(t, up, conv, "")
		checkBothCount(t, up, conv, mod)
	case "converge-then-upstream":
		metrics.NewExpVar()
		upstream.NewExpVarMetrics() // panics
	case "prefix-then-upstream":
		conv := metrics.NewExpVarWithPrefix("converge_")
		up := upstream.NewExpVarMetrics()
		checkSeparate(t, up, conv, "converge_")
		checkBothCount(t, up, conv, mod)
	case "upstream-then-prefix":
		up := upstream.NewExpVarMetrics()
		conv := metrics.NewExpVarWithPrefix("converge_")
		checkSeparate(t, up, conv, "converge_")
		checkBothCount(t, up, conv, mod)
	default:
		t.Fatalf("unknown order %q", order)
	}
	fmt.Println("child checked", order)
}

// upstreamVars pairs the StateDB reconciler's variables with converge's
// names for them.
func upstreamVars(up *upstream.ExpVarMetrics) map[string]*expvar.Map {
	return map[string]*expvar.Map{
		"reconciliation_count":          up.ReconciliationCountVar,
		"reconciliation_duration":       up.ReconciliationDurationVar,
		"reconciliation_total_errors":   up.ReconciliationTotalErrorsVar,
		"reconciliation_current_errors": up.ReconciliationCurrentErrorsVar,
		"prune_count":                   up.PruneCountVar,
		"prune_duration":                up.PruneDurationVar,
		"prune_total_errors":            up.PruneTotalErrorsVar,
		"prune_current_errors":          up.PruneCurrentErrorsVar,
	}
}

// checkShared checks that conv uses the maps up published, under the same
// names, and that the rest of conv's variables are published too.
func checkShared(t *testing.T, up *upstream.ExpVarMetrics, conv *metrics.ExpVar, prefix string) {
	shared := upstreamVars(up)
	for i, v := range exVars(conv) {
		name := varNames[i]
		assert.Same(t, v, expvar.Get(prefix+name), "%s is published", name)
		if u, ok := shared[name]; ok {
			assert.Same(t, u, v, "%s is shared with the StateDB reconciler", name)
		}
	}
}

// checkSeparate checks that up's maps are published under their names and
// conv's under the prefixed names.
func checkSeparate(t *testing.T, up *upstream.ExpVarMetrics, conv *metrics.ExpVar, prefix string) {
	for name, u := range upstreamVars(up) {
		assert.Same(t, u, expvar.Get(name), name)
	}
	for i, v := range exVars(conv) {
		assert.Same(t, v, expvar.Get(prefix+varNames[i]), varNames[i])
		assert.Same(t, v, conv.Map().Get(varNames[i]), "Map keys without the prefix")
	}
}

// checkBothCount records figures through both and checks that both land.
func checkBothCount(t *testing.T, up *upstream.ExpVarMetrics, conv *metrics.ExpVar, mod cell.FullModuleID) {
	up.ReconciliationErrors(mod, "up", 1, 1)
	up.ReconciliationDuration(mod, "up", upstream.OpUpdate, time.Second)
	conv.ReconciliationErrors(mod, "conv", 2, 2)
	conv.ReconciliationDuration(mod, "conv", metrics.OpUpdate, time.Second)
	assert.Equal(t, int64(1), intVal(t, up.ReconciliationTotalErrorsVar, "test.upstream/up"))
	assert.Equal(t, int64(2), intVal(t, conv.ReconciliationTotalErrorsVar, "test.upstream/conv"))
	assert.InDelta(t, 1.0, floatVal(t, up.ReconciliationDurationVar, "test.upstream/up/update"), 1e-9)
	assert.InDelta(t, 1.0, floatVal(t, conv.ReconciliationDurationVar, "test.upstream/conv/update"), 1e-9)
}

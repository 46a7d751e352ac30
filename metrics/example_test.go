package metrics_test

import (
	"errors"
	"expvar"
	"fmt"
	"time"

	"github.com/cilium/hive/cell"

	"github.com/converge-go/converge/metrics"
)

func ExampleNewUnpublishedExpVar() {
	m := metrics.NewUnpublishedExpVar()
	mod := cell.FullModuleID{"agent", "routes"}

	// What a reconciler named "ipv4" reports as it works.
	m.ReconciliationDuration(mod, "ipv4", metrics.OpUpdate, 250*time.Millisecond)
	m.ReconciliationDuration(mod, "ipv4", metrics.OpUpdate, 250*time.Millisecond)
	m.ReconciliationErrors(mod, "ipv4", 1, 1)
	m.PruneError(mod, "ipv4", errors.New("permission denied"))

	vars := m.Map()
	fmt.Println(vars.Get("reconciliation_duration"))
	fmt.Println(vars.Get("reconciliation_operations"))
	fmt.Println(vars.Get("reconciliation_current_errors"))
	fmt.Println(vars.Get("prune_current_errors"))
	fmt.Println(metrics.Key(mod, "ipv4"))
	// Output:
	// {"agent.routes/ipv4/update": 0.5}
	// {"agent.routes/ipv4/update": 2}
	// {"agent.routes/ipv4": 1}
	// {"agent.routes/ipv4": 1}
	// agent.routes/ipv4
}

func ExampleNewExpVarWithPrefix() {
	// Beside the StateDB reconciler's NewExpVarMetrics, which publishes
	// "reconciliation_count" and others and panics if they are taken,
	// prefixed names are safe whichever is created first.
	m := metrics.NewExpVarWithPrefix("example_")
	mod := cell.FullModuleID{"agent", "routes"}
	m.ReconciliationErrors(mod, "ipv4", 0, 0)

	fmt.Println(expvar.Get("example_reconciliation_count") != nil)
	fmt.Println(expvar.Get("example_queue_depth") != nil)
	// Output:
	// true
	// true
}

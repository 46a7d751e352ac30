package metrics_test

import (
	"errors"
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

package reconcilertest_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/hive/script"
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
)

// Route is the user's object, reconciled into a routing table.
type Route struct {
	Prefix string        `yaml:"prefix"`
	Via    string        `yaml:"via"`
	Status status.Status `yaml:"status"`
}

func (r *Route) Clone() *Route                    { c := *r; return &c }
func (r *Route) GetStatus() status.Status         { return r.Status }
func (r *Route) SetStatus(s status.Status) *Route { r.Status = s; return r }
func (r *Route) TableHeader() []string            { return []string{"Prefix", "Via", "Status"} }
func (r *Route) TableRow() []string               { return []string{r.Prefix, r.Via, r.Status.String()} }
func routeKey(r *Route) string                    { return r.Prefix }
func routeVia(r *Route) string                    { return r.Via }
func newRouteTable(db *statedb.DB) (statedb.RWTable[*Route], error) {
	return statedb.NewTable(db, "routes", statedb.Index[*Route, string]{
		Name:       "prefix",
		FromObject: func(r *Route) index.KeySet { return index.NewKeySet(index.String(r.Prefix)) },
		FromKey:    index.String,
		FromString: index.FromString,
		Unique:     true,
	})
}

// newRouteEngine is what a user's script test builds for each script: the
// hive with the reconciler, its operations a FaultyOps around a recording
// Target, and the script commands. In a test, pass it to scripttest.Test.
func newRouteEngine(log *slog.Logger) (*script.Engine, *hive.Hive, *reconcilertest.FaultyOps[*Route]) {
	reg := reconcilertest.NewRegistry()
	target := reconcilertest.NewTarget(routeKey, routeVia)
	ops := reconcilertest.NewFaultyOps(routeKey, target, nil)
	h := hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth),
		cell.Module("routes", "Routes", cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(p reconciler.Params, health *cell.SimpleHealth) error {
				routes, err := newRouteTable(p.DB)
				if err != nil {
					return err
				}
				r, err := reconciler.Register(p, routes, (*Route).Clone, (*Route).SetStatus, (*Route).GetStatus, ops, nil)
				if err != nil {
					return err
				}
				return reconcilertest.Add(reg, reconcilertest.Subject[*Route]{
					DB: p.DB, Table: routes, Reconciler: r, GetStatus: (*Route).GetStatus,
					Target: target, Faults: ops, Health: health,
				})
			})))
	cmds, _ := h.ScriptCommands(log)
	maps.Insert(cmds, maps.All(script.DefaultCmds()))
	maps.Insert(cmds, maps.All(reconcilertest.ScriptCommands(reg)))
	return &script.Engine{Cmds: cmds}, h, ops
}

// A script injects one failure, inserts a route and waits until the
// target equals the table. The calls show the failed attempt and the retry.
func Example() {
	log := slog.New(slog.DiscardHandler)
	engine, h, ops := newRouteEngine(log)
	defer h.Stop(log, context.Background())

	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	_ = os.WriteFile(filepath.Join(dir, "route.yaml"), []byte("prefix: 10.0.0.0/8\nvia: eth0\nstatus: {kind: Pending}\n"), 0o644)
	state, _ := script.NewState(context.Background(), dir, nil)

	err := engine.Execute(state, "example", bufio.NewReader(strings.NewReader(`
hive start
reconciler/fault --key=10.0.0.0/8 --next=1 error
db/insert routes route.yaml
reconciler/wait --key=10.0.0.0/8
reconciler/status --kind=Done 10.0.0.0/8
reconciler/target --table
reconciler/health --level=OK
hive stop
`)), &strings.Builder{})
	fmt.Println("script error:", err)
	for _, c := range ops.Calls() {
		if c.Op == reconcilertest.OpUpdate { // leave out the prune at start
			fmt.Println(c)
		}
	}
	// Output:
	// script error: <nil>
	// update 10.0.0.0/8 rev=1 err=injected fault: update 10.0.0.0/8
	// update 10.0.0.0/8 rev=2
}

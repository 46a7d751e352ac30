package reconcilertest_test

import (
	"context"
	"flag"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/hive/script"
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	convergeindex "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// item is the object the tests reconcile. Status serves an unnamed
// reconciler; Statuses serves named ones.
type item struct {
	ID       string        `json:"id" yaml:"id"`
	Value    string        `json:"value" yaml:"value"`
	Status   status.Status `json:"status" yaml:"status"`
	Statuses status.Set    `json:"statuses" yaml:"statuses"`
}

func (it *item) clone() *item                    { c := *it; return &c }
func (it *item) getStatus() status.Status        { return it.Status }
func (it *item) setStatus(s status.Status) *item { it.Status = s; return it }
func (it *item) TableHeader() []string           { return []string{"ID", "Value", "Status"} }
func (it *item) TableRow() []string              { return []string{it.ID, it.Value, it.Status.Kind.String()} }
func itemKey(it *item) string                    { return it.ID }
func itemValue(it *item) string                  { return it.Value }

var itemID = statedb.Index[*item, string]{
	Name:       "id",
	FromObject: func(it *item) index.KeySet { return index.NewKeySet(index.String(it.ID)) },
	FromKey:    index.String,
	FromString: index.FromString,
	Unique:     true,
}

// fixtureFlags configure a script's reconcilers from its "#!" line.
type fixtureFlags struct {
	batch       bool
	workers     int
	prune       time.Duration
	reconcilers string
	sameHive    bool
	tables      bool
	mapTarget   string
}

func parseFixtureFlags(args []string) (fixtureFlags, error) {
	var f fixtureFlags
	fs := flag.NewFlagSet("script", flag.ContinueOnError)
	fs.BoolVar(&f.batch, "batch", false, "use BatchOperations")
	fs.IntVar(&f.workers, "workers", 1, "WithConcurrency")
	fs.DurationVar(&f.prune, "prune", 0, "WithPruning interval (0: only on request)")
	fs.StringVar(&f.reconcilers, "reconcilers", "", "comma-separated names of reconcilers sharing Statuses")
	fs.BoolVar(&f.sameHive, "same-hive", false, "use the hive's own commands: 'hive start' after 'hive stop' starts the same hive")
	fs.BoolVar(&f.tables, "tables", false, "include tables.Cell, for reconciler/retries")
	fs.StringVar(&f.mapTarget, "map-target", "", "reconcile into a mapTarget, a TargetReader of the test's own, instead of a Target: read-only or writable")
	return f, fs.Parse(args)
}

// fixture is the world of one script: a target and faults outside the
// hive, kept across restarts, and a Restarter building hives around them,
// or with -same-hive one hive that is stopped and started again.
type fixture struct {
	flags     fixtureFlags
	reg       *reconcilertest.Registry
	target    *reconcilertest.Target[*item]
	faults    *reconcilertest.FaultyOps[*item]
	restarter *reconcilertest.Restarter     // nil with -same-hive
	hive      *hive.Hive                    // the hive of -same-hive
	hiveCmds  map[string]script.Cmd         // its commands
	last      reconcilertest.Subject[*item] // the subject added last

	// With -map-target, the reconciler's operations are mapTarget's
	// instead of target's, and the commands read it through reader.
	mapTarget *mapTarget
	reader    reconcilertest.TargetReader
}

func newFixture(t testing.TB, args []string) *fixture {
	flags, err := parseFixtureFlags(args)
	require.NoError(t, err)
	f := &fixture{flags: flags, reg: reconcilertest.NewRegistry()}
	f.target = reconcilertest.NewTarget(itemKey, itemValue)
	var ops reconciler.Operations[*item] = f.target
	var batch reconciler.BatchOperations[*item]
	if flags.batch {
		batch = f.target
	}
	if flags.mapTarget != "" {
		require.False(t, flags.batch, "-map-target has no batch operations")
		f.mapTarget = newMapTarget()
		ops, f.reader = f.mapTarget, f.mapTarget
		switch flags.mapTarget {
		case "read-only":
		case "writable":
			f.reader = writableMapTarget{f.mapTarget}
		default:
			require.Failf(t, "bad -map-target", "want read-only or writable, got %q", flags.mapTarget)
		}
	}
	f.faults = reconcilertest.NewFaultyOps(itemKey, ops, batch)
	log := hivetest.Logger(t)
	if flags.sameHive {
		f.hive = f.newHive()
		f.hiveCmds, err = f.hive.ScriptCommands(log)
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, f.hive.Stop(log, context.Background())) })
		return f
	}
	f.restarter, err = reconcilertest.NewRestarter(log, f.newHive)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, f.restarter.Stop(context.Background())) })
	return f
}

// newHive builds one incarnation of the program: a new StateDB with the
// items table, which has an initializer that "items/init" completes, and
// the reconcilers.
func (f *fixture) newHive() *hive.Hive {
	cells := []cell.Cell{
		statedb.Cell,
		job.Cell,
		cell.Provide(cell.NewSimpleHealth),
		f.reg.Cell(),
		cell.Module("test", "reconcilertest fixture",
			cell.Provide(job.Registry.NewGroup),
			cell.Provide(f.register),
		),
	}
	if f.flags.tables {
		cells = append(cells, tables.Cell)
	}
	return hive.New(cells...)
}

func (f *fixture) register(p reconciler.Params, health *cell.SimpleHealth, reg *reconcilertest.Registry) (hive.ScriptCmdOut, error) {
	statusIdx := convergeindex.NewStatusIndex((*item).getStatus)
	table, err := statedb.NewTable(p.DB, "items", itemID, statusIdx)
	if err != nil {
		return hive.ScriptCmdOut{}, err
	}
	wtxn := p.DB.WriteTxn(table)
	done := table.RegisterInitializer(wtxn, "items-source")
	wtxn.Commit()
	initCmd := script.Command(script.CmdUsage{Summary: "mark the items table initialized"},
		func(*script.State, ...string) (script.WaitFunc, error) {
			wtxn := p.DB.WriteTxn(table)
			done(wtxn)
			wtxn.Commit()
			return nil, nil
		})

	m := metrics.NewUnpublishedExpVar()
	names := []string{""}
	if f.flags.reconcilers != "" {
		names = strings.Split(f.flags.reconcilers, ",")
	}
	for _, name := range names {
		opts := []reconciler.Option{
			reconciler.WithMetrics(m),
			reconciler.WithRetry(10*time.Millisecond, 50*time.Millisecond),
			reconciler.WithConcurrency(f.flags.workers),
			reconciler.WithPruning(0),
		}
		if f.flags.prune > 0 {
			opts = append(opts, reconciler.WithPruning(f.flags.prune))
		}
		get, set := (*item).getStatus, (*item).setStatus
		if name != "" {
			opts = append(opts, reconciler.WithName(name))
			get = func(it *item) status.Status { return it.Statuses.Get(name) }
			set = func(it *item, s status.Status) *item { it.Statuses = it.Statuses.Set(name, s); return it }
		}
		r, err := reconciler.Register(p, table, (*item).clone, set, get, f.faults, f.faults.Batch(), opts...)
		if err != nil {
			return hive.ScriptCmdOut{}, err
		}
		f.last = reconcilertest.Subject[*item]{
			Name: name, DB: p.DB, Table: table, Reconciler: r, GetStatus: get,
			Target: f.target, Faults: f.faults, Health: health, Metrics: m,
		}
		if f.reader != nil {
			f.last.Target, f.last.TargetReader = nil, f.reader
			f.last.Key, f.last.Value = itemKey, itemValue
		}
		if err := reconcilertest.Add(reg, f.last); err != nil {
			return hive.ScriptCmdOut{}, err
		}
	}
	return hive.NewScriptCmd("items/init", initCmd), nil
}

// engine returns a script engine with the hive's commands (through the
// Restarter, or the hive's own with -same-hive), the default commands and
// reconcilertest's.
func (f *fixture) engine() *script.Engine {
	cmds := maps.Clone(f.hiveCmds)
	if f.restarter != nil {
		cmds = f.restarter.ScriptCommands()
	}
	maps.Insert(cmds, maps.All(script.DefaultCmds()))
	maps.Insert(cmds, maps.All(reconcilertest.ScriptCommands(f.reg)))
	return &script.Engine{Cmds: cmds, RetryInterval: 10 * time.Millisecond}
}

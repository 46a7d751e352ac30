package reconciler_test

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/hive/script"
	"github.com/cilium/hive/script/scripttest"
	"github.com/cilium/statedb"
	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	convergeindex "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/metrics"
	convergeprom "github.com/converge-go/converge/metrics/prometheus"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
)

// TestScripts runs the end-to-end scripts in ../testdata against a real
// hive, StateDB and reconciler, with statedb's commands and reconcilertest's.
// The reconciler's operations are a reconcilertest.FaultyOps around a
// reconcilertest.Target. The first line of a script may configure the
// reconciler, for example "#! -batch -workers=4"; see parseScriptFlags.
func TestScripts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	scripttest.Test(t, ctx, newScriptEngine, nil, "../testdata/*.txtar")
}

type scriptFlags struct {
	batch       bool
	workers     int
	prune       time.Duration
	refresh     time.Duration
	retryMin    time.Duration
	retryMax    time.Duration
	reconcilers string
	timeout     time.Duration
	newHive     bool
	tables      bool
	metrics     string
}

func parseScriptFlags(args []string) (scriptFlags, error) {
	var f scriptFlags
	fs := flag.NewFlagSet("script", flag.ContinueOnError)
	fs.BoolVar(&f.batch, "batch", false, "use BatchOperations")
	fs.IntVar(&f.workers, "workers", 1, "WithConcurrency")
	fs.DurationVar(&f.prune, "prune", 0, "WithPruning interval (0: WithoutPruning)")
	fs.DurationVar(&f.refresh, "refresh", 0, "WithRefreshing interval")
	fs.DurationVar(&f.retryMin, "retry-min", 10*time.Millisecond, "minimum backoff")
	fs.DurationVar(&f.retryMax, "retry-max", 50*time.Millisecond, "maximum backoff")
	fs.StringVar(&f.reconcilers, "reconcilers", "", "comma-separated names of reconcilers sharing Statuses")
	fs.DurationVar(&f.timeout, "op-timeout", 0, "WithOperationTimeout")
	fs.BoolVar(&f.newHive, "new-hive", false, "'hive start' after 'hive stop' starts a new hive (reconcilertest.Restarter), not the same one")
	fs.BoolVar(&f.tables, "tables", false, "include reconciler.TablesCell (the reconcilers and reconciler-retries tables)")
	fs.StringVar(&f.metrics, "metrics", "expvar", "the reconcilers' metrics: expvar (reconciler/metrics) or prometheus (prom/metrics)")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if f.metrics != "expvar" && f.metrics != "prometheus" {
		return f, fmt.Errorf("-metrics: want expvar or prometheus, got %q", f.metrics)
	}
	return f, nil
}

func itemKey(it *item) string   { return it.ID }
func itemValue(it *item) string { return it.Value }

// newScriptEngine builds a script's world: the target and the faults
// outside the hive, the hive (or a Restarter building hives) and the
// commands.
func newScriptEngine(t testing.TB, args []string) *script.Engine {
	flags, err := parseScriptFlags(args)
	require.NoError(t, err)
	log := hivetest.Logger(t)
	reg := reconcilertest.NewRegistry()
	tgt := reconcilertest.NewTarget(itemKey, itemValue)
	var batch reconciler.BatchOperations[*item]
	if flags.batch {
		batch = tgt
	}
	ops := reconcilertest.NewFaultyOps(itemKey, tgt, batch)
	newHive := func() *hive.Hive {
		// A new process starts counting from zero.
		var (
			m       metrics.Metrics
			expVar  *metrics.ExpVar
			promCmd = cell.Group()
		)
		switch flags.metrics {
		case "prometheus":
			pm := convergeprom.New()
			preg := prom.NewPedanticRegistry()
			preg.MustRegister(pm)
			m = pm
			promCmd = cell.Provide(func() hive.ScriptCmdOut { return hive.NewScriptCmd("prom/metrics", promMetricsCmd(preg)) })
		default:
			expVar = metrics.NewUnpublishedExpVar()
			m = expVar
		}
		cells := []cell.Cell{
			statedb.Cell,
			job.Cell,
			cell.Provide(cell.NewSimpleHealth),
			promCmd,
			cell.Module("test", "Script test module",
				cell.Provide(job.Registry.NewGroup),
				cell.Provide(func(p reconciler.Params, health *cell.SimpleHealth) (hive.ScriptCmdOut, error) {
					return registerScriptReconcilers(p, flags, m, reconcilertest.Subject[*item]{
						Target: tgt, Faults: ops, Health: health, Metrics: expVar, ModuleID: p.ModuleID,
					}, reg)
				}),
			),
		}
		if flags.tables {
			cells = append(cells, reconciler.TablesCell)
		}
		return hive.New(cells...)
	}

	var cmds map[string]script.Cmd
	if flags.newHive {
		r, err := reconcilertest.NewRestarter(log, newHive)
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, r.Stop(context.Background())) })
		cmds = r.ScriptCommands()
	} else {
		h := newHive()
		cmds, err = h.ScriptCommands(log)
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, h.Stop(log, context.Background())) })
	}
	maps.Insert(cmds, maps.All(script.DefaultCmds()))
	maps.Insert(cmds, maps.All(reconcilertest.ScriptCommands(reg)))
	return &script.Engine{Cmds: cmds, RetryInterval: 10 * time.Millisecond}
}

// registerScriptReconcilers creates the items table, with an initializer
// that the items/init command completes, and registers the reconcilers the
// flags ask for, adding each to reg as base with its own fields filled in.
func registerScriptReconcilers(p reconciler.Params, flags scriptFlags, m metrics.Metrics, base reconcilertest.Subject[*item], reg *reconcilertest.Registry) (hive.ScriptCmdOut, error) {
	table, err := statedb.NewTable(p.DB, "items", itemID, convergeindex.NewStatusIndex((*item).getStatus))
	if err != nil {
		return hive.ScriptCmdOut{}, err
	}
	wtxn := p.DB.WriteTxn(table)
	done := table.RegisterInitializer(wtxn, "script")
	wtxn.Commit()
	initCmd := script.Command(script.CmdUsage{Summary: "mark the items table initialized"},
		func(*script.State, ...string) (script.WaitFunc, error) {
			wtxn := p.DB.WriteTxn(table)
			done(wtxn)
			wtxn.Commit()
			return nil, nil
		})

	names := []string{""}
	if flags.reconcilers != "" {
		names = strings.Split(flags.reconcilers, ",")
	}
	for _, name := range names {
		opts := []reconciler.Option{
			reconciler.WithMetrics(m),
			reconciler.WithRetry(flags.retryMin, flags.retryMax),
			reconciler.WithConcurrency(flags.workers),
			reconciler.WithOperationTimeout(flags.timeout),
			reconciler.WithoutPruning(),
		}
		if flags.prune > 0 {
			opts = append(opts, reconciler.WithPruning(flags.prune))
		}
		if flags.refresh > 0 {
			opts = append(opts, reconciler.WithRefreshing(flags.refresh, nil))
		}
		get, set := (*item).getStatus, (*item).setStatus
		if name != "" {
			opts = append(opts, reconciler.WithName(name))
			get = func(it *item) status.Status { return it.Statuses.Get(name) }
			set = func(it *item, s status.Status) *item { it.Statuses = it.Statuses.Set(name, s); return it }
		}
		r, err := reconciler.Register(p, table, (*item).clone, set, get, base.Faults, base.Faults.Batch(), opts...)
		if err != nil {
			return hive.ScriptCmdOut{}, err
		}
		sub := base
		sub.Name, sub.DB, sub.Table, sub.Reconciler, sub.GetStatus = name, p.DB, table, r, get
		if err := reconcilertest.Add(reg, sub); err != nil {
			return hive.ScriptCmdOut{}, err
		}
	}
	return hive.NewScriptCmd("items/init", initCmd), nil
}

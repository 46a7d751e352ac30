package reconciler_test

import (
	"context"
	"expvar"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	convergeindex "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// TestScripts runs the end-to-end scripts in ../testdata against a real
// hive, StateDB and reconciler. The first line of a script may configure
// the reconciler, for example "#! -batch -workers=4"; see scriptFlags.
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
	return f, fs.Parse(args)
}

func newScriptEngine(t testing.TB, args []string) *script.Engine {
	flags, err := parseScriptFlags(args)
	require.NoError(t, err)

	log := hivetest.Logger(t)
	tgt := newTarget()
	m := metrics.NewUnpublishedExpVar()
	var (
		db        *statedb.DB
		table     statedb.RWTable[*item]
		markInit  func()
		recs      = map[string]reconciler.Reconciler[*item]{}
		statusIdx = convergeindex.NewStatusIndex((*item).getStatus)
	)

	register := func(p reconciler.Params, name string) error {
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
		var batch reconciler.BatchOperations[*item]
		if flags.batch {
			batch = batchTarget{tgt}
		}
		r, err := reconciler.Register(p, table, (*item).clone, set, get, tgt, batch, opts...)
		recs[name] = r
		return err
	}

	h := hive.New(
		statedb.Cell,
		job.Cell,
		cell.Provide(
			cell.NewSimpleHealth,
			func(h *cell.SimpleHealth) hive.ScriptCmdOut {
				return hive.NewScriptCmd("health", cell.SimpleHealthCmd(h))
			},
		),
		cell.Module("test", "Script test module",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(db_ *statedb.DB, p reconciler.Params) error {
				db = db_
				var err error
				table, err = statedb.NewTable(db, "items", itemID, statusIdx)
				if err != nil {
					return err
				}
				wtxn := db.WriteTxn(table)
				done := table.RegisterInitializer(wtxn, "script")
				wtxn.Commit()
				markInit = func() {
					wtxn := db.WriteTxn(table)
					done(wtxn)
					wtxn.Commit()
				}
				if flags.reconcilers == "" {
					return register(p, "")
				}
				for _, name := range strings.Split(flags.reconcilers, ",") {
					if err := register(p, name); err != nil {
						return err
					}
				}
				return nil
			}),
		),
	)

	cmds, err := h.ScriptCommands(log)
	require.NoError(t, err)
	maps.Insert(cmds, maps.All(script.DefaultCmds()))
	maps.Insert(cmds, maps.All(map[string]script.Cmd{
		"mark-init":       simpleCmd("Mark the table initialized", func(*script.State, ...string) error { markInit(); return nil }),
		"prune":           pruneCmd(recs),
		"wait-reconciled": waitReconciledCmd(&db, &table, statusIdx),
		"target/fail":     failCmd(tgt),
		"target/unblock":  unblockCmd(tgt),
		"target/set": simpleCmd("Set a key in the target behind the reconciler's back", func(_ *script.State, args ...string) error {
			tgt.apply(func() { tgt.data[args[0]] = args[1] })
			return nil
		}),
		"target/expect": expectCmd(tgt),
		"target/calls":  callsCmd(tgt),
		"expvar":        expvarCmd(m),
	}))
	t.Cleanup(func() {
		assert.NoError(t, h.Stop(log, context.Background()))
	})
	return &script.Engine{Cmds: cmds, RetryInterval: 10 * time.Millisecond}
}

func simpleCmd(summary string, fn func(s *script.State, args ...string) error) script.Cmd {
	return script.Command(script.CmdUsage{Summary: summary},
		func(s *script.State, args ...string) (script.WaitFunc, error) { return nil, fn(s, args...) })
}

func pruneCmd(recs map[string]reconciler.Reconciler[*item]) script.Cmd {
	return simpleCmd("Ask every reconciler to prune", func(*script.State, ...string) error {
		for _, r := range recs {
			r.Prune()
		}
		return nil
	})
}

func waitReconciledCmd(db **statedb.DB, table *statedb.RWTable[*item], idx statedb.Index[*item, status.Kind]) script.Cmd {
	return simpleCmd("Wait until nothing is Pending or Refreshing", func(s *script.State, _ ...string) error {
		ctx, cancel := context.WithTimeout(s.Context(), 10*time.Second)
		defer cancel()
		return reconciler.WaitForReconciliation(ctx, *db, *table, idx)
	})
}

// failCmd sets a fault: target/fail KEY MODE [DURATION]. KEY "*" applies to
// keys without their own fault; MODE "ok" clears it.
func failCmd(tgt *target) script.Cmd {
	return simpleCmd("Set the target's fault for a key", func(_ *script.State, args ...string) error {
		if len(args) < 2 {
			return fmt.Errorf("usage: target/fail KEY MODE [DURATION]")
		}
		f := fault{mode: args[1]}
		if len(args) > 2 {
			d, err := time.ParseDuration(args[2])
			if err != nil {
				return err
			}
			f.after = d
		}
		tgt.apply(func() {
			if f.mode == "ok" {
				delete(tgt.faults, args[0])
			} else {
				tgt.faults[args[0]] = f
			}
			if f.mode == "block" {
				tgt.gates[args[0]] = make(chan struct{})
			}
		})
		return nil
	})
}

func unblockCmd(tgt *target) script.Cmd {
	return simpleCmd("Release operations blocked on a key", func(_ *script.State, args ...string) error {
		tgt.apply(func() {
			if g := tgt.gates[args[0]]; g != nil {
				close(g)
				delete(tgt.gates, args[0])
			}
			delete(tgt.faults, args[0])
		})
		return nil
	})
}

// expectCmd waits until the target holds exactly the given key=value pairs.
func expectCmd(tgt *target) script.Cmd {
	return simpleCmd("Wait until the target holds exactly KEY=VALUE...", func(s *script.State, args ...string) error {
		want := slices.Clone(args)
		slices.Sort(want)
		return waitTarget(s, tgt, func(data map[string]string, _ map[string]int) (bool, string) {
			got := describe(data)
			return got == strings.Join(want, " "), "target holds [" + got + "]"
		})
	})
}

// callsCmd waits until the target has seen at least N calls of OP on KEY,
// or with "=N" exactly N: target/calls OP KEY [>=]N.
func callsCmd(tgt *target) script.Cmd {
	return simpleCmd("Wait for a number of calls: OP KEY N (at least) or OP KEY =N", func(s *script.State, args ...string) error {
		if len(args) != 3 {
			return fmt.Errorf("usage: target/calls OP KEY [=]N")
		}
		exact := strings.HasPrefix(args[2], "=")
		n, err := strconv.Atoi(strings.TrimPrefix(args[2], "="))
		if err != nil {
			return err
		}
		return waitTarget(s, tgt, func(_ map[string]string, calls map[string]int) (bool, string) {
			got := calls[args[0]+" "+args[1]]
			return got == n || (!exact && got > n), fmt.Sprintf("%s %s called %d times", args[0], args[1], got)
		})
	})
}

// waitTarget waits on the target's change channel until cond holds or the
// script's context or a 10s deadline ends.
func waitTarget(s *script.State, tgt *target, cond func(map[string]string, map[string]int) (bool, string)) error {
	ctx, cancel := context.WithTimeout(s.Context(), 10*time.Second)
	defer cancel()
	for {
		data, calls, changed := tgt.snapshot()
		ok, desc := cond(data, calls)
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("gave up waiting: %s", desc)
		}
	}
}

// expvarCmd prints the metrics as "variable key: value" lines.
func expvarCmd(m *metrics.ExpVar) script.Cmd {
	return script.Command(script.CmdUsage{Summary: "Print the reconciler's expvar metrics"},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			return func(*script.State) (string, string, error) {
				var b strings.Builder
				m.Map().Do(func(kv expvar.KeyValue) {
					kv.Value.(*expvar.Map).Do(func(inner expvar.KeyValue) {
						fmt.Fprintf(&b, "%s %s: %s\n", kv.Key, inner.Key, inner.Value)
					})
				})
				return b.String(), "", nil
			}, nil
		})
}

package reconciler_test

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/hive/script"
	"github.com/cilium/hive/script/scripttest"
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	convergeindex "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// TestScripts runs the end-to-end scripts in ../testdata against a real
// hive, StateDB and reconciler, with statedb's commands and reconcilertest's.
// The reconciler's operations are a reconcilertest.FaultyOps around a
// reconcilertest.Target. The first line of a script may configure the
// reconciler, for example "#! -batch -workers=4"; see parseScriptFlags.
// A script with -each-variant runs once more in one other variant of
// workers and batch, each script in the next (TestScripts/VARIANT/SCRIPT),
// or, with CONVERGE_LONG=1, in every other variant. Scripts of large
// scales start with "[!long] skip": they run with CONVERGE_LONG=1 only.
func TestScripts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	scripttest.Test(t, ctx, newScriptEngine, nil, "../testdata/*.txtar")
	files, err := filepath.Glob("../testdata/*.txtar")
	require.NoError(t, err)
	files = slices.DeleteFunc(files, func(file string) bool {
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		first, _, _ := strings.Cut(string(data), "\n")
		return !strings.HasPrefix(first, "#!") || !strings.Contains(first, "-each-variant")
	})
	for vi, v := range variants[1:] {
		t.Run(v.String(), func(t *testing.T) {
			for fi, file := range files {
				if !longTests() && fi%len(variants[1:]) != vi {
					continue // the quick run: each script in one other variant
				}
				scripttest.Test(t, ctx, func(t testing.TB, args []string) *script.Engine {
					return newScriptEngine(t, append(args, fmt.Sprint("-workers=", v.workers), fmt.Sprint("-batch=", v.batch)))
				}, nil, file)
			}
		})
	}
}

type scriptFlags struct {
	batch       bool
	process     bool
	batchOnly   bool
	workers     int
	prune       time.Duration
	refresh     time.Duration
	refreshOne  time.Duration
	retryMin    time.Duration
	jitter      float64
	retryMax    time.Duration
	reconcilers string
	timeout     time.Duration
	newHive     bool
	tables      bool
	startAfter  time.Duration
	dependency  bool
	roundSize   int
	maxAttempts int
	breaker     int
	probe       time.Duration
	eachVariant bool
	held        int
	roundEvery  time.Duration
	priority    float64
	setup       bool
	driftCheck  bool
	driftReport bool
	guardMax    int
	guardShare  float64
	join        string
}

func parseScriptFlags(args []string) (scriptFlags, error) {
	var f scriptFlags
	fs := flag.NewFlagSet("script", flag.ContinueOnError)
	fs.BoolVar(&f.batch, "batch", false, "use BatchOperations")
	fs.BoolVar(&f.process, "process", false, "use BatchOperations implementing BatchProcessor (FaultyOps.Processor); implies -batch")
	fs.BoolVar(&f.batchOnly, "batch-only", false, "no Operations: the batch operations serve alone and prune; implies -batch")
	fs.IntVar(&f.workers, "workers", 1, "WithConcurrency")
	fs.DurationVar(&f.prune, "prune", 0, "WithPruning interval (0: only on request)")
	fs.DurationVar(&f.refresh, "refresh", 0, "WithRefreshing interval")
	fs.DurationVar(&f.refreshOne, "refresh-one-per", 0, "WithRefreshing limiter: one object, then one per this long")
	fs.Float64Var(&f.jitter, "retry-jitter", -1, "WithRetryJitter (default: the reconciler's)")
	fs.DurationVar(&f.retryMin, "retry-min", 10*time.Millisecond, "minimum backoff")
	fs.DurationVar(&f.retryMax, "retry-max", 50*time.Millisecond, "maximum backoff")
	fs.StringVar(&f.reconcilers, "reconcilers", "", "comma-separated names of reconcilers sharing Statuses (WithStatusSet)")
	fs.DurationVar(&f.timeout, "op-timeout", 0, "WithOperationTimeout")
	fs.BoolVar(&f.newHive, "new-hive", false, "'hive start' after 'hive stop' starts a new hive (reconcilertest.Restarter), not the same one")
	fs.BoolVar(&f.tables, "tables", false, "include tables.Cell (the reconcilers and reconciler-retries tables)")
	fs.DurationVar(&f.startAfter, "start-after", -1, "WithStartAfter(TIMEOUT, others): start once items and others (others/init) are initialized; 0 waits as long as it takes")
	fs.BoolVar(&f.dependency, "dependency", false, "WithDependency on the deps table: a dep re-reconciles the items it lists; see depOps")
	fs.IntVar(&f.roundSize, "round-size", 0, "WithRoundLimits objects per round (0: the default)")
	fs.IntVar(&f.maxAttempts, "max-attempts", 0, "WithMaxAttempts (0: no limit)")
	fs.IntVar(&f.breaker, "breaker", 0, "WithCircuitBreaker failures (0: off)")
	fs.DurationVar(&f.probe, "breaker-probe", 20*time.Millisecond, "WithCircuitBreaker probe backoff")
	fs.BoolVar(&f.eachVariant, "each-variant", false, "run the script in every variant of -workers and -batch too")
	fs.DurationVar(&f.roundEvery, "round-every", 0, "WithRoundLimits limiter: one round, then one per this long")
	fs.Float64Var(&f.priority, "priority-share", -1, "WithPriority(the item's value as a number, SHARE); negative: off")
	fs.BoolVar(&f.setup, "setup", false, "WithSetup of a reconcilertest.SetupFault (reconciler/setup-fault)")
	fs.BoolVar(&f.driftCheck, "drift-check", false, "WithDriftCheck: in sync when the target holds the item's value; drift/fail, drift/checks")
	fs.BoolVar(&f.driftReport, "drift-report-only", false, "WithDriftReportOnly; implies -drift-check")
	fs.IntVar(&f.guardMax, "guard-max", 0, "WithPruneGuard maxRemove, with the Target's PlanPrune (guard on if this or -guard-share is set)")
	fs.Float64Var(&f.guardShare, "guard-share", 0, "WithPruneGuard maxShare")
	fs.StringVar(&f.join, "join", "", "comma-separated names of reconcilers sharing Statuses that 'items/join NAME' registers while the hive runs (a name that joins)")
	fs.IntVar(&f.held, "held", 0, "N Done items held000... in the table at Register, and in the target, as after an earlier run")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	f.batch = f.batch || f.process || f.batchOnly
	f.driftCheck = f.driftCheck || f.driftReport
	if f.dependency && f.batch {
		return f, fmt.Errorf("-dependency does not support -batch")
	}
	return f, nil
}

// newScriptEngine builds a script's world: the target and the faults
// outside the hive, the hive (or a Restarter building hives) and the
// commands.
func newScriptEngine(t testing.TB, args []string) *script.Engine {
	flags, err := parseScriptFlags(args)
	require.NoError(t, err)
	log := hivetest.Logger(t)
	reg := reconcilertest.NewRegistry()
	tgt := reconcilertest.NewTarget(itemKey, itemValue)
	var (
		inner reconciler.Operations[*item] = tgt
		batch reconciler.BatchOperations[*item]
		deps  *depOps
	)
	if flags.batch {
		batch = tgt
	}
	if flags.dependency {
		deps = &depOps{Target: tgt}
		inner = deps
	}
	ops := reconcilertest.NewFaultyOps(itemKey, inner, batch)
	var setup *reconcilertest.SetupFault
	if flags.setup {
		setup = reconcilertest.NewSetupFault()
	}
	newHive := func() *hive.Hive {
		// A new process starts counting from zero.
		expVar := metrics.NewUnpublishedExpVar()
		cells := []cell.Cell{
			statedb.Cell,
			job.Cell,
			cell.Provide(cell.NewSimpleHealth),
			cell.Module("test", "Script test module",
				cell.Provide(job.Registry.NewGroup),
				cell.Provide(func(p reconciler.Params, health *cell.SimpleHealth) (hive.ScriptCmdsOut, error) {
					return registerScriptReconcilers(p, flags, expVar, reconcilertest.Subject[*item]{
						Target: tgt, Faults: ops, Health: health, Metrics: expVar, ModuleID: p.ModuleID, Setup: setup,
					}, reg, deps)
				}),
			),
		}
		if flags.tables {
			cells = append(cells, tables.Cell)
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
	cmds["skip"] = scripttest.Skip()
	conds := map[string]script.Cond{
		"long": script.BoolCondition("CONVERGE_LONG is set: the long runs (large scales, every variant)", longTests()),
	}
	return &script.Engine{Cmds: cmds, Conds: conds, RetryInterval: 10 * time.Millisecond}
}

// longTests reports whether CONVERGE_LONG asks for the long runs: the
// scripts of large scales, every script of -each-variant in every variant
// and 10 chaos seeds in each configuration. CI runs them on a schedule;
// docs/testing.md lists them.
func longTests() bool { return os.Getenv("CONVERGE_LONG") != "" }

// registerScriptReconcilers creates the items table, with an initializer
// that the items/init command completes, and the tables of -start-after and
// -dependency, and registers the reconcilers the flags ask for, adding each
// to reg as base with its own fields filled in.
func registerScriptReconcilers(p reconciler.Params, flags scriptFlags, m metrics.Metrics, base reconcilertest.Subject[*item], reg *reconcilertest.Registry, deps *depOps) (hive.ScriptCmdsOut, error) {
	var out hive.ScriptCmdsOut
	table, err := statedb.NewTable(p.DB, "items", itemID, convergeindex.NewStatusIndex((*item).getStatus))
	if err != nil {
		return out, err
	}
	held := items("held", flags.held, "1")
	for i, it := range held {
		it.ID, it.Status = fmt.Sprintf("held%03d", i), status.Done()
		base.Target.Set(it.ID, it.Value)
	}
	if err := insertItems(p.DB, table, held...); err != nil {
		return out, err
	}
	cmds := map[string]script.Cmd{
		"items/fill": fillCmd(p.DB, table),
		"items/set":  setCmd(p.DB, table),
	}
	cmds["items/init"], cmds["items/refill"] = initCmds(p.DB, table, "mark the items table initialized")
	var extra []reconciler.Option
	if flags.startAfter >= 0 {
		others, err := statedb.NewTable(p.DB, "others", depID)
		if err != nil {
			return out, err
		}
		cmds["others/init"], cmds["others/refill"] = initCmds(p.DB, others, "mark the others table initialized")
		extra = append(extra, reconciler.WithStartAfter(flags.startAfter, others))
	}
	if deps != nil {
		if deps.table, err = statedb.NewTable(p.DB, "deps", depID); err != nil {
			return out, err
		}
		extra = append(extra, reconciler.WithDependency(deps.table, itemsOfDep))
	}
	if base.Setup != nil {
		extra = append(extra, reconciler.WithSetup(base.Setup.Setup))
	}
	if flags.breaker > 0 {
		extra = append(extra, reconciler.WithCircuitBreaker(flags.breaker, flags.probe, nil))
	}
	if flags.maxAttempts > 0 {
		extra = append(extra, reconciler.WithMaxAttempts(flags.maxAttempts))
	}
	if flags.priority >= 0 {
		extra = append(extra, reconciler.WithPriority(valuePriority, flags.priority))
	}
	if flags.driftCheck {
		d := newScriptDrift(base.Target)
		maps.Insert(cmds, maps.All(d.commands()))
		extra = append(extra, d.options(flags.driftReport)...)
	}
	if flags.guardMax != 0 || flags.guardShare != 0 {
		extra = append(extra, reconciler.WithPruneGuard(flags.guardMax, flags.guardShare, base.Target.PlanPrune))
	}
	if flags.roundSize > 0 || flags.roundEvery > 0 {
		var lim *rate.Limiter
		if flags.roundEvery > 0 {
			lim = rate.NewLimiter(rate.Every(flags.roundEvery), 1)
		}
		extra = append(extra, reconciler.WithRoundLimits(cmp.Or(flags.roundSize, 1000), lim))
	}

	names := []string{""}
	if flags.reconcilers != "" {
		names = strings.Split(flags.reconcilers, ",")
	}
	itemSets, err := newItemSets(p.DB, table)
	if err != nil {
		return out, err
	}
	add := func(name string) error {
		opts := []reconciler.Option{
			reconciler.WithMetrics(m),
			reconciler.WithRetry(flags.retryMin, flags.retryMax),
			reconciler.WithConcurrency(flags.workers),
			reconciler.WithOperationTimeout(flags.timeout),
			reconciler.WithPruning(0),
		}
		opts = append(opts, extra...)
		if flags.prune > 0 {
			opts = append(opts, reconciler.WithPruning(flags.prune))
		}
		if flags.jitter >= 0 {
			opts = append(opts, reconciler.WithRetryJitter(flags.jitter))
		}
		if flags.refresh > 0 && flags.refreshOne > 0 {
			opts = append(opts, reconciler.WithRefreshing(flags.refresh, rate.NewLimiter(rate.Every(flags.refreshOne), 1)))
		} else if flags.refresh > 0 {
			opts = append(opts, reconciler.WithRefreshing(flags.refresh, nil))
		}
		get, set := (*item).getStatus, (*item).setStatus
		if name != "" {
			// A name's entry of Statuses, which the reconcilers of the
			// set write together with one copy of it.
			opts = append(opts, reconciler.WithName(name), reconciler.WithStatusSet(getSet, putSet))
			get, set = func(it *item) status.Status { return it.Statuses.Get(name) }, nil
		}
		var ops reconciler.Operations[*item] = base.Faults
		batch := base.Faults.Batch()
		if flags.process {
			batch = base.Faults.Processor()
		}
		if flags.batchOnly {
			ops = nil
		}
		regGet := get
		if set == nil {
			regGet = nil // WithStatusSet's
		}
		r, err := reconciler.Register(p, table, (*item).clone, set, regGet, ops, batch, opts...)
		if err != nil {
			return err
		}
		sub := base
		sub.Name, sub.DB, sub.Table, sub.Reconciler, sub.GetStatus = name, p.DB, table, r, get
		if name != "" {
			sub.Sets = itemSets
		}
		return reconcilertest.Add(reg, sub)
	}
	for _, name := range names {
		if err := add(name); err != nil {
			return out, err
		}
	}
	if flags.join != "" {
		cmds["items/join"] = joinCmd(strings.Split(flags.join, ","), add)
	}
	return hive.NewScriptCmds(cmds), nil
}

// valuePriority is the priority function of -priority-share: the item's
// value as a number, or 0.
func valuePriority(it *item) int {
	p, _ := strconv.Atoi(it.Value)
	return p
}

// initCmds returns a command that completes table's initializer, and one
// that registers a new one (NAME/refill): the table is uninitialized again
// until the first command runs.
func initCmds[Obj any](db *statedb.DB, table statedb.RWTable[Obj], summary string) (init, refill script.Cmd) {
	var (
		mu    sync.Mutex
		n     int
		dones []func(statedb.WriteTxn)
	)
	register := func() {
		wtxn := db.WriteTxn(table)
		n++
		dones = append(dones, table.RegisterInitializer(wtxn, fmt.Sprintf("script-%d", n)))
		wtxn.Commit()
	}
	register()
	init = script.Command(script.CmdUsage{Summary: summary},
		func(*script.State, ...string) (script.WaitFunc, error) {
			mu.Lock()
			defer mu.Unlock()
			wtxn := db.WriteTxn(table)
			for _, done := range dones {
				done(wtxn)
			}
			wtxn.Commit()
			dones = nil
			return nil, nil
		})
	refill = script.Command(script.CmdUsage{Summary: "register a new initializer: the table is not initialized until NAME/init"},
		func(*script.State, ...string) (script.WaitFunc, error) {
			mu.Lock()
			defer mu.Unlock()
			register()
			return nil, nil
		})
	return init, refill
}

// fillCmd inserts COUNT items in one transaction, PREFIX000, PREFIX001 and
// so on, each with the value "1" and a fresh status of KIND (Pending,
// Refreshing or Done).
func fillCmd(db *statedb.DB, table statedb.RWTable[*item]) script.Cmd {
	return script.Command(script.CmdUsage{Summary: "insert COUNT items PREFIX000, PREFIX001... with value 1 and a status of KIND (Pending, Refreshing or Done)", Args: "prefix count [kind]"},
		func(_ *script.State, args ...string) (script.WaitFunc, error) {
			if len(args) < 2 || len(args) > 3 {
				return nil, script.ErrUsage
			}
			n, err := strconv.Atoi(args[1])
			if err != nil {
				return nil, err
			}
			kind := "Pending"
			if len(args) == 3 {
				kind = args[2]
			}
			st, ok := map[string]func() status.Status{"Pending": status.Pending, "Refreshing": status.Refreshing, "Done": status.Done}[kind]
			if !ok {
				return nil, fmt.Errorf("kind %q: want Pending, Refreshing or Done", kind)
			}
			objs := make([]*item, n)
			for i := range objs {
				objs[i] = &item{ID: fmt.Sprintf("%s%03d", args[0], i), Value: "1", Status: st()}
			}
			return nil, insertItems(db, table, objs...)
		})
}

// insertItems inserts objs in one transaction.
func insertItems(db *statedb.DB, table statedb.RWTable[*item], objs ...*item) error {
	wtxn := db.WriteTxn(table)
	defer wtxn.Abort() // after Commit, does nothing
	for _, o := range objs {
		if _, _, err := table.Insert(wtxn, o); err != nil {
			return err
		}
	}
	wtxn.Commit()
	return nil
}

// setCmd inserts items KEY with VALUE in one transaction, each with a
// fresh Pending status, as an application writes them: db/insert's YAML
// gives statuses without an identity (see package status).
func setCmd(db *statedb.DB, table statedb.RWTable[*item]) script.Cmd {
	return script.Command(script.CmdUsage{Summary: "insert items KEY=VALUE with a fresh Pending status", Args: "key=value..."},
		func(_ *script.State, args ...string) (script.WaitFunc, error) {
			var objs []*item
			for _, arg := range args {
				key, value, ok := strings.Cut(arg, "=")
				if !ok {
					return nil, fmt.Errorf("%w: %q is not key=value", script.ErrUsage, arg)
				}
				objs = append(objs, &item{ID: key, Value: value, Status: status.Pending()})
			}
			return nil, insertItems(db, table, objs...)
		})
}

// dep is an object of the deps table (-dependency) and of the others table
// (-start-after). The items it lists depend on it.
type dep struct {
	ID    string   `yaml:"id"`
	Items []string `yaml:"items"`
	Value string   `yaml:"value"`
}

func (d *dep) TableHeader() []string { return []string{"ID", "Items", "Value"} }
func (d *dep) TableRow() []string    { return []string{d.ID, strings.Join(d.Items, ","), d.Value} }

var depID = statedb.Index[*dep, string]{
	Name:       "id",
	FromObject: func(d *dep) index.KeySet { return index.NewKeySet(index.String(d.ID)) },
	FromKey:    index.String,
	FromString: index.FromString,
	Unique:     true,
}

// itemsOfDep is the WithDependency mapper of -dependency: the items d
// lists, whether it was changed or deleted.
func itemsOfDep(d *dep, _ bool) []statedb.Query[*item] {
	qs := make([]statedb.Query[*item], len(d.Items))
	for i, id := range d.Items {
		qs[i] = itemID.Query(id)
	}
	return qs
}

// depOps are the operations of -dependency. Like operations that read the
// deps table, they give the target an item's value followed by each dep
// that lists it, as the operation's transaction shows them ("1+d=2"), so a
// script can tell which version of a dep an update saw.
type depOps struct {
	*reconcilertest.Target[*item]
	table statedb.Table[*dep] // set when the hive is populated
}

func (o *depOps) Update(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, it *item) error {
	withDeps := it.clone()
	for d := range o.table.All(txn) {
		if slices.Contains(d.Items, it.ID) {
			withDeps.Value += "+" + d.ID + "=" + d.Value
		}
	}
	return o.Target.Update(ctx, txn, rev, withDeps)
}

package prometheus_test

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"regexp"
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
	"github.com/cilium/statedb/index"
	prom "github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	convergeindex "github.com/converge-go/converge/index"
	convergeprom "github.com/converge-go/converge/metrics/prometheus"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// TestScripts runs testdata/*.txtar against a real hive, StateDB and
// reconciler that reports to the adapter, with StateDB's commands,
// reconcilertest's and prom/metrics, which reads the adapter through a
// registry. The reconciler's operations are a reconcilertest.FaultyOps
// around a reconcilertest.Target. The first line of a script may configure
// it, for example "#! -tables"; see newScriptEngine.
func TestScripts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	scripttest.Test(t, ctx, newScriptEngine, nil, "testdata/*.txtar")
}

// item is the object the tests reconcile.
type item struct {
	ID     string        `yaml:"id"`
	Value  string        `yaml:"value"`
	Status status.Status `yaml:"status"`
}

func (it *item) clone() *item                    { c := *it; return &c }
func (it *item) getStatus() status.Status        { return it.Status }
func (it *item) setStatus(s status.Status) *item { it.Status = s; return it }
func (it *item) TableHeader() []string           { return []string{"ID", "Value", "Status"} }
func (it *item) TableRow() []string              { return []string{it.ID, it.Value, it.Status.String()} }
func itemKey(it *item) string                    { return it.ID }
func itemValue(it *item) string                  { return it.Value }

var itemID = statedb.Index[*item, string]{
	Name:       "id",
	FromObject: func(it *item) index.KeySet { return index.NewKeySet(index.String(it.ID)) },
	FromKey:    index.String,
	FromString: index.FromString,
	Unique:     true,
}

// newScriptEngine builds a script's world: a hive with the items table and
// its reconciler in module "test", reporting to a Metrics registered on a
// pedantic registry that prom/metrics gathers, and the commands. Flags:
// -tables adds tables.Cell, -op-timeout sets
// WithOperationTimeout. Failed operations are retried after 10ms to 50ms.
func newScriptEngine(t testing.TB, args []string) *script.Engine {
	fs := flag.NewFlagSet("script", flag.ContinueOnError)
	withTables := fs.Bool("tables", false, "include tables.Cell (the reconcilers and reconciler-retries tables)")
	opTimeout := fs.Duration("op-timeout", 0, "WithOperationTimeout")
	require.NoError(t, fs.Parse(args))

	pm := convergeprom.New()
	gatherer := prom.NewPedanticRegistry()
	require.NoError(t, gatherer.Register(pm))
	reg := reconcilertest.NewRegistry()
	tgt := reconcilertest.NewTarget(itemKey, itemValue)
	ops := reconcilertest.NewFaultyOps(itemKey, tgt, nil)
	cells := []cell.Cell{
		statedb.Cell,
		job.Cell,
		cell.Provide(cell.NewSimpleHealth),
		cell.Module("test", "Script test module",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(p reconciler.Params, health *cell.SimpleHealth) error {
				table, err := statedb.NewTable(p.DB, "items", itemID, convergeindex.NewStatusIndex((*item).getStatus))
				if err != nil {
					return err
				}
				r, err := reconciler.Register(p, table, (*item).clone, (*item).setStatus, (*item).getStatus, ops, nil,
					reconciler.WithMetrics(pm),
					reconciler.WithRetry(10*time.Millisecond, 50*time.Millisecond),
					reconciler.WithOperationTimeout(*opTimeout),
					reconciler.WithPruning(0))
				if err != nil {
					return err
				}
				return reconcilertest.Add(reg, reconcilertest.Subject[*item]{
					DB: p.DB, Table: table, Reconciler: r, GetStatus: (*item).getStatus,
					Target: tgt, Faults: ops, Health: health, ModuleID: p.ModuleID,
				})
			}),
		),
	}
	if *withTables {
		cells = append(cells, tables.Cell)
	}
	h := hive.New(cells...)
	log := hivetest.Logger(t)
	cmds, err := h.ScriptCommands(log)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, h.Stop(log, context.Background())) })
	maps.Insert(cmds, maps.All(script.DefaultCmds()))
	maps.Insert(cmds, maps.All(reconcilertest.ScriptCommands(reg)))
	cmds["prom/metrics"] = promMetricsCmd(gatherer)
	return &script.Engine{Cmds: cmds, RetryInterval: 10 * time.Millisecond}
}

// promMetricsCmd is the scripts' prom/metrics command: it prints what g
// gathers as sorted "NAME{LABELS} VALUE" lines, in the text exposition
// format's shape (histograms as _bucket, _count and _sum lines), or, given
// regexps, waits until each matches a line. Metrics have no change
// notification, so it checks every 10ms until --timeout.
func promMetricsCmd(g prom.Gatherer) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "print the Prometheus metrics, or wait until each regexp matches a line",
			Args:    "[regexp...]",
			Flags: func(fs *pflag.FlagSet) {
				fs.Duration("timeout", 10*time.Second, "how long to wait")
			},
			RegexpArgs: func(rawArgs ...string) []int {
				idx := make([]int, len(rawArgs))
				for i := range idx {
					idx[i] = i
				}
				return idx
			},
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			timeout, err := s.Flags.GetDuration("timeout")
			if err != nil {
				return nil, err
			}
			res := make([]*regexp.Regexp, len(args))
			for i, a := range args {
				if res[i], err = regexp.Compile(a); err != nil {
					return nil, fmt.Errorf("bad regexp %q: %w", a, err)
				}
			}
			deadline := time.Now().Add(timeout)
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				lines, err := gatherLines(g)
				if err != nil {
					return nil, err
				}
				var missing []string
				for _, re := range res {
					if !slices.ContainsFunc(lines, re.MatchString) {
						missing = append(missing, fmt.Sprintf("%q", re))
					}
				}
				if len(missing) == 0 {
					out := strings.Join(lines, "\n") + "\n"
					return func(*script.State) (string, string, error) { return out, "", nil }, nil
				}
				if time.Now().After(deadline) {
					return nil, fmt.Errorf("timed out after %s: no line matches %s in:\n%s", timeout, strings.Join(missing, ", "), strings.Join(lines, "\n"))
				}
				select {
				case <-tick.C:
				case <-s.Context().Done():
					return nil, s.Context().Err()
				}
			}
		},
	)
}

// gatherLines renders what g gathers as sorted exposition lines.
func gatherLines(g prom.Gatherer) ([]string, error) {
	fams, err := g.Gather()
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			labels := make([]string, 0, len(m.GetLabel())+1)
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			line := func(suffix string, v float64, extra ...string) {
				ls := append(slices.Clone(labels), extra...)
				lines = append(lines, fmt.Sprintf("%s%s{%s} %s", f.GetName(), suffix, strings.Join(ls, ","), strconv.FormatFloat(v, 'g', -1, 64)))
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				line("", m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				line("", m.GetGauge().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					line("_bucket", float64(b.GetCumulativeCount()), fmt.Sprintf("le=%q", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)))
				}
				line("_bucket", float64(h.GetSampleCount()), `le="+Inf"`)
				line("_count", float64(h.GetSampleCount()))
				line("_sum", h.GetSampleSum())
			default:
				line("", m.GetUntyped().GetValue())
			}
		}
	}
	slices.Sort(lines)
	return lines, nil
}

package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"

	"github.com/cilium/hive/cell"
	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/converge-go/converge/metrics"
	convprom "github.com/converge-go/converge/metrics/prometheus"
)

// metricsVariant is what a converge run reports its figures to.
type metricsVariant int

const (
	metricsDefault    metricsVariant = iota // no WithMetrics: converge's default (unpublished expvar)
	metricsDisabled                         // noMetrics, the seed's four methods doing nothing
	metricsExpVar                           // metrics.NewUnpublishedExpVar()
	metricsPrometheus                       // metrics/prometheus New(), registered on a fresh registry
)

// new returns the Metrics to pass to WithMetrics, or nil for the default.
func (v metricsVariant) new() metrics.Metrics {
	switch v {
	case metricsDisabled:
		return noMetrics{}
	case metricsExpVar:
		return metrics.NewUnpublishedExpVar()
	case metricsPrometheus:
		m := convprom.New()
		prom.NewRegistry().MustRegister(m)
		return m
	}
	return nil
}

// noMetrics implements only the seed's four methods and does nothing: the
// reconciler with metrics disabled.
type noMetrics struct{}

func (noMetrics) ReconciliationDuration(cell.FullModuleID, string, string, time.Duration) {}
func (noMetrics) ReconciliationErrors(cell.FullModuleID, string, int, int)                {}
func (noMetrics) PruneError(cell.FullModuleID, string, error)                             {}
func (noMetrics) PruneDuration(cell.FullModuleID, string, time.Duration)                  {}

// overheadVariant is one column of the metrics overhead table: what the
// reconciler reports to, and whether the hive includes tables.Cell
// (the variants named TablesCell, as they were first measured).
type overheadVariant struct {
	name    string
	metrics metricsVariant
	tables  bool
}

// overheadVariants are measured side by side; the first is the reference.
var overheadVariants = []overheadVariant{
	{"disabled", metricsDisabled, false},
	{"expvar", metricsExpVar, false},
	{"prometheus", metricsPrometheus, false},
	{"TablesCell", metricsDisabled, true},
	{"prometheus+TablesCell", metricsPrometheus, true},
}

func overheadCaseName(v overheadVariant, batch bool) string {
	if batch {
		return "overhead batch " + v.name
	}
	return "overhead single " + v.name
}

// overheadCases run the incremental workload (-overhead-objects objects)
// with converge once per variant and kind of operations.
func overheadCases() []runCase {
	var out []runCase
	for _, batch := range []bool{false, true} {
		for _, v := range overheadVariants {
			out = append(out, runCase{
				name: overheadCaseName(v, batch), workload: "overhead", impls: []impl{implConverge},
				fn: func(ctx context.Context, c config, im impl) (measurement, error) {
					c.objects = c.overheadObjects
					return incrementalSetup(ctx, c, setup{impl: im, batch: batch, metrics: v.metrics, tables: v.tables})
				},
			})
		}
	}
	return out
}

// overheadRatios compares every variant with metrics disabled, run by run.
func overheadRatios() []ratioDef {
	var out []ratioDef
	for _, batch := range []bool{false, true} {
		for _, v := range overheadVariants[1:] {
			out = append(out, ratioDef{
				conv: sample{overheadCaseName(v, batch), implConverge, "obj/s"},
				ref:  sample{overheadCaseName(overheadVariants[0], batch), implConverge, "obj/s"},
				gate: true,
			})
		}
	}
	return out
}

// printOverhead prints the metrics overhead table: throughput per variant
// and its cost versus metrics disabled, with the spread over paired runs.
func printOverhead(w io.Writer, o options, res results) {
	if _, ok := res[overheadCaseName(overheadVariants[0], false)]; !ok {
		return
	}
	fmt.Fprintf(w, "\nMetrics overhead, converge, incremental workload with %s objects (overhead = 1 - throughput / throughput with metrics disabled; spread over paired runs):\n\n", count(o.cfg.overheadObjects))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "variant\tsingle ops\toverhead\tspread\tbatch ops\toverhead\tspread")
	for i, v := range overheadVariants {
		fmt.Fprintf(tw, "%s", v.name)
		for _, batch := range []bool{false, true} {
			c := overheadCaseName(v, batch)
			fmt.Fprintf(tw, "\t%s", fmtValue(unitRate, res.median(c, implConverge, "obj/s")))
			if i == 0 {
				fmt.Fprint(tw, "\t(reference)\t")
				continue
			}
			st := res.ratioStats(ratioDef{
				conv: sample{c, implConverge, "obj/s"},
				ref:  sample{overheadCaseName(overheadVariants[0], batch), implConverge, "obj/s"},
			})
			if st.n == 0 {
				fmt.Fprint(tw, "\t-\t-")
				continue
			}
			fmt.Fprintf(tw, "\t%+.1f%%\t%s", 100*(1-st.median), overheadSpread(st))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// overheadSpread shows the 95% confidence interval of the overhead, in
// percentage points, and the overheads of the least and most favourable
// runs.
func overheadSpread(st ratioStat) string {
	if st.n < 2 || math.IsNaN(st.min) {
		return "-"
	}
	return fmt.Sprintf("±%.1f pts (%+.1f%% to %+.1f%%, n=%d)", 100*st.ci*st.median, 100*(1-st.max), 100*(1-st.min), st.n)
}

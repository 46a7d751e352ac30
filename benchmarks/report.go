package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// unit formats one kind of figure and knows which way is better.
type unit struct {
	higherBetter bool
	better       string // "faster", "fewer", "lower"
	format       func(float64) string
}

var (
	unitRate = unit{true, "faster", func(v float64) string {
		switch {
		case v >= 1e6:
			return fmt.Sprintf("%.2fM obj/s", v/1e6)
		case v >= 1e3:
			return fmt.Sprintf("%.1fk obj/s", v/1e3)
		}
		return fmt.Sprintf("%.0f obj/s", v)
	}}
	unitBytes  = unit{false, "fewer", func(v float64) string { return fmt.Sprintf("%.0f B", v) }}
	unitAllocs = unit{false, "fewer", func(v float64) string { return fmt.Sprintf("%.2f", v) }}
	unitNanos  = unit{false, "lower", func(v float64) string { return fmtDuration(time.Duration(v)) }}
	unitSecs   = unit{false, "faster", func(v float64) string { return fmtDuration(time.Duration(v * 1e9)) }}
)

func fmtDuration(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0f µs", float64(d)/1e3)
}

// row compares converge with a reference (upstream, or the floor).
type row struct {
	name       string
	unit       unit
	conv       float64   // NaN if not measured
	ref        float64   // NaN if not measured
	refName    string    // "upstream" or "floor"
	refInTable bool      // label the reference value with refName
	stat       ratioStat // paired ratios over the runs
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

func (r results) median(c string, im impl, metric string) float64 {
	return median(r[c][im][metric])
}

// net is a per-object allocation figure minus the insert-only baseline:
// what the reconciler itself costs per object.
func (r results) net(c string, im impl, metric string) float64 {
	v := r.median(c, im, metric)
	if base := r.median("insert only", implNone, metric); !math.IsNaN(base) {
		v -= base
	}
	return v
}

// source is where a row of the main table comes from.
type source struct {
	name string
	unit unit
	def  ratioDef
}

// mainSources are the rows of the main table, in order. Gated rows are
// repeated until their ratio's spread is within -spread.
func mainSources(c config) []source {
	conv := func(cs, metric string) sample { return sample{cs, implConverge, metric} }
	up := func(cs, metric string) sample { return sample{cs, implUpstream, metric} }
	fl := func(cs, metric string) sample { return sample{cs, implFloor, metric} }
	vsUp := func(name string, u unit, cs, metric string) source {
		return source{name, u, ratioDef{conv: conv(cs, metric), ref: up(cs, metric)}}
	}
	rows := []source{
		vsUp("1 incremental, single ops", unitRate, "incremental single", "obj/s"),
		vsUp("1 incremental, batch ops", unitRate, "incremental batch", "obj/s"),
		vsUp("2 bytes/object, single", unitBytes, "incremental single", "B/obj"),
		vsUp("2 bytes/object, batch", unitBytes, "incremental batch", "B/obj"),
		vsUp("2 allocs/object, single", unitAllocs, "incremental single", "allocs/obj"),
		vsUp("2 allocs/object, batch", unitAllocs, "incremental batch", "allocs/obj"),
		{"3 floor: single ops vs floor", unitRate, ratioDef{conv: conv("incremental single", "obj/s"), ref: fl("incremental single", "obj/s")}},
		{"3 floor: batch ops vs floor", unitRate, ratioDef{conv: conv("incremental batch", "obj/s"), ref: fl("incremental batch", "obj/s")}},
		{"3 floor: bytes/object vs floor", unitBytes, ratioDef{conv: conv("incremental single", "B/obj"), ref: fl("incremental single", "B/obj"), net: true}},
		vsUp("4 latency back-to-back p50", unitNanos, "latency back-to-back", "p50"),
		vsUp("4 latency back-to-back p99", unitNanos, "latency back-to-back", "p99"),
		vsUp(fmt.Sprintf("4 idle latency (%s pause) p50", c.latencyGap), unitNanos, "latency idle", "p50"),
		vsUp(fmt.Sprintf("4 idle latency (%s pause) p99", c.latencyGap), unitNanos, "latency idle", "p99"),
		vsUp("5 slow target, default (1 worker)", unitRate, "slow default", "obj/s"),
		{fmt.Sprintf("5 slow target, %d workers", c.concurrency), unitRate, ratioDef{conv: conv("slow concurrent", "obj/s"), ref: up("slow default", "obj/s")}},
		vsUp("6 retry storm, single ops", unitSecs, "retry single", "s"),
		vsUp("6 retry storm, batch ops", unitSecs, "retry batch", "s"),
		vsUp(fmt.Sprintf("7 prune %s objects", count(c.objects)), unitSecs, "prune", "s"),
		vsUp(fmt.Sprintf("7 refresh sweep %s objects", count(c.objects)), unitSecs, "refresh", "s"),
		vsUp(fmt.Sprintf("8 fresh write behind %s refreshes", count(c.freshQueued)), unitNanos, "fresh refresh", "latency"),
		vsUp(fmt.Sprintf("8 fresh write behind %s retries", count(c.freshQueued)), unitNanos, "fresh retry", "latency"),
		vsUp(fmt.Sprintf("9 restart with %s Done: idle", count(c.objects)), unitSecs, "restart done", "s"),
		vsUp(fmt.Sprintf("9 restart with %s Done: first prune", count(c.objects)), unitSecs, "restart done", "prune s"),
		vsUp(fmt.Sprintf("9 restart with %s, 1%% Pending: idle", count(c.objects)), unitSecs, "restart pending", "s"),
		vsUp("10 heap held per object: converged", unitBytes, "rest converged", "held/obj"),
		vsUp("10 heap held per object: all deleted", unitBytes, "rest deleted", "held/obj"),
		vsUp("10 heap held per object: after a burst", unitBytes, "rest burst", "held/obj"),
	}
	for i := range rows {
		d := &rows[i].def
		if d.conv.metric == "B/obj" || d.conv.metric == "allocs/obj" {
			d.net = true
		}
		// Throughput: the ratios the spread target is about.
		d.gate = d.conv.metric == "obj/s" && strings.HasPrefix(d.conv.c, "incremental")
	}
	return rows
}

func (r results) rows(o options) []row {
	var out []row
	for _, s := range mainSources(o.cfg) {
		get := r.median
		if s.def.net {
			get = r.net
		}
		rw := row{name: s.name, unit: s.unit, refName: "upstream"}
		if s.def.ref.im == implFloor {
			rw.refName, rw.refInTable = "floor", true
		}
		rw.conv = get(s.def.conv.c, s.def.conv.im, s.def.conv.metric)
		rw.ref = get(s.def.ref.c, s.def.ref.im, s.def.ref.metric)
		if math.IsNaN(rw.conv) && math.IsNaN(rw.ref) || s.def.ref.im == implFloor && math.IsNaN(rw.ref) {
			continue // workload not run
		}
		rw.stat = r.ratioStats(s.def)
		out = append(out, rw)
	}
	return out
}

func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func fmtValue(u unit, v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return u.format(v)
}

// verdict says who wins and by how much, e.g. "converge 1.35× faster".
// The ratio is the median of the paired ratios when there are any, else
// the ratio of the medians.
func verdict(rw row) (ratio, better string) {
	if math.IsNaN(rw.conv) || math.IsNaN(rw.ref) || rw.conv <= 0 || rw.ref <= 0 {
		return "-", "-"
	}
	f := rw.conv / rw.ref // > 1 means converge is better
	if rw.stat.n > 0 {
		f = rw.stat.median
	}
	ratio = fmtRatio(f)
	if !rw.unit.higherBetter {
		f = 1 / f
	}
	switch {
	case f >= 1.005:
		return ratio, fmt.Sprintf("converge %.2f× %s", f, rw.unit.better)
	case f <= 1/1.005:
		return ratio, fmt.Sprintf("%s %.2f× %s", rw.refName, 1/f, rw.unit.better)
	}
	return ratio, "even"
}

func printReport(w io.Writer, o options, res results, info runInfo) {
	c := o.cfg
	fmt.Fprintf(w, "converge vs upstream (github.com/cilium/statedb/reconciler), %s\n", time.Now().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "machine: %s\n", machine())
	fmt.Fprintf(w, "load average %s at start, %s at end; calibration loop %s at start, %s at end; other processes used %.0f%% of the CPU time\n",
		fmtLoad(info.start.load), fmtLoad(info.end.load), info.start.calibrate.Round(100*time.Microsecond), info.end.calibrate.Round(100*time.Microsecond), 100*othersShare(info.start, info.end))
	fmt.Fprintf(w, "sizes: objects=%d txn=%d latency-samples=%d slow-objects=%d (Update %s) retry-objects=%d (WithRetry(%s, %s)) fresh-queued=%d\n",
		c.objects, c.txnSize, c.latencySamples, c.slowObjects, c.slowDelay, c.retryObjects, c.retryMin, c.retryMax, c.freshQueued)
	fmt.Fprintf(w, "runs: at least %d of each workload; throughput ratios repeated up to %d runs until their spread is within ±%.0f%%; took %s\n",
		o.repeats, o.maxRepeats, o.spread, info.took.Round(time.Second))
	for _, warn := range info.warnings {
		fmt.Fprintf(w, "WARNING: machine busy, figures are noise: %s\n", warn)
	}
	rows := res.rows(o)
	if len(rows) == 0 {
		printDeps(w, c, res)
		printOverhead(w, o, res)
		printCurve(w, o, res)
		printMulti(w, o, res)
		printOutage(w, o, res)
		return
	}
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "workload\tconverge\tupstream\tconverge/upstream\tspread\tbetter")
	for _, rw := range rows {
		ref := fmtValue(rw.unit, rw.ref)
		if rw.refInTable && ref != "-" {
			ref = rw.refName + " " + ref
		}
		ratio, better := verdict(rw)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", rw.name, fmtValue(rw.unit, rw.conv), ref, ratio, rw.stat, better)
	}
	tw.Flush()

	fmt.Fprintln(w)
	fmt.Fprintln(w, "Notes:")
	fmt.Fprintln(w, "- ratio is the median over runs of converge's figure divided by the reference's in the same run; \"better\" says who wins and by how much.")
	fmt.Fprintln(w, "- spread: the lowest and highest ratio over the paired runs; throughput ratios are run again until the 95% confidence interval of their mean is within -spread.")
	if len(res["incremental single"][implFloor]) > 0 {
		fmt.Fprintln(w, "- rows marked floor compare with a bare loop in the upstream column: one write txn held while reading Changes(), CompareAndSwap each pending object Done as read, commit every 1000.")
	}
	if base := res.median("insert only", implNone, "B/obj"); !math.IsNaN(base) {
		fmt.Fprintf(w, "- bytes and allocs per object exclude the inserter: an insert-only run costs %.0f B and %.2f allocs per object.\n",
			base, res.median("insert only", implNone, "allocs/obj"))
		for _, cs := range []string{"incremental single", "incremental batch"} {
			for _, im := range []impl{implConverge, implUpstream} {
				if v := res.median(cs, im, "B/obj"); !math.IsNaN(v) {
					fmt.Fprintf(w, "  %s, %s, including the inserter: %.0f B, %.2f allocs per object\n",
						cs, im, v, res.median(cs, im, "allocs/obj"))
				}
			}
		}
	}
	if up, fl := res.median("incremental single", implUpstream, "obj/s"), res.median("incremental single", implFloor, "obj/s"); !math.IsNaN(up) && !math.IsNaN(fl) {
		fmt.Fprintf(w, "- upstream single ops reach %.2f of the floor.\n", up/fl)
	}
	fmt.Fprintln(w, "- latency rows use default options for both; the slow target's worker row is compared with upstream's only (serial) mode.")
	if len(res["fresh refresh"])+len(res["fresh retry"]) > 0 {
		fmt.Fprintf(w, "- fresh write rows: one insert's time from commit to Done while %d objects marked Refreshing, or failing on every attempt (WithRetry(%s, %s)), wait.\n",
			c.freshQueued, c.retryMin, c.retryMax)
	}
	printDeps(w, c, res)
	printOverhead(w, o, res)
	printCurve(w, o, res)
	printMulti(w, o, res)
	printOutage(w, o, res)
}

// printDeps prints the dependency trigger figure, converge's alone.
func printDeps(w io.Writer, c config, res results) {
	if secs := res.median("dependency trigger", implConverge, "s"); !math.IsNaN(secs) {
		n := c.objects - c.objects%depsFanout
		fmt.Fprintf(w, "\n9 dependency trigger (converge only): %d dependency changes, each mapped to %d of %d objects: all re-reconciled in %.2f s, %.0f objects/s (median of %d)\n",
			n/depsFanout, depsFanout, n, secs, res.median("dependency trigger", implConverge, "objects/s"), len(res["dependency trigger"][implConverge]["s"]))
	}
}

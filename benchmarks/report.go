package main

import (
	"fmt"
	"io"
	"math"
	"slices"
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
	conv       float64 // NaN if not measured
	ref        float64 // NaN if not measured
	refName    string  // "upstream" or "floor"
	refInTable bool    // label the reference value with refName
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

func (r results) rows(o options) []row {
	n := o.cfg.objects
	rows := []row{
		{name: "1 incremental, single ops", unit: unitRate},
		{name: "1 incremental, batch ops", unit: unitRate},
		{name: "2 bytes/object, single", unit: unitBytes},
		{name: "2 bytes/object, batch", unit: unitBytes},
		{name: "2 allocs/object, single", unit: unitAllocs},
		{name: "2 allocs/object, batch", unit: unitAllocs},
		{name: "3 floor: single ops vs floor", unit: unitRate, refName: "floor", refInTable: true},
		{name: "3 floor: bytes/object vs floor", unit: unitBytes, refName: "floor", refInTable: true},
		{name: "4 latency back-to-back p50", unit: unitNanos},
		{name: "4 latency back-to-back p99", unit: unitNanos},
		{name: fmt.Sprintf("4 idle latency (%s pause) p50", o.cfg.latencyGap), unit: unitNanos},
		{name: fmt.Sprintf("4 idle latency (%s pause) p99", o.cfg.latencyGap), unit: unitNanos},
		{name: "5 slow target, default (1 worker)", unit: unitRate},
		{name: fmt.Sprintf("5 slow target, %d workers", o.cfg.concurrency), unit: unitRate},
		{name: "6 retry storm, single ops", unit: unitSecs},
		{name: "6 retry storm, batch ops", unit: unitSecs},
		{name: fmt.Sprintf("7 prune %s objects", count(n)), unit: unitSecs},
		{name: fmt.Sprintf("7 refresh sweep %s objects", count(n)), unit: unitSecs},
	}
	type src struct{ c, metric string }
	sources := []struct {
		conv, ref src
		refImpl   impl
		net       bool
	}{
		{src{"incremental single", "obj/s"}, src{"incremental single", "obj/s"}, implUpstream, false},
		{src{"incremental batch", "obj/s"}, src{"incremental batch", "obj/s"}, implUpstream, false},
		{src{"incremental single", "B/obj"}, src{"incremental single", "B/obj"}, implUpstream, true},
		{src{"incremental batch", "B/obj"}, src{"incremental batch", "B/obj"}, implUpstream, true},
		{src{"incremental single", "allocs/obj"}, src{"incremental single", "allocs/obj"}, implUpstream, true},
		{src{"incremental batch", "allocs/obj"}, src{"incremental batch", "allocs/obj"}, implUpstream, true},
		{src{"incremental single", "obj/s"}, src{"floor", "obj/s"}, implFloor, false},
		{src{"incremental single", "B/obj"}, src{"floor", "B/obj"}, implFloor, true},
		{src{"latency back-to-back", "p50"}, src{"latency back-to-back", "p50"}, implUpstream, false},
		{src{"latency back-to-back", "p99"}, src{"latency back-to-back", "p99"}, implUpstream, false},
		{src{"latency idle", "p50"}, src{"latency idle", "p50"}, implUpstream, false},
		{src{"latency idle", "p99"}, src{"latency idle", "p99"}, implUpstream, false},
		{src{"slow default", "obj/s"}, src{"slow default", "obj/s"}, implUpstream, false},
		{src{"slow concurrent", "obj/s"}, src{"slow default", "obj/s"}, implUpstream, false},
		{src{"retry single", "s"}, src{"retry single", "s"}, implUpstream, false},
		{src{"retry batch", "s"}, src{"retry batch", "s"}, implUpstream, false},
		{src{"prune", "s"}, src{"prune", "s"}, implUpstream, false},
		{src{"refresh", "s"}, src{"refresh", "s"}, implUpstream, false},
	}
	var out []row
	for i, s := range sources {
		rw := rows[i]
		if rw.refName == "" {
			rw.refName = "upstream"
		}
		get := r.median
		if s.net {
			get = r.net
		}
		rw.conv = get(s.conv.c, implConverge, s.conv.metric)
		rw.ref = get(s.ref.c, s.refImpl, s.ref.metric)
		if math.IsNaN(rw.conv) && math.IsNaN(rw.ref) || s.refImpl == implFloor && math.IsNaN(rw.ref) {
			continue // workload not run
		}
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
func verdict(rw row) (ratio, better string) {
	if math.IsNaN(rw.conv) || math.IsNaN(rw.ref) || rw.conv <= 0 || rw.ref <= 0 {
		return "-", "-"
	}
	ratio = fmt.Sprintf("%.2f", rw.conv/rw.ref)
	f := rw.conv / rw.ref // > 1 means converge is better
	if !rw.unit.higherBetter {
		f = rw.ref / rw.conv
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
	fmt.Fprintf(w, "machine: %s; load average %s at start, %s at end\n", machine(), info.loadStart, info.loadEnd)
	fmt.Fprintf(w, "sizes: objects=%d txn=%d latency-samples=%d slow-objects=%d (Update %s) retry-objects=%d (WithRetry(%s, %s)); median of %d run(s); took %s\n\n",
		c.objects, c.txnSize, c.latencySamples, c.slowObjects, c.slowDelay, c.retryObjects, c.retryMin, c.retryMax, o.repeats, info.took.Round(time.Second))

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "workload\tconverge\tupstream\tconverge/upstream\tbetter")
	for _, rw := range res.rows(o) {
		ref := fmtValue(rw.unit, rw.ref)
		if rw.refInTable && ref != "-" {
			ref = rw.refName + " " + ref
		}
		ratio, better := verdict(rw)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", rw.name, fmtValue(rw.unit, rw.conv), ref, ratio, better)
	}
	tw.Flush()

	fmt.Fprintln(w)
	fmt.Fprintln(w, "Notes:")
	fmt.Fprintln(w, "- ratio is converge's figure divided by the reference; \"better\" says who wins and by how much.")
	if len(res["floor"]) > 0 {
		fmt.Fprintln(w, "- rows marked floor compare with a bare Changes() + CompareAndSwap loop (1000 per txn) in the upstream column.")
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
	if up, fl := res.median("incremental single", implUpstream, "obj/s"), res.median("floor", implFloor, "obj/s"); !math.IsNaN(up) && !math.IsNaN(fl) {
		fmt.Fprintf(w, "- upstream single ops reach %.2f of the floor.\n", up/fl)
	}
	fmt.Fprintln(w, "- latency rows use default options for both; the slow target's worker row is compared with upstream's only (serial) mode.")
}

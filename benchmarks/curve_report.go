package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// curveFlat is how far the cost per object at the largest size may be from
// the cost at the smallest for the curve to count as flat.
const curveFlat = 0.20

// printCurve prints the cost curve: one line per size and library, then
// whether each cost per object stays flat from the smallest size to the
// largest, and a plot of the incremental cost.
func printCurve(w io.Writer, o options, res results) {
	sizes := o.cfg.curveSizes
	if len(sizes) == 0 || res[curveCaseName("incremental", sizes[0])] == nil {
		return
	}
	fmt.Fprintln(w, "\nCost curve, single ops, no-op operations; medians over runs. ns/obj is wall time per object; B/obj is allocated per object")
	fmt.Fprintln(w, "(the inserter included); heap/obj is the heap's peak growth per object during the incremental run.")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "objects\timpl\tincremental\tns/obj\tB/obj\theap/obj\tbacklog ns/obj\tshared set ns/obj\tprune ns/obj\trefresh ns/obj\tretry ns/obj\t")
	for _, size := range sizes {
		for _, im := range curveImpls(res, size) {
			inc := curveCaseName("incremental", size)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s", count(size), im,
				fmtValue(unitRate, res.median(inc, im, "obj/s")),
				fmtNs(res.nsPerObject("incremental", size, im)),
				fmtValue(unitBytes, res.median(inc, im, "B/obj")),
				fmtValue(unitBytes, res.median(inc, im, "heap/obj")))
			for _, wl := range curveWorkloads[1:] {
				if im == implFloor {
					fmt.Fprint(tw, "\t") // the floor runs the incremental workload only
					continue
				}
				fmt.Fprintf(tw, "\t%s", fmtNs(res.nsPerObject(wl, size, im)))
			}
			fmt.Fprintln(tw, "\t")
		}
	}
	tw.Flush()
	if len(sizes) < 2 {
		return
	}
	first, last := sizes[0], sizes[len(sizes)-1]
	fmt.Fprintf(w, "\nCost per object at %s vs %s (flat: within ±%.0f%%):\n", count(last), count(first), 100*curveFlat)
	for _, im := range curveImpls(res, first) {
		var parts, grows []string
		check := func(name string, a, b float64) {
			g := b / a
			if math.IsNaN(g) || math.IsInf(g, 0) {
				return
			}
			parts = append(parts, fmt.Sprintf("%s %.2f", name, g))
			if math.Abs(g-1) > curveFlat {
				grows = append(grows, name)
			}
		}
		for _, wl := range curveWorkloads {
			check(wl, res.nsPerObject(wl, first, im), res.nsPerObject(wl, last, im))
		}
		inc := func(size int) string { return curveCaseName("incremental", size) }
		check("B/obj", res.median(inc(first), im, "B/obj"), res.median(inc(last), im, "B/obj"))
		check("heap/obj", res.median(inc(first), im, "heap/obj"), res.median(inc(last), im, "heap/obj"))
		verdict := "flat"
		if len(grows) > 0 {
			verdict = "not flat: " + strings.Join(grows, ", ")
		}
		fmt.Fprintf(w, "  %-8s %s → %s\n", im, strings.Join(parts, ", "), verdict)
	}
	plotCurve(w, res, sizes)
}

// plotCurve draws the incremental ns/obj of both libraries as bars, one
// per size, scaled to the largest.
func plotCurve(w io.Writer, res results, sizes []int) {
	const width = 50
	top := 0.0
	for _, size := range sizes {
		for _, im := range curveImpls(res, size) {
			if v := res.nsPerObject("incremental", size, im); v > top {
				top = v
			}
		}
	}
	if !(top > 0) {
		return
	}
	fmt.Fprintln(w, "\nIncremental ns/object (c = converge, u = upstream, f = floor):")
	for _, size := range sizes {
		for _, im := range curveImpls(res, size) {
			v := res.nsPerObject("incremental", size, im)
			if math.IsNaN(v) {
				continue
			}
			bar := strings.Repeat(im.String()[:1], max(1, int(math.Round(v/top*width))))
			fmt.Fprintf(w, "  %5s %-*s %s\n", count(size), width, bar, fmtNs(v))
		}
	}
}

// curveImpls returns who ran the curve's incremental workload at size:
// converge, upstream and the floor, as selected.
func curveImpls(res results, size int) []impl {
	var out []impl
	for _, im := range []impl{implConverge, implUpstream, implFloor} {
		if len(res[curveCaseName("incremental", size)][im]) > 0 {
			out = append(out, im)
		}
	}
	return out
}

func fmtNs(v float64) string {
	if math.IsNaN(v) || v <= 0 {
		return "-"
	}
	if v >= 10_000 {
		return fmt.Sprintf("%.1f µs", v/1000)
	}
	return fmt.Sprintf("%.0f ns", v)
}

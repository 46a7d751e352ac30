package main

import (
	"fmt"
	"image/color"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// The charts of the multi and restart workloads (see writePlots):
//
//	multi.svg    several reconcilers on one status set: objects per second
//	             against the number of reconcilers, each count's paired
//	             ratio to one reconciler with the goal of 0.5 marked, the
//	             share of the run the table's write lock was held, and
//	             conflicts, bytes and write transactions per object;
//	             converge, upstream, the floor and the floor that commits
//	             once for all reconcilers, median over runs, bars from the
//	             lowest to the highest
//	restart.svg  a restart with the table full of Done objects, or with 1%
//	             of them Pending: time until idle, the first prune's end
//	             and the peak heap growth per object, converge beside
//	             upstream, median over runs, bars from the lowest to the
//	             highest

// multiGoal is issue 36's goal for the multi workload: 4 reconcilers on one
// status set reach at least this share of one reconciler's objects per
// second.
const multiGoal = 0.5

// multiPlots returns the multi workload's panels in one row, or nil if it
// did not run.
func multiPlots(res results, c multiConfig) [][]*plot.Plot {
	if len(c.counts) == 0 || res[multiCaseName(c.counts[0])] == nil {
		return nil
	}
	xs := make([]float64, len(c.counts))
	ticks := make([]plot.Tick, len(c.counts))
	for i, n := range c.counts {
		xs[i] = float64(n)
		ticks[i] = plot.Tick{Value: float64(n), Label: fmt.Sprint(n)}
	}
	impls := []impl{implConverge, implUpstream, implFloor}
	// values returns, for each count, im's runs of metric.
	values := func(im impl, metric string) [][]float64 {
		out := make([][]float64, len(c.counts))
		for i, n := range c.counts {
			out[i] = res[multiCaseName(n)][im][metric]
		}
		return out
	}
	// ratios returns, for each count, im's paired per-run ratios of
	// objects per second to the first count's.
	ratios := func(im impl) [][]float64 {
		out := make([][]float64, len(c.counts))
		ref := res[multiCaseName(c.counts[0])][im]["obj/s"]
		for i, n := range c.counts {
			vs := res[multiCaseName(n)][im]["obj/s"]
			for j := range min(len(vs), len(ref)) {
				if ref[j] > 0 {
					out[i] = append(out[i], vs[j]/ref[j])
				}
			}
		}
		return out
	}
	// oneCommit is the floor's one-commit run at each count, which does
	// not run with one reconciler: the floor's own run stands for it there.
	oneCommit := func(metric string) [][]float64 {
		out := make([][]float64, len(c.counts))
		for i, n := range c.counts {
			out[i] = res[multiOneCommitCaseName(n)][implFloor][metric]
			if n == 1 {
				out[i] = res[multiCaseName(n)][implFloor][metric]
			}
		}
		return out
	}
	oneCommitRatios := func() [][]float64 {
		out := make([][]float64, len(c.counts))
		ref := res[multiCaseName(c.counts[0])][implFloor]["obj/s"]
		for i, vs := range oneCommit("obj/s") {
			for j := range min(len(vs), len(ref)) {
				if ref[j] > 0 {
					out[i] = append(out[i], vs[j]/ref[j])
				}
			}
		}
		return out
	}
	panel := func(title, unit string, get func(impl) [][]float64, extra [][]float64) *plot.Plot {
		p := newPlot(title, "reconcilers on one status set", unit)
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		p.X.Min, p.X.Max = xs[0]-0.3, xs[len(xs)-1]+0.3
		p.Y.Min = 0
		lines := 0
		for _, im := range impls {
			vs := get(im)
			if !slices.ContainsFunc(vs, func(v []float64) bool { return len(v) > 0 }) {
				continue
			}
			if err := addMedianLine(p, im.String(), implColors[im], im == implFloor, xs, vs); err == nil {
				lines++
			}
		}
		if slices.ContainsFunc(extra[1:], func(v []float64) bool { return len(v) > 0 }) {
			if err := addMedianLine(p, "floor, one commit for all", colorPass, true, xs, extra); err == nil {
				lines++
			}
		}
		roomForLegend(p, lines)
		return p
	}
	rate := panel(fmt.Sprintf("%s objects: until Done in every reconciler", count(c.objects)), "objects/s",
		func(im impl) [][]float64 { return values(im, "obj/s") }, oneCommit("obj/s"))
	share := panel(fmt.Sprintf("objects/s against %d reconciler, paired per run", c.counts[0]), "ratio (same run)", ratios, oneCommitRatios())
	if c.counts[0] == 1 && slices.Contains(c.counts, 4) {
		addHLine(share, fmt.Sprintf("goal for 4: %.1f", multiGoal), colorFail, multiGoal, 4-0.3, 4+0.3)
		// Each object is written once by the inserter and once by each
		// reconciler: if the table's writes were all the cost, n
		// reconcilers would reach 2/(n+1) of one.
		var xys plotter.XYs
		for _, x := range xs {
			xys = append(xys, plotter.XY{X: x, Y: 2 / (x + 1)})
		}
		if l, err := plotter.NewLine(xys); err == nil {
			l.Color = colorMark
			l.Dashes = []vg.Length{vg.Points(1), vg.Points(2)}
			share.Add(l)
			share.Legend.Add("2/(n+1): writes per object alone", l)
		}
		share.Y.Max = math.Max(share.Y.Max, 1.4)
	}
	conflicts := panel("status compare-and-swap conflicts", "per object",
		func(im impl) [][]float64 { return values(im, "conflicts/obj") }, oneCommit("conflicts/obj"))
	bytes := panel("allocated, the inserter included", "B/object",
		func(im impl) [][]float64 { return values(im, "B/obj") }, oneCommit("B/obj"))
	held := panel("the table's write lock held", "share of the run",
		func(im impl) [][]float64 { return values(im, "lock held") }, oneCommit("lock held"))
	held.Y.Max = math.Max(held.Y.Max, 1.2)
	perThousand := func(vs [][]float64) [][]float64 {
		out := make([][]float64, len(vs))
		for i := range vs {
			for _, v := range vs[i] {
				out[i] = append(out[i], 1000*v)
			}
		}
		return out
	}
	txns := panel("write transactions, the inserter's included", "per 1000 objects",
		func(im impl) [][]float64 { return perThousand(values(im, "txns/obj")) }, perThousand(oneCommit("txns/obj")))
	return [][]*plot.Plot{{rate, share, held}, {conflicts, bytes, txns}}
}

// addHLine draws a horizontal line at y from x0 to x1, named in the legend.
func addHLine(p *plot.Plot, name string, c color.Color, y, x0, x1 float64) {
	l, err := plotter.NewLine(plotter.XYs{{X: x0, Y: y}, {X: x1, Y: y}})
	if err != nil {
		return
	}
	l.Color = c
	l.Width = vg.Points(2)
	p.Add(l)
	p.Legend.Add(name, l)
}

// restartPlots returns the restart workload's panels in one row, or nil if
// it did not run.
func restartPlots(res results, objects int) [][]*plot.Plot {
	cases := []struct{ name, label string }{
		{"restart done", count(objects) + " Done"},
		{"restart pending", count(objects) + ", 1% Pending"},
	}
	if res[cases[0].name] == nil && res[cases[1].name] == nil {
		return nil
	}
	ticks := make([]plot.Tick, len(cases))
	for i, c := range cases {
		ticks[i] = plot.Tick{Value: float64(i), Label: c.label}
	}
	metrics := []struct {
		title, unit, metric string
		scale               float64
	}{
		{"restart: from the start until idle", "ms", "s", 1e3},
		{"restart: until the first prune's end", "ms", "prune s", 1e3},
		{"restart: peak heap growth", "B/object", "heap/obj", 1},
	}
	row := make([]*plot.Plot, len(metrics))
	for k, m := range metrics {
		p := newPlot(m.title, "table at the start", m.unit)
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		p.X.Min, p.X.Max = -0.5, float64(len(cases))-0.5
		p.Y.Min = 0
		lines := 0
		for j, im := range []impl{implConverge, implUpstream} {
			off := 0.12 * float64(2*j-1) // converge left, upstream right
			var xs []float64
			var vs [][]float64
			for i, c := range cases {
				var scaled []float64
				for _, v := range res[c.name][im][m.metric] {
					scaled = append(scaled, v*m.scale)
				}
				if len(scaled) > 0 {
					xs, vs = append(xs, float64(i)+off), append(vs, scaled)
				}
			}
			if len(xs) == 0 {
				continue
			}
			if err := addMedianPoints(p, im.String(), implColors[im], xs, vs); err == nil {
				lines++
			}
		}
		roomForLegend(p, lines)
		row[k] = p
	}
	return [][]*plot.Plot{row}
}

// addMedianPoints adds to p a point at the median of each x's values, with
// bars from their lowest to their highest, in c, named in the legend; unlike
// addMedianLine it joins no points, for categories on the x axis.
func addMedianPoints(p *plot.Plot, name string, c color.Color, xs []float64, values [][]float64) error {
	mb := medianBarsOf(xs, values)
	if len(mb.XYs) == 0 {
		return nil
	}
	points, err := plotter.NewScatter(mb.XYs)
	if err != nil {
		return err
	}
	points.Color = c
	points.Radius = vg.Points(3)
	bars, err := plotter.NewYErrorBars(mb)
	if err != nil {
		return err
	}
	bars.Color = c
	bars.CapWidth = vg.Points(6)
	p.Add(points, bars)
	p.Legend.Add(name, points)
	return nil
}

package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// -plot DIR writes SVG charts of what ran, with gonum.org/v1/plot (which
// only this program imports, never a library package):
//
//	curve.svg       the cost curve: ns per object against the table size,
//	                for each curve workload, converge and upstream (and the
//	                floor for the incremental workload); median over runs,
//	                bars from the lowest to the highest run
//	throughput.svg  the incremental workload's objects per second, run by
//	                run, with single and batch ops, and the paired ratios
//	                per run with their median
//	multi.svg       several reconcilers on one table (plot_workloads.go)
//	restart.svg     a restart with the table full (plot_workloads.go)
//	outage.svg      a target down for everyone (outage_plot.go)
//	soak.svg        the soak's series over time, the warm-up marked, and the
//	                medians of the first and last third that the verdict
//	                compares
//	soak.csv        the soak's samples, to plot them again elsewhere

var implColors = map[impl]color.Color{
	implConverge: color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // blue
	implUpstream: color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, // orange
	implFloor:    color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff}, // grey
}

var (
	colorPass = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	colorFail = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	colorMark = color.RGBA{R: 0x99, G: 0x99, B: 0x99, A: 0xff}
)

// writePlots writes the charts of what ran into o.plotDir and returns the
// files written.
func writePlots(o options, res results, soak *soakResult) ([]string, error) {
	if err := os.MkdirAll(o.plotDir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	save := func(name string, rows, cols int, w, h vg.Length, plots [][]*plot.Plot) error {
		path := filepath.Join(o.plotDir, name)
		if err := saveGrid(path, rows, cols, w, h, plots); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		files = append(files, path)
		return nil
	}
	if plots := curvePlots(res, o.cfg.curveSizes); plots != nil {
		if err := save("curve.svg", 2, 4, 32*vg.Centimeter, 16*vg.Centimeter, plots); err != nil {
			return files, err
		}
	}
	if plots := throughputPlots(res, o.cfg.objects); plots != nil {
		if err := save("throughput.svg", 1, 3, 32*vg.Centimeter, 10*vg.Centimeter, plots); err != nil {
			return files, err
		}
	}
	if plots := multiPlots(res, o.cfg.multi); plots != nil {
		if err := save("multi.svg", 2, 3, 32*vg.Centimeter, 18*vg.Centimeter, plots); err != nil {
			return files, err
		}
	}
	if plots := restartPlots(res, o.cfg.objects); plots != nil {
		if err := save("restart.svg", 1, 3, 30*vg.Centimeter, 10*vg.Centimeter, plots); err != nil {
			return files, err
		}
	}
	if plots := outagePlots(res, o.cfg.outage); plots != nil {
		if err := save("outage.svg", 1, 3, 30*vg.Centimeter, 10*vg.Centimeter, plots); err != nil {
			return files, err
		}
	}
	if soak != nil {
		plots := soakPlots(soak)
		rows := (len(plots[0]) + 2) / 3
		grid := make([][]*plot.Plot, rows)
		for i := range grid {
			grid[i] = make([]*plot.Plot, 3)
			for j := range 3 {
				if k := 3*i + j; k < len(plots[0]) {
					grid[i][j] = plots[0][k]
				}
			}
		}
		if err := save("soak.svg", rows, 3, 30*vg.Centimeter, vg.Length(rows)*7*vg.Centimeter, grid); err != nil {
			return files, err
		}
		path := filepath.Join(o.plotDir, "soak.csv")
		if err := os.WriteFile(path, []byte(soakCSV(soak)), 0o644); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}

// saveGrid draws plots, rows by cols (nil cells stay empty), into one SVG.
func saveGrid(path string, rows, cols int, w, h vg.Length, plots [][]*plot.Plot) error {
	c := vgsvg.New(w, h)
	dc := draw.New(c)
	tiles := draw.Tiles{
		Rows: rows, Cols: cols,
		PadX: vg.Centimeter / 2, PadY: vg.Centimeter / 2,
		PadTop: vg.Millimeter * 3, PadBottom: vg.Millimeter * 3, PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 3,
	}
	canvases := plot.Align(plots, tiles, dc)
	for i := range rows {
		for j := range cols {
			if plots[i][j] != nil {
				plots[i][j].Draw(canvases[i][j])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(10)
	p.X.Label.Text = x
	p.Y.Label.Text = y
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = vg.Points(9)
		a.Tick.Label.Font.Size = vg.Points(8)
		a.Tick.Marker = shortTicks{plot.DefaultTicks{}}
	}
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	return p
}

// roomForLegend raises the top of p's y axis so that a legend of n lines
// at the top does not cover the data.
func roomForLegend(p *plot.Plot, n int) {
	if span := p.Y.Max - p.Y.Min; span > 0 {
		p.Y.Max += span * 0.1 * float64(n)
	}
}

// shortTicks labels ticks as 250k or 1.5M instead of 250000.00.
type shortTicks struct{ plot.Ticker }

func (t shortTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := t.Ticker.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = shortNumber(ts[i].Value)
		}
	}
	return ts
}

func shortNumber(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 4, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 4, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// medianBars is a series of points with bars from the lowest to the
// highest value at each.
type medianBars struct {
	plotter.XYs
	plotter.YErrors
}

// medianBarsOf returns the median of each x's finite values, with bars
// from their lowest to their highest; an x with none is left out.
func medianBarsOf(xs []float64, values [][]float64) medianBars {
	var mb medianBars
	for i, x := range xs {
		vs := slices.DeleteFunc(slices.Clone(values[i]), func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) })
		if len(vs) == 0 {
			continue
		}
		m := median(vs)
		mb.XYs = append(mb.XYs, plotter.XY{X: x, Y: m})
		mb.YErrors = append(mb.YErrors, struct{ Low, High float64 }{m - slices.Min(vs), slices.Max(vs) - m})
	}
	return mb
}

// addMedianLine adds to p a line through the median of each x's values,
// with bars from their lowest to their highest, in c, named in the legend.
func addMedianLine(p *plot.Plot, name string, c color.Color, dashed bool, xs []float64, values [][]float64) error {
	mb := medianBarsOf(xs, values)
	if len(mb.XYs) == 0 {
		return nil
	}
	line, points, err := plotter.NewLinePoints(mb.XYs)
	if err != nil {
		return err
	}
	line.Color, points.Color = c, c
	if dashed {
		line.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
	}
	bars, err := plotter.NewYErrorBars(mb)
	if err != nil {
		return err
	}
	bars.Color = c
	bars.CapWidth = vg.Points(3)
	p.Add(line, points, bars)
	p.Legend.Add(name, line, points)
	return nil
}

// curveMetric is one panel of the cost curve chart.
type curveMetric struct {
	title, unit string
	workload    string // a curveWorkloads entry
	impls       []impl
	runs        func(res results, size int, im impl) []float64 // one value per run
}

func curveNsPerObject(workload string) func(results, int, impl) []float64 {
	return func(res results, size int, im impl) []float64 {
		c := res[curveCaseName(workload, size)][im]
		var out []float64
		for _, v := range c["obj/s"] {
			out = append(out, 1e9/v)
		}
		for _, v := range c["s"] {
			out = append(out, v*1e9/float64(size))
		}
		return out
	}
}

func curveMetricRuns(metric string) func(results, int, impl) []float64 {
	return func(res results, size int, im impl) []float64 {
		return res[curveCaseName("incremental", size)][im][metric]
	}
}

// curvePlots returns the panels of the cost curve, two rows of four, or
// nil if the curve did not run.
func curvePlots(res results, sizes []int) [][]*plot.Plot {
	if len(sizes) == 0 || res[curveCaseName("incremental", sizes[0])] == nil {
		return nil
	}
	all := []impl{implConverge, implUpstream, implFloor}
	both := []impl{implConverge, implUpstream}
	metrics := []curveMetric{
		{"incremental: time per object", "ns/object", "incremental", all, curveNsPerObject("incremental")},
		{"incremental: allocated (inserter incl.)", "B/object", "incremental", all, curveMetricRuns("B/obj")},
		{"incremental: peak heap growth", "B/object", "incremental", all, curveMetricRuns("heap/obj")},
		{"restart backlog", "ns/object", "backlog", both, curveNsPerObject("backlog")},
		{"two reconcilers, one status set", "ns/object", "shared", both, curveNsPerObject("shared")},
		{"one prune", "ns/object", "prune", both, curveNsPerObject("prune")},
		{"one refresh sweep", "ns/object", "refresh", both, curveNsPerObject("refresh")},
		{"every object failing once", "ns/object", "retry", both, curveNsPerObject("retry")},
	}
	xs := make([]float64, len(sizes))
	for i, s := range sizes {
		xs[i] = float64(s)
	}
	grid := [][]*plot.Plot{make([]*plot.Plot, 4), make([]*plot.Plot, 4)}
	for k, m := range metrics {
		p := newPlot(m.title, "objects in the table", m.unit)
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = shortTicks{plot.LogTicks{Prec: -1}}
		p.Y.Min = 0
		lines := 0
		for _, im := range m.impls {
			values := make([][]float64, len(sizes))
			n := 0
			for i, size := range sizes {
				values[i] = m.runs(res, size, im)
				n += len(values[i])
			}
			if n == 0 {
				continue
			}
			if err := addMedianLine(p, im.String(), implColors[im], im == implFloor, xs, values); err == nil {
				lines++
			}
		}
		roomForLegend(p, lines)
		grid[k/4][k%4] = p
	}
	return grid
}

// throughputPlots returns the incremental workload's per-run throughput,
// single and batch ops, and the paired ratios per run, or nil if it did not
// run.
func throughputPlots(res results, objects int) [][]*plot.Plot {
	if res["incremental single"] == nil && res["incremental batch"] == nil {
		return nil
	}
	row := make([]*plot.Plot, 3)
	for k, cs := range []string{"incremental single", "incremental batch"} {
		if res[cs] == nil {
			continue
		}
		p := newPlot(fmt.Sprintf("%s ops, %s objects: each run", strings.TrimPrefix(cs, "incremental "), count(objects)), "run", "objects/s")
		p.Y.Min = 0
		lines := 0
		for _, im := range []impl{implConverge, implUpstream, implFloor} {
			vs := res[cs][im]["obj/s"]
			if len(vs) == 0 {
				continue
			}
			addRunLine(p, fmt.Sprintf("%s, median %s", im, unitRate.format(median(vs))), implColors[im], im == implFloor, vs)
			lines++
		}
		roomForLegend(p, lines)
		row[k] = p
	}
	p := newPlot("paired ratios, run by run", "run", "ratio (same run)")
	lines := 0
	ratios := []struct {
		name string
		def  ratioDef
		c    color.Color
	}{
		{"converge/upstream single", ratioDef{conv: sample{"incremental single", implConverge, "obj/s"}, ref: sample{"incremental single", implUpstream, "obj/s"}}, implColors[implUpstream]},
		{"converge/upstream batch", ratioDef{conv: sample{"incremental batch", implConverge, "obj/s"}, ref: sample{"incremental batch", implUpstream, "obj/s"}}, colorPass},
		{"converge/floor single", ratioDef{conv: sample{"incremental single", implConverge, "obj/s"}, ref: sample{"incremental single", implFloor, "obj/s"}}, implColors[implFloor]},
		{"converge/floor batch", ratioDef{conv: sample{"incremental batch", implConverge, "obj/s"}, ref: sample{"incremental batch", implFloor, "obj/s"}}, colorMark},
	}
	for _, r := range ratios {
		a, b := res.series(r.def.conv, false), res.series(r.def.ref, false)
		var vs []float64
		for i := range min(len(a), len(b)) {
			vs = append(vs, a[i]/b[i])
		}
		if len(vs) == 0 {
			continue
		}
		name := fmt.Sprintf("%s %.2f", r.name, median(vs))
		if st := res.ratioStats(r.def); st.n > 1 {
			name += fmt.Sprintf(", ±%.1f%% (n=%d)", 100*st.ci, st.n)
		}
		addRunLine(p, name, r.c, false, vs)
		lines++
	}
	roomForLegend(p, lines)
	row[2] = p
	return [][]*plot.Plot{row}
}

// addRunLine adds the values of successive runs as points joined by a
// thin line, and their median as a horizontal line.
func addRunLine(p *plot.Plot, name string, c color.Color, dashed bool, vs []float64) {
	xys := make(plotter.XYs, len(vs))
	for i, v := range vs {
		xys[i] = plotter.XY{X: float64(i + 1), Y: v}
	}
	line, points, err := plotter.NewLinePoints(xys)
	if err != nil {
		return
	}
	line.Color, points.Color = c, c
	line.Width = vg.Points(0.5)
	if dashed {
		line.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
	}
	m := median(vs)
	med, err := plotter.NewLine(plotter.XYs{{X: 1, Y: m}, {X: float64(max(2, len(vs))), Y: m}})
	if err != nil {
		return
	}
	med.Color = c
	med.Width = vg.Points(1.5)
	med.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
	p.Add(line, points, med)
	p.Legend.Add(name, points, med)
}

// soakPlots returns one panel per soak series (judged ones first), in one
// row for writePlots to fold.
func soakPlots(r *soakResult) [][]*plot.Plot {
	var out []*plot.Plot
	warm := r.cfg.warmupOrDefault()
	unit, per := "minutes", 60e9
	if r.cfg.duration < 5*time.Minute {
		unit, per = "seconds", 1e9
	}
	minutes := func(d float64) float64 { return d / per }
	order := []int{}
	for i, d := range soakSeriesDefs {
		if d.judged {
			order = append(order, i)
		}
	}
	order = append(order, seriesWrites, seriesUpdates, seriesLatencyN)
	for _, i := range order {
		d := soakSeriesDefs[i]
		var xys plotter.XYs
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, s := range r.samples {
			v := s.v[i] / d.scale
			if math.IsNaN(v) {
				continue
			}
			xys = append(xys, plotter.XY{X: minutes(float64(s.at)), Y: v})
			lo, hi = min(lo, v), max(hi, v)
		}
		title := d.name
		if d.unit != "" {
			title += " (" + d.unit + ")"
		}
		v := r.verdicts[i]
		switch {
		case !d.judged:
			title += ": not judged"
		case v.tooFew:
			title += ": too few samples"
		case v.grew:
			title += fmt.Sprintf(": GROWS %s → %s", d.format(v.first), d.format(v.last))
		default:
			title += ": flat"
		}
		p := newPlot(title, unit, "")
		p.Legend.Top, p.Legend.Left = true, false
		if len(xys) > 0 {
			line, err := plotter.NewLine(xys)
			if err == nil {
				line.Color = implColors[implConverge]
				p.Add(line)
			}
			if lo == hi {
				lo, hi = lo-1, hi+1
			}
			p.Y.Min, p.Y.Max = min(0, lo), hi+(hi-lo)*0.15
			if warm > 0 {
				wl, err := plotter.NewLine(plotter.XYs{{X: minutes(float64(warm)), Y: p.Y.Min}, {X: minutes(float64(warm)), Y: p.Y.Max}})
				if err == nil {
					wl.Color = colorMark
					wl.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
					p.Add(wl)
				}
			}
			if d.judged && !v.tooFew {
				addThirds(p, r, i, v, per)
			}
		}
		out = append(out, p)
	}
	return [][]*plot.Plot{out}
}

// addThirds draws the medians of the first and the last third of the
// judged samples over the time they span: green if the series passes,
// red if it grows.
func addThirds(p *plot.Plot, r *soakResult, i int, v growthVerdict, per float64) {
	d := soakSeriesDefs[i]
	var ats []float64
	for _, s := range r.samples {
		if s.at > r.cfg.warmupOrDefault() && !math.IsNaN(s.v[i]) {
			ats = append(ats, float64(s.at)/per)
		}
	}
	k := len(ats) / 3
	if k == 0 {
		return
	}
	c := colorPass
	if v.grew {
		c = colorFail
	}
	for _, seg := range []struct {
		from, to, y float64
	}{{ats[0], ats[k-1], v.first}, {ats[len(ats)-k], ats[len(ats)-1], v.last}} {
		l, err := plotter.NewLine(plotter.XYs{{X: seg.from, Y: seg.y / d.scale}, {X: seg.to, Y: seg.y / d.scale}})
		if err != nil {
			continue
		}
		l.Color = c
		l.Width = vg.Points(2.5)
		p.Add(l)
	}
}

// soakCSV returns the soak's samples as CSV, one column per series, in
// raw units (bytes, counts, milliseconds, per second).
func soakCSV(r *soakResult) string {
	var b strings.Builder
	b.WriteString("seconds")
	for _, d := range soakSeriesDefs {
		b.WriteString("," + strings.NewReplacer(" ", "_", "(", "", ")", "", "/", "_per_").Replace(d.name))
	}
	b.WriteString("\n")
	for _, s := range r.samples {
		fmt.Fprintf(&b, "%.3f", s.at.Seconds())
		for _, v := range s.v {
			fmt.Fprintf(&b, ",%g", v)
		}
		b.WriteString("\n")
	}
	return b.String()
}

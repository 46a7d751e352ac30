package main

import (
	"image/color"
	"math"

	"gonum.org/v1/plot"
)

// outage.svg, the outage workload's chart (see writePlots): for each
// variant, calls and entries per second to the target during the second
// half of the outage (log scale, a rate of 0 drawn at 0.1), with the goal
// of one probe per maximum backoff marked, and the time from the recovery
// until every object was Done, with one maximum backoff marked; median over
// runs, bars from the lowest to the highest.

// outageColors tell the variants apart; the first two are those of the
// implementations.
var outageColors = []color.Color{
	implColors[implUpstream],
	implColors[implConverge],
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, // green
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, // purple
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, // orange
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}, // brown
}

// outageLabels are the variants' short names on the x axis.
var outageLabels = []string{"upstream", "converge", "+ breaker", "batch + breaker", "+ RetryAfter", "batch + RetryAfter"}

// outagePlots returns the outage workload's panels in one row, or nil if it
// did not run.
func outagePlots(res results, c outageConfig) [][]*plot.Plot {
	ran := false
	ticks := make([]plot.Tick, len(outageVariants))
	for i, v := range outageVariants {
		ticks[i] = plot.Tick{Value: float64(i), Label: outageLabels[i]}
		ran = ran || res[outageCaseName(v)] != nil
	}
	if !ran {
		return nil
	}
	panels := []struct {
		title, unit, metric string
		log                 bool
		goal                float64
		goalName            string
	}{
		{"outage, 2nd half: calls to the target", "calls/s", "calls/s 2nd", true, 1 / c.retryMax.Seconds(), "goal: one probe per " + c.retryMax.String()},
		{"outage, 2nd half: objects in them", "entries/s", "entries/s 2nd", true, 1 / c.retryMax.Seconds(), "goal: one probe per " + c.retryMax.String()},
		{"from the recovery until all Done", "s", "recovery s", false, c.retryMax.Seconds(), "one backoff step (" + c.retryMax.String() + ")"},
	}
	row := make([]*plot.Plot, len(panels))
	for k, pn := range panels {
		p := newPlot(pn.title, "", pn.unit)
		for i, v := range outageVariants {
			var vs []float64
			for _, x := range res[outageCaseName(v)][v.im][pn.metric] {
				if pn.log {
					x = math.Max(x, 0.1)
				}
				vs = append(vs, x)
			}
			if len(vs) > 0 {
				_ = addMedianPoints(p, "", outageColors[i], []float64{float64(i)}, [][]float64{vs})
			}
		}
		p.Legend = plot.NewLegend()
		p.Legend.TextStyle.Font.Size = 8
		p.Legend.Top, p.Legend.Left = true, true
		addHLine(p, pn.goalName, colorMark, pn.goal, -0.5, float64(len(outageVariants))-0.5)
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		p.X.Min, p.X.Max = -0.5, float64(len(outageVariants))-0.5
		if pn.log {
			p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, shortTicks{plot.LogTicks{Prec: -1}}
			p.Y.Min, p.Y.Max = math.Min(p.Y.Min, pn.goal)/2, math.Max(p.Y.Max, pn.goal)*20
		} else {
			p.Y.Min = 0
			roomForLegend(p, 1)
		}
		row[k] = p
	}
	return [][]*plot.Plot{row}
}

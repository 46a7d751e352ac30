package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
)

// sample names one series of measured values: a case, who ran it, and the
// metric. Values are in run order, one per repetition.
type sample struct {
	c      string
	im     impl
	metric string
}

// ratioDef is a ratio between two series, computed run by run: the i-th
// value of conv over the i-th value of ref, both measured in the same
// repetition, back to back. Pairing them cancels most of the drift that
// other work on the machine causes between repetitions.
type ratioDef struct {
	conv, ref sample
	net       bool // subtract the insert-only baseline's median from both first
	gate      bool // repeat until its spread is within -spread (see runner)
}

// ratioStat summarises the paired ratios of one ratioDef.
type ratioStat struct {
	n                int
	median, min, max float64
	// ci is the half-width of the 95% confidence interval of the mean
	// ratio, as a fraction of it: 0.05 is ±5%. It is computed on the
	// logarithms of the ratios (a Student t interval), so that 1.2 and
	// 1/1.2 are equally far from 1. NaN with fewer than two runs.
	ci float64
}

func (r results) series(s sample, net bool) []float64 {
	vs := slices.Clone(r[s.c][s.im][s.metric])
	if net {
		if base := r.median("insert only", implNone, s.metric); !math.IsNaN(base) {
			for i := range vs {
				vs[i] -= base
			}
		}
	}
	return vs
}

// ratioStats computes the paired ratios of d over the repetitions in which
// both sides were measured.
func (r results) ratioStats(d ratioDef) ratioStat {
	a, b := r.series(d.conv, d.net), r.series(d.ref, d.net)
	n := min(len(a), len(b))
	ratios := make([]float64, 0, n)
	for i := range n {
		if a[i] > 0 && b[i] > 0 {
			ratios = append(ratios, a[i]/b[i])
		}
	}
	return newRatioStat(ratios)
}

func newRatioStat(ratios []float64) ratioStat {
	st := ratioStat{n: len(ratios), median: math.NaN(), min: math.NaN(), max: math.NaN(), ci: math.NaN()}
	if st.n == 0 {
		return st
	}
	st.median = median(ratios)
	st.min, st.max = slices.Min(ratios), slices.Max(ratios)
	if st.n < 2 {
		return st
	}
	var sum, sq float64
	for _, v := range ratios {
		sum += math.Log(v)
	}
	mean := sum / float64(st.n)
	for _, v := range ratios {
		d := math.Log(v) - mean
		sq += d * d
	}
	sd := math.Sqrt(sq / float64(st.n-1))
	st.ci = math.Exp(tQuantile975(st.n-1)*sd/math.Sqrt(float64(st.n))) - 1
	return st
}

// within reports whether the ratio is known to within target (a fraction).
func (st ratioStat) within(target float64) bool {
	return st.n >= 2 && st.ci <= target
}

// String formats the spread as the lowest and highest ratio over the runs,
// "1.08–1.17 in 7 runs", each with at least two significant digits.
func (st ratioStat) String() string {
	switch {
	case st.n == 0:
		return "-"
	case st.n == 1:
		return "1 run"
	}
	return fmt.Sprintf("%s–%s in %d runs", fmtRatio(st.min), fmtRatio(st.max), st.n)
}

// fmtRatio formats a ratio with two decimals, or two significant digits
// when it is below 0.1 (0.0081, not 0.01).
func fmtRatio(f float64) string {
	if f > 0 && f < 0.1 {
		return strconv.FormatFloat(f, 'f', -int(math.Floor(math.Log10(f)))+1, 64)
	}
	return fmt.Sprintf("%.2f", f)
}

// tQuantile975 is the 0.975 quantile of Student's t distribution with df
// degrees of freedom: the factor of a two-sided 95% confidence interval.
func tQuantile975(df int) float64 {
	table := [...]float64{
		12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
	}
	switch {
	case df < 1:
		return math.Inf(1)
	case df <= len(table):
		return table[df-1]
	}
	return 1.96
}

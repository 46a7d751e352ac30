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

// soakTolerance is the growth of a series' median, as a share of its
// median after the warm-up, that the verdict accepts whatever the noise.
const soakTolerance = 0.10

// soakMinSamples is the fewest judged samples (after the warm-up, not
// empty) for which the rule can say anything: two per third.
const soakMinSamples = 6

// soakVerdictRule states the rule that judgeGrowth applies and
// soakResult.judge completes, for the output, before the run starts.
func soakVerdictRule(cfg soakConfig) string {
	return fmt.Sprintf("samples up to %s (warm-up) are not judged; the rest, in time order, are split in thirds. "+
		"A series grows if the median of the last third exceeds the median of the first third by more than "+
		"max(%.0f%% of the first third's median, the larger interquartile range of the two thirds, the series' resolution) "+
		"(resolution: 1 MiB heap live, 2 MiB heap in use, 2 for counts, 1 for table rows of reconcilers and expvar keys, "+
		"0.05 ms latency p50, 0.2 ms p99; latency of an interval with no sample is left out). "+
		"The soak passes if no judged series grows (heap live and in use, goroutines, objects in the table, retrying, "+
		"reconciler-retries rows, in flight, reconcilers rows, expvar keys, latency p50 and p99), each has at least %d judged samples, "+
		"and at the end, once every object is Done and every damaged entry repaired (within %s), the target equals the table "+
		"object by object (seq and dependency value), with nothing else in it.",
		cfg.warmupOrDefault(), 100*soakTolerance, soakMinSamples, cfg.settleBound())
}

// growthVerdict is the rule applied to one series.
type growthVerdict struct {
	n           int     // samples judged
	first, last float64 // medians of the first and the last third
	noise       float64 // the larger interquartile range of the two thirds
	allowed     float64 // the growth allowed: max(tol·|first|, noise, floor)
	grew        bool    // last − first > allowed
	tooFew      bool    // fewer than soakMinSamples samples: no judgement
}

// judgeGrowth applies the soak's rule to the values of one series after
// the warm-up, in time order: NaNs (intervals without a value) are left
// out; the median of the last third may exceed the median of the first
// third by at most max(tol·|median of the first third|, the larger
// interquartile range of the two thirds, floor). The interquartile range is
// the series' own noise: a flat noisy series stays within it, while a
// series growing steadily by D over the judged time has medians about
// 2D/3 apart and interquartile ranges of about D/6, so it fails unless D
// is within the tolerance or the floor. Shrinking is never a failure.
func judgeGrowth(values []float64, tol, floor float64) growthVerdict {
	vs := slices.DeleteFunc(slices.Clone(values), math.IsNaN)
	v := growthVerdict{n: len(vs), first: math.NaN(), last: math.NaN(), noise: math.NaN(), allowed: math.NaN()}
	if len(vs) < soakMinSamples {
		v.tooFew = true
		return v
	}
	k := len(vs) / 3
	a, c := slices.Clone(vs[:k]), slices.Clone(vs[len(vs)-k:])
	slices.Sort(a)
	slices.Sort(c)
	v.first, v.last = quantile(a, 0.5), quantile(c, 0.5)
	v.noise = max(quantile(a, 0.75)-quantile(a, 0.25), quantile(c, 0.75)-quantile(c, 0.25))
	v.allowed = max(tol*math.Abs(v.first), v.noise, floor)
	v.grew = v.last-v.first > v.allowed
	return v
}

// quantile returns the p-quantile of sorted values, interpolating linearly
// between the two nearest ranks, or NaN if there are none.
func quantile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	h := p * float64(len(sorted)-1)
	lo := int(math.Floor(h))
	if lo >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	return sorted[lo] + (h-float64(lo))*(sorted[lo+1]-sorted[lo])
}

// judged returns the values of series i after the warm-up.
func (r *soakResult) judged(i int) []float64 {
	var out []float64
	for _, s := range r.samples {
		if s.at > r.cfg.warmupOrDefault() {
			out = append(out, s.v[i])
		}
	}
	return out
}

// judge applies the rule and fills r.verdicts, r.pass and r.reasons.
func (r *soakResult) judge() {
	r.reasons = nil
	for i, d := range soakSeriesDefs {
		if !d.judged {
			continue
		}
		v := judgeGrowth(r.judged(i), soakTolerance, d.floor)
		r.verdicts[i] = v
		switch {
		case v.tooFew:
			r.reasons = append(r.reasons, fmt.Sprintf("%s: %d samples after the warm-up, need %d", d.name, v.n, soakMinSamples))
		case v.grew:
			r.reasons = append(r.reasons, fmt.Sprintf("%s grew from %s to %s (allowed +%s)", d.name, d.format(v.first), d.format(v.last), d.format(v.allowed)))
		}
	}
	if r.end.notSettled != "" {
		r.reasons = append(r.reasons, "did not settle within "+r.cfg.settleBound().String()+": "+r.end.notSettled)
	}
	if r.end.mismatches > 0 {
		r.reasons = append(r.reasons, fmt.Sprintf("target differs from the table at %d keys", r.end.mismatches))
	}
	r.pass = len(r.reasons) == 0
}

func (d soakSeriesDef) format(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	if d.unit == "" {
		return fmt.Sprintf("%.1f", v/d.scale)
	}
	return fmt.Sprintf("%.2f %s", v/d.scale, d.unit)
}

// printSoak prints the soak's judged series, its end state and its verdict.
func printSoak(w io.Writer, r *soakResult) {
	cfg := r.cfg
	judgedN := 0
	for _, s := range r.samples {
		if s.at > cfg.warmupOrDefault() {
			judgedN++
		}
	}
	fmt.Fprintf(w, "\n%d samples, %d after the %s warm-up; medians of the first and last third of those:\n\n", len(r.samples), judgedN, cfg.warmupOrDefault())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "series\tfirst third\tlast third\tgrowth\tallowed\tverdict")
	for i, d := range soakSeriesDefs {
		if !d.judged {
			continue
		}
		v := r.verdicts[i]
		verdict := "flat"
		switch {
		case v.tooFew:
			verdict = "too few samples"
		case v.grew:
			verdict = "GROWS"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", d.name, d.format(v.first), d.format(v.last), d.format(v.last-v.first), d.format(v.allowed), verdict)
	}
	for _, i := range []int{seriesWrites, seriesUpdates, seriesLatencyN, seriesExcluded} {
		vs := r.judged(i)
		slices.Sort(vs)
		fmt.Fprintf(tw, "%s\tmedian %s\t\t\t\t(not judged)\n", soakSeriesDefs[i].name, soakSeriesDefs[i].format(quantile(vs, 0.5)))
	}
	tw.Flush()
	st := r.stats
	fmt.Fprintf(w, "\nTotals: %d writes (%d dropped: writer behind by more than 100 ms), %d updates, %d deletes, %d failed attempts, %d terminal errors, %d prunes; refresh repaired %d entries, prune removed %d.\n",
		st.writes, st.drops, st.updates, st.deletes, st.failures, st.terms, st.prunes, st.refreshRepairs, st.pruneRepair)
	e := r.end
	fmt.Fprintf(w, "End: %d terminal versions written again; settled in %s", e.rewritten, e.took.Round(time.Millisecond))
	if e.notSettled != "" {
		fmt.Fprintf(w, " NOT (%s)", e.notSettled)
	}
	fmt.Fprintf(w, "; %d objects, target ", e.objects)
	if e.mismatches == 0 {
		fmt.Fprintln(w, "equals the table.")
	} else {
		fmt.Fprintf(w, "differs at %d keys: %s\n", e.mismatches, strings.Join(e.examples, "; "))
	}
	if r.pass {
		fmt.Fprintf(w, "soak verdict: PASS (%s, %d judged samples, no series grows, target equals table)\n", cfg.duration, judgedN)
	} else {
		fmt.Fprintf(w, "soak verdict: FAIL: %s\n", strings.Join(r.reasons, "; "))
	}
}

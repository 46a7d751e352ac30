package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// runCase is one measured configuration of a workload, run once per
// implementation and repeat.
type runCase struct {
	name     string // results key
	workload string // the -workloads entry that selects it
	impls    []impl // who runs it, before the -impls filter, in even runs' order
	// joins are implementations of another workload that run in this case,
	// after impls, when their workload is selected. The floor joins the
	// single-ops and the batch-ops cases with converge in the middle, so
	// that both of converge's ratios (against upstream and the floor) pair
	// runs made one right after the other. (The floor has no batch mode:
	// its batch-case run is the same loop, measured beside converge's
	// batch run.)
	joins []join
	fn    func(ctx context.Context, cfg config, im impl) (measurement, error)
}

// join adds im to a case when workload is selected.
type join struct {
	im       impl
	workload string
}

// selected returns who runs c in a run of workloads by impls, in even
// runs' order (odd runs reverse it), or nil if nobody does.
func (c runCase) selected(workloads []string, impls []impl) []impl {
	var out []impl
	if slices.Contains(workloads, c.workload) {
		out = slices.Clone(c.impls)
	}
	for _, j := range c.joins {
		if slices.Contains(workloads, j.workload) {
			out = append(out, j.im)
		}
	}
	return slices.DeleteFunc(out, func(im impl) bool {
		return im != implNone && !slices.Contains(impls, im)
	})
}

func cases(cfg config) []runCase {
	both := []impl{implConverge, implUpstream}
	all := []runCase{
		// The allocation baseline: the inserter alone.
		{"insert only", "incremental", []impl{implNone}, nil, func(ctx context.Context, c config, im impl) (measurement, error) {
			return incremental(ctx, c, im, false)
		}},
		{"incremental single", "incremental", []impl{implUpstream, implConverge}, []join{{implFloor, "floor"}}, func(ctx context.Context, c config, im impl) (measurement, error) {
			return incremental(ctx, c, im, false)
		}},
		{"incremental batch", "incremental", []impl{implUpstream, implConverge}, []join{{implFloor, "floor"}}, func(ctx context.Context, c config, im impl) (measurement, error) {
			return incremental(ctx, c, im, true)
		}},
		{"latency back-to-back", "latency", both, nil, func(ctx context.Context, c config, im impl) (measurement, error) {
			return latency(ctx, c, im, 0)
		}},
		{"latency idle", "latency", both, nil, func(ctx context.Context, c config, im impl) (measurement, error) {
			return latency(ctx, c, im, c.latencyGap)
		}},
		{"slow default", "slow", both, nil, func(ctx context.Context, c config, im impl) (measurement, error) {
			return slowTarget(ctx, c, im, 0)
		}},
		{"slow concurrent", "slow", []impl{implConverge}, nil, func(ctx context.Context, c config, im impl) (measurement, error) {
			return slowTarget(ctx, c, im, c.concurrency)
		}},
		{"retry single", "retry", both, nil, func(ctx context.Context, c config, im impl) (measurement, error) {
			return retryStorm(ctx, c, im, false)
		}},
		{"retry batch", "retry", both, nil, func(ctx context.Context, c config, im impl) (measurement, error) {
			return retryStorm(ctx, c, im, true)
		}},
		{"prune", "prune", both, nil, prune},
		{"refresh", "refresh", both, nil, refresh},
		{"fresh refresh", "fresh", both, nil, func(ctx context.Context, c config, im impl) (measurement, error) {
			return freshWrite(ctx, c, im, false)
		}},
		{"fresh retry", "fresh", both, nil, func(ctx context.Context, c config, im impl) (measurement, error) {
			return freshWrite(ctx, c, im, true)
		}},
		{"dependency trigger", "deps", []impl{implConverge}, nil, dependencyTrigger},
		{"restart done", "restart", both, nil, func(ctx context.Context, c config, im impl) (measurement, error) {
			return restart(ctx, c, im, false)
		}},
		{"restart pending", "restart", both, nil, func(ctx context.Context, c config, im impl) (measurement, error) {
			return restart(ctx, c, im, true)
		}},
		{"rest converged", "rest", []impl{implConverge, implUpstream, implFloor}, nil, func(ctx context.Context, c config, im impl) (measurement, error) {
			return atRest(ctx, c, im, "converged")
		}},
		{"rest deleted", "rest", []impl{implConverge, implUpstream, implFloor}, nil, func(ctx context.Context, c config, im impl) (measurement, error) {
			return atRest(ctx, c, im, "deleted")
		}},
		{"rest burst", "rest", both, nil, func(ctx context.Context, c config, im impl) (measurement, error) {
			return atRest(ctx, c, im, "burst")
		}},
	}
	all = append(all, overheadCases()...)
	all = append(all, multiCases(cfg)...)
	all = append(all, outageCases()...)
	return append(all, curveCases(cfg.curveSizes)...)
}

// gatedRatios are the ratios repeated until their spread is within target.
func gatedRatios(cfg config) []ratioDef {
	var out []ratioDef
	for _, s := range mainSources(cfg) {
		if s.def.gate {
			out = append(out, s.def)
		}
	}
	return append(out, overheadRatios()...)
}

// runAll runs every case of todo o.repeats times; then, as long as some
// gated ratio's confidence interval is wider than ±o.spread% and fewer
// than o.maxRepeats runs were made, it runs again the cases of the ratios
// still too wide (and only those: a ratio known well enough stops costing
// time). Within a run, the cases of a workload take turns going first, and
// the implementations alternate who goes first, so that a slow spell of
// the machine does not always fall on the same side. Progress goes to
// progress.
func runAll(ctx context.Context, o options, todo []runCase, progress io.Writer) (results, error) {
	res := results{}
	for rep := range o.maxRepeats {
		batch := todo
		if rep >= o.repeats {
			wide := res.wideRatios(gatedRatios(o.cfg), o.spread/100)
			if len(wide) == 0 {
				break
			}
			again := map[string]bool{}
			desc := make([]string, len(wide))
			for i, d := range wide {
				again[d.conv.c], again[d.ref.c] = true, true
				desc[i] = fmt.Sprintf("%s %s", d.label(), res.ratioStats(d))
			}
			fmt.Fprintf(progress, "[spread] wider than ±%.0f%%: %s; running them again\n", o.spread, strings.Join(desc, "; "))
			batch = slices.DeleteFunc(slices.Clone(todo), func(c runCase) bool { return !again[c.name] })
		}
		for _, c := range rotate(batch, rep) {
			if n := workloadRuns(o, c.workload); n > 0 && rep >= n {
				continue
			}
			order := slices.Clone(c.impls)
			if rep%2 == 1 {
				slices.Reverse(order)
			}
			for _, im := range order {
				if err := ctx.Err(); err != nil {
					return res, err
				}
				start := time.Now()
				m, err := c.fn(ctx, o.cfg, im)
				if err != nil {
					return res, fmt.Errorf("%s, %s: %w", c.name, im, err)
				}
				res.add(c.name, im, m)
				fmt.Fprintf(progress, "[%d] %-22s %-11s %s (%s)\n", rep+1, c.name, im, m, time.Since(start).Round(time.Millisecond))
			}
		}
	}
	return res, nil
}

// workloadRuns returns how many runs a workload gets if it is capped
// below -repeats, else 0: the outage workload runs twice unless -repeats
// is given.
func workloadRuns(o options, workload string) int {
	if workload == "outage" {
		return o.cfg.outage.repeats
	}
	return 0
}

// wideRatios returns the ratios of defs, measured at least once, whose
// confidence interval is wider than target. A case left out of later runs
// keeps its pairs: a ratio pairs the i-th values of its two cases, which
// were measured in the same run as long as both were run every time.
func (r results) wideRatios(defs []ratioDef, target float64) []ratioDef {
	var out []ratioDef
	for _, d := range defs {
		if st := r.ratioStats(d); st.n > 0 && !st.within(target) {
			out = append(out, d)
		}
	}
	return out
}

// rotate returns cases with the cases of each workload rotated by rep: in
// run rep, a different case of the workload goes first.
func rotate(cases []runCase, rep int) []runCase {
	out := make([]runCase, 0, len(cases))
	for i := 0; i < len(cases); {
		j := i
		for j < len(cases) && cases[j].workload == cases[i].workload {
			j++
		}
		group := slices.Clone(cases[i:j])
		k := rep % len(group)
		out = append(out, append(group[k:], group[:k]...)...)
		i = j
	}
	return out
}

// results holds every measured value: case, implementation, metric.
type results map[string]map[impl]map[string][]float64

func (r results) add(c string, im impl, m measurement) {
	if r[c] == nil {
		r[c] = map[impl]map[string][]float64{}
	}
	if r[c][im] == nil {
		r[c][im] = map[string][]float64{}
	}
	for k, v := range m.values {
		r[c][im][k] = append(r[c][im][k], v)
	}
}

// label names a ratio for progress lines, e.g. "incremental single
// converge/upstream" or "overhead single expvar / overhead single disabled".
func (d ratioDef) label() string {
	if d.conv.c == d.ref.c {
		return fmt.Sprintf("%s %s/%s", d.conv.c, d.conv.im, d.ref.im)
	}
	if d.conv.im == d.ref.im {
		return fmt.Sprintf("%s / %s", d.conv.c, d.ref.c)
	}
	return fmt.Sprintf("%s %s / %s %s", d.conv.c, d.conv.im, d.ref.c, d.ref.im)
}

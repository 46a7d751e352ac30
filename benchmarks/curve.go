package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The cost curve runs five workloads at every size of -curve-sizes, for
// both libraries, with single operations:
//
//	incremental  the incremental workload; throughput, bytes allocated and
//	             peak heap per object; the floor runs it too
//	backlog      the table filled with pending objects before the reconciler
//	             starts, as after a restart; time until all are Done
//	shared       two reconcilers sharing a status set on one table, objects
//	             inserted while they run; time until both have read every
//	             write
//	prune        one prune of the whole table
//	refresh      one refresh sweep of the whole table
//	retry        every object fails once, then succeeds: time until all
//	             are Done; the StateDB reconciler only up to
//	             upstreamRetryMax objects (at 1M it takes more than the
//	             5 minutes of -timeout)
var curveWorkloads = []string{"incremental", "backlog", "shared", "prune", "refresh", "retry"}

const upstreamRetryMax = 500_000

func curveCaseName(workload string, size int) string {
	return fmt.Sprintf("curve %s %s", workload, count(size))
}

func curveCases(sizes []int) []runCase {
	both := []impl{implConverge, implUpstream}
	var out []runCase
	for _, size := range sizes {
		sized := func(fn func(context.Context, config, impl) (measurement, error)) func(context.Context, config, impl) (measurement, error) {
			return func(ctx context.Context, c config, im impl) (measurement, error) {
				c.objects = size
				return fn(ctx, c, im)
			}
		}
		add := func(w string, fn func(context.Context, config, impl) (measurement, error)) {
			impls := both
			if w == "incremental" {
				impls = []impl{implConverge, implUpstream, implFloor}
			}
			out = append(out, runCase{name: curveCaseName(w, size), workload: "curve", impls: impls, fn: sized(fn)})
		}
		add("incremental", func(ctx context.Context, c config, im impl) (measurement, error) {
			c.sampleHeap = true
			return incremental(ctx, c, im, false)
		})
		add("backlog", backlog)
		add("shared", sharedStatus)
		add("prune", prune)
		add("refresh", refresh)
		add("retry", func(ctx context.Context, c config, im impl) (measurement, error) {
			c.retryObjects = c.objects
			return retryStorm(ctx, c, im, false)
		})
		if size > upstreamRetryMax {
			out[len(out)-1].impls = []impl{implConverge}
		}
	}
	return out
}

// backlog preloads cfg.objects pending objects before the reconciler
// starts, as a restart finds them, and measures from the end of the preload
// until the reconciler has reconciled every one.
func backlog(ctx context.Context, cfg config, im impl) (measurement, error) {
	m := newMeasurement()
	s := setup{impl: im, objects: cfg.objects, preload: cfg.objects, preloadAs: preloadPending, noPrune: true}
	err := runEnv(ctx, cfg, s, func(ctx context.Context, e *env) error {
		if err := e.waitCaughtUp(ctx); err != nil {
			return err
		}
		m.set("s", time.Since(e.ready).Seconds())
		return e.checkAllDone(cfg.objects, time.Time{})
	})
	return m, err
}

// nsPerObject returns the median cost of one object in a curve case, in
// nanoseconds, whatever the case measured (a rate or a duration).
func (r results) nsPerObject(workload string, size int, im impl) float64 {
	c := curveCaseName(workload, size)
	if v := r.median(c, im, "obj/s"); v > 0 {
		return 1e9 / v
	}
	return r.median(c, im, "s") * 1e9 / float64(size)
}

// parseSizes parses a comma-separated list of counts such as "10k,1M".
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		mult := 1
		switch {
		case strings.HasSuffix(f, "k"), strings.HasSuffix(f, "K"):
			mult, f = 1000, f[:len(f)-1]
		case strings.HasSuffix(f, "M"), strings.HasSuffix(f, "m"):
			mult, f = 1_000_000, f[:len(f)-1]
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad size %q", f)
		}
		out = append(out, n*mult)
	}
	return out, nil
}

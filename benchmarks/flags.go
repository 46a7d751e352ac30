package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

var allWorkloads = []string{"incremental", "floor", "latency", "slow", "retry", "prune", "refresh", "fresh", "deps", "restart", "rest", "overhead", "curve", "multi", "outage"}

// soakWorkload runs only when named: it takes -duration, not a few runs.
const soakWorkload = "soak"

// options are the parsed command line.
type options struct {
	cfg        config
	workloads  []string
	impls      []impl
	repeats    int     // minimum runs of every case
	maxRepeats int     // runs at most of the cases of gated ratios
	spread     float64 // target half-width of gated ratios' confidence intervals, in percent
	quick      bool
	soak       soakConfig
	plotDir    string // write SVG charts here if set
	cpuprofile string
	memprofile string
	trace      string
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("benchmarks", flag.ContinueOnError)
	fs.SetOutput(stderr)
	workloads := fs.String("workloads", strings.Join(allWorkloads, ","), "comma-separated workloads to run, or \"all\": "+strings.Join(allWorkloads, ", ")+"; and "+soakWorkload+" and "+priorityWorkload+", which run only when named")
	impls := fs.String("impls", "converge,upstream,floor", "comma-separated implementations to run (converge, upstream, floor); use one to profile it alone")
	fs.IntVar(&o.repeats, "repeats", 3, "runs of each workload at least; the tables show medians")
	fs.IntVar(&o.maxRepeats, "max-repeats", 30, "runs at most of the incremental, floor and overhead workloads, repeated until their throughput ratios are known within -spread")
	fs.Float64Var(&o.spread, "spread", 5, "target half-width, in percent, of the 95% confidence interval of each throughput ratio")
	curveSizes := fs.String("curve-sizes", "10k,100k,1M,4M", "table sizes of the cost curve workload (k and M suffixes)")
	fs.IntVar(&o.cfg.overheadObjects, "overhead-objects", 1_000_000, "objects in the metrics overhead workload")
	fs.IntVar(&o.cfg.freshQueued, "fresh-queued", 100_000, "refreshes or failing retries queued before the fresh write")
	fs.IntVar(&o.cfg.priorityObjects, "priority-objects", 500_000, "objects the priority workload inserts")
	fs.IntVar(&o.cfg.priorityLowEvery, "priority-low-every", 100, "one object in this many is of low priority in the priority workload")
	fs.BoolVar(&o.quick, "quick", false, "shrink every size and run once, for a smoke run (explicit size flags still win)")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to `file`")
	fs.StringVar(&o.memprofile, "memprofile", "", "write an allocation profile of the whole run to `file`")
	fs.StringVar(&o.trace, "trace", "", "write an execution trace of the whole run to `file` (go tool trace); keep sizes small")
	fs.IntVar(&o.cfg.objects, "objects", 1_000_000, "objects in the incremental, floor, prune and refresh workloads")
	fs.IntVar(&o.cfg.txnSize, "txn", 1000, "objects per insert write transaction")
	fs.IntVar(&o.cfg.latencySamples, "latency-samples", 1000, "latency samples per run")
	fs.DurationVar(&o.cfg.latencyGap, "latency-gap", 5*time.Millisecond, "pause before each sample of the idle latency rows")
	fs.IntVar(&o.cfg.slowObjects, "slow-objects", 2000, "objects in the slow target workload")
	fs.DurationVar(&o.cfg.slowDelay, "slow-delay", time.Millisecond, "duration of each Update in the slow target workload")
	fs.IntVar(&o.cfg.concurrency, "concurrency", 64, "converge workers in the slow target's second row")
	fs.IntVar(&o.cfg.retryObjects, "retry-objects", 100_000, "objects in the retry storm workload")
	fs.DurationVar(&o.cfg.retryMin, "retry-min", 10*time.Millisecond, "minimum retry backoff in the retry storm")
	fs.DurationVar(&o.cfg.retryMax, "retry-max", 100*time.Millisecond, "maximum retry backoff in the retry storm")
	fs.DurationVar(&o.cfg.timeout, "timeout", 5*time.Minute, "give up on a single run after this long")
	fs.DurationVar(&o.soak.duration, "duration", 30*time.Minute, "soak: how long the churn runs, warm-up included")
	fs.DurationVar(&o.soak.interval, "soak-interval", 10*time.Second, "soak: time between samples; pauses, prunes, drift, retry backoff and refresh are scaled to it")
	fs.DurationVar(&o.soak.warmup, "soak-warmup", 0, "soak: samples up to this time are not judged (default a fifth of -duration)")
	fs.Float64Var(&o.soak.rate, "soak-rate", 2000, "soak: object writes per second")
	fs.IntVar(&o.soak.keys, "soak-keys", 20_000, "soak: key space of the objects (about 4/5 of the keys are in the table)")
	fs.IntVar(&o.soak.workers, "soak-workers", 8, "soak: WithConcurrency")
	fs.DurationVar(&o.soak.delay, "soak-delay", 200*time.Microsecond, "soak: duration of each Update and Delete")
	fs.Uint64Var(&o.soak.seed, "soak-seed", 1, "soak: seed of the writes' random choices")
	fs.DurationVar(&o.soak.settle, "soak-settle", 0, "soak: bound on the final convergence (default 10 refresh intervals + 1m)")
	fs.StringVar(&o.plotDir, "plot", "", "write SVG charts of what ran (cost curve, incremental throughput per run, several reconcilers, restart, outage, soak series) into `dir`")
	finishMulti := multiFlags(fs, &o.cfg.multi)
	finishOutage := outageFlags(fs, &o.cfg.outage)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if err := finishMulti(o.quick); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		shrink := func(name string, p *int, v int) {
			if !set[name] {
				*p = v
			}
		}
		shrink("objects", &o.cfg.objects, 20_000)
		shrink("latency-samples", &o.cfg.latencySamples, 200)
		shrink("slow-objects", &o.cfg.slowObjects, 200)
		shrink("retry-objects", &o.cfg.retryObjects, 5_000)
		shrink("repeats", &o.repeats, 1)
		shrink("max-repeats", &o.maxRepeats, 1)
		shrink("overhead-objects", &o.cfg.overheadObjects, 20_000)
		shrink("fresh-queued", &o.cfg.freshQueued, 5_000)
		shrink("priority-objects", &o.cfg.priorityObjects, 20_000)
		shrink("soak-keys", &o.soak.keys, 2_000)
		if !set["duration"] {
			o.soak.duration = 3 * time.Second
		}
		if !set["soak-interval"] {
			o.soak.interval = 200 * time.Millisecond
		}
		if !set["soak-rate"] {
			o.soak.rate = 1000
		}
		if !set["curve-sizes"] {
			*curveSizes = "2k,20k"
		}
	}
	sizes, err := parseSizes(*curveSizes)
	if err != nil {
		return o, fmt.Errorf("-curve-sizes: %w", err)
	}
	o.cfg.curveSizes = sizes

	for _, w := range splitList(*workloads) {
		switch {
		case w == "all":
			o.workloads = append(o.workloads, allWorkloads...)
		case slices.Contains(allWorkloads, w), w == soakWorkload, w == priorityWorkload:
			o.workloads = append(o.workloads, w)
		default:
			return o, fmt.Errorf("unknown workload %q (want one of %s, %s, %s)", w, strings.Join(allWorkloads, ", "), soakWorkload, priorityWorkload)
		}
	}
	for _, name := range splitList(*impls) {
		i := slices.IndexFunc([]impl{implConverge, implUpstream, implFloor}, func(i impl) bool { return i.String() == name })
		if i < 0 {
			return o, fmt.Errorf("unknown implementation %q (want converge, upstream or floor)", name)
		}
		o.impls = append(o.impls, impl(i))
	}
	o.maxRepeats = max(o.maxRepeats, o.repeats)
	if err := finishOutage(o.quick, o.repeats); err != nil {
		return o, err
	}
	c := o.cfg
	switch {
	case len(o.workloads) == 0:
		return o, errors.New("no workload selected")
	case len(o.impls) == 0:
		return o, errors.New("no implementation selected")
	case o.repeats < 1:
		return o, fmt.Errorf("-repeats must be at least 1, got %d", o.repeats)
	case !(o.spread > 0):
		return o, fmt.Errorf("-spread must be positive, got %v", o.spread)
	case c.objects < 1 || c.txnSize < 1 || c.latencySamples < 1 || c.slowObjects < 1 || c.retryObjects < 1 ||
		c.overheadObjects < 1 || c.freshQueued < 1 || c.priorityObjects < 1 || c.priorityLowEvery < 1 || len(c.curveSizes) == 0:
		return o, errors.New("sizes must be positive")
	case c.concurrency < 1:
		return o, fmt.Errorf("-concurrency must be at least 1, got %d", c.concurrency)
	case c.retryMin <= 0 || c.retryMax < c.retryMin:
		return o, errors.New("-retry-min must be positive and at most -retry-max")
	case c.latencyGap < 0 || c.slowDelay < 0 || c.timeout <= 0:
		return o, errors.New("durations must not be negative, and -timeout must be positive")
	}
	if slices.Contains(o.workloads, soakWorkload) {
		s := o.soak
		switch {
		case s.interval <= 0 || s.duration < s.interval:
			return o, errors.New("-soak-interval must be positive and at most -duration")
		case s.interval < 50*time.Millisecond:
			return o, errors.New("-soak-interval must be at least 50ms (its pause is a fiftieth of it)")
		case !(s.rate >= 1) || s.keys < 1 || s.workers < 1:
			return o, errors.New("-soak-rate must be at least 1, -soak-keys and -soak-workers positive")
		case s.warmup < 0 || s.delay < 0 || s.settle < 0:
			return o, errors.New("-soak-warmup, -soak-delay and -soak-settle must not be negative")
		}
	}
	return o, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

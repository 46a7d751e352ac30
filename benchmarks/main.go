// Command benchmarks runs converge's reconciler and the upstream StateDB
// reconciler (github.com/cilium/statedb/reconciler) on the same workloads in
// one process, alternating them, and prints one table comparing them:
//
//	go run ./benchmarks                     # everything, medians of 3 runs
//	go run ./benchmarks -quick              # small sizes, one run: a smoke run
//	go run ./benchmarks -workloads incremental,latency -repeats 5
//	go run ./benchmarks -impls converge -workloads incremental -cpuprofile cpu.out
//
// Every run gets a fresh hive (statedb.Cell, job.Cell and a module with the
// table and the reconciler), and garbage is collected between runs. The
// figures are measurements, not assertions: nothing fails on time.
//
// Workloads (-workloads, comma separated, default all):
//
//	incremental  -objects pending objects inserted in write transactions of
//	             -txn while the reconciler runs, no-op operations; objects
//	             per second until the last is Done, and bytes and allocations
//	             per object (process-wide, minus an insert-only baseline), with
//	             single and with batch operations.
//	floor        the same inserter against a bare Changes() + CompareAndSwap
//	             loop that marks pending objects Done, 1000 per transaction:
//	             the least any StateDB reconciler must do.
//	latency      one object at a time, with default options, from commit to
//	             Done: p50 and p99, back to back (the next object is written
//	             as soon as the previous is Done) and idle (-latency-gap
//	             pause before each object).
//	slow         -slow-objects objects whose Update sleeps -slow-delay;
//	             converge with one worker and with -concurrency workers.
//	retry        -retry-objects objects whose first Update fails, with
//	             WithRetry(10ms, 100ms); time until all are Done.
//	prune        -objects Done objects; time from Reconciler.Prune() until
//	             Prune has iterated them all.
//	refresh      -objects objects Done an hour ago, refreshing every 10m with
//	             no rate limit; time until all were refreshed back to Done.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "benchmarks:", err)
		}
		os.Exit(2)
	}
}

var allWorkloads = []string{"incremental", "floor", "latency", "slow", "retry", "prune", "refresh"}

// options are the parsed command line.
type options struct {
	cfg        config
	workloads  []string
	impls      []impl
	repeats    int
	quick      bool
	cpuprofile string
	memprofile string
	trace      string
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("benchmarks", flag.ContinueOnError)
	fs.SetOutput(stderr)
	workloads := fs.String("workloads", strings.Join(allWorkloads, ","), "comma-separated workloads to run, or \"all\": "+strings.Join(allWorkloads, ", "))
	impls := fs.String("impls", "converge,upstream,floor", "comma-separated implementations to run (converge, upstream, floor); use one to profile it alone")
	fs.IntVar(&o.repeats, "repeats", 3, "runs of each workload; the table shows the median")
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
	if err := fs.Parse(args); err != nil {
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
	}

	for _, w := range splitList(*workloads) {
		switch {
		case w == "all":
			o.workloads = append(o.workloads, allWorkloads...)
		case slices.Contains(allWorkloads, w):
			o.workloads = append(o.workloads, w)
		default:
			return o, fmt.Errorf("unknown workload %q (want one of %s)", w, strings.Join(allWorkloads, ", "))
		}
	}
	for _, name := range splitList(*impls) {
		i := slices.IndexFunc([]impl{implConverge, implUpstream, implFloor}, func(i impl) bool { return i.String() == name })
		if i < 0 {
			return o, fmt.Errorf("unknown implementation %q (want converge, upstream or floor)", name)
		}
		o.impls = append(o.impls, impl(i))
	}
	c := o.cfg
	switch {
	case len(o.workloads) == 0:
		return o, errors.New("no workload selected")
	case len(o.impls) == 0:
		return o, errors.New("no implementation selected")
	case o.repeats < 1:
		return o, fmt.Errorf("-repeats must be at least 1, got %d", o.repeats)
	case c.objects < 1 || c.txnSize < 1 || c.latencySamples < 1 || c.slowObjects < 1 || c.retryObjects < 1:
		return o, errors.New("sizes must be positive")
	case c.concurrency < 1:
		return o, fmt.Errorf("-concurrency must be at least 1, got %d", c.concurrency)
	case c.retryMin <= 0 || c.retryMax < c.retryMin:
		return o, errors.New("-retry-min must be positive and at most -retry-max")
	case c.latencyGap < 0 || c.slowDelay < 0 || c.timeout <= 0:
		return o, errors.New("durations must not be negative, and -timeout must be positive")
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

// runCase is one measured configuration of a workload, run once per
// implementation and repeat.
type runCase struct {
	name     string // results key
	workload string // the -workloads entry that selects it
	impls    []impl // who runs it, before the -impls filter
	fn       func(ctx context.Context, cfg config, im impl) (measurement, error)
}

func cases() []runCase {
	both := []impl{implConverge, implUpstream}
	return []runCase{
		// The allocation baseline: the inserter alone.
		{"insert only", "incremental", []impl{implNone}, func(ctx context.Context, c config, im impl) (measurement, error) {
			return incremental(ctx, c, im, false)
		}},
		{"incremental single", "incremental", both, func(ctx context.Context, c config, im impl) (measurement, error) {
			return incremental(ctx, c, im, false)
		}},
		{"incremental batch", "incremental", both, func(ctx context.Context, c config, im impl) (measurement, error) {
			return incremental(ctx, c, im, true)
		}},
		{"floor", "floor", []impl{implFloor}, func(ctx context.Context, c config, im impl) (measurement, error) {
			return incremental(ctx, c, im, false)
		}},
		{"latency back-to-back", "latency", both, func(ctx context.Context, c config, im impl) (measurement, error) {
			return latency(ctx, c, im, 0)
		}},
		{"latency idle", "latency", both, func(ctx context.Context, c config, im impl) (measurement, error) {
			return latency(ctx, c, im, c.latencyGap)
		}},
		{"slow default", "slow", both, func(ctx context.Context, c config, im impl) (measurement, error) {
			return slowTarget(ctx, c, im, 0)
		}},
		{"slow concurrent", "slow", []impl{implConverge}, func(ctx context.Context, c config, im impl) (measurement, error) {
			return slowTarget(ctx, c, im, c.concurrency)
		}},
		{"retry single", "retry", both, func(ctx context.Context, c config, im impl) (measurement, error) {
			return retryStorm(ctx, c, im, false)
		}},
		{"retry batch", "retry", both, func(ctx context.Context, c config, im impl) (measurement, error) {
			return retryStorm(ctx, c, im, true)
		}},
		{"prune", "prune", both, prune},
		{"refresh", "refresh", both, refresh},
	}
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

// run parses args, runs the selected workloads and writes the table to
// stdout and progress to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if o.trace != "" {
		f, err := os.Create(o.trace)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			return err
		}
		defer trace.Stop()
	}

	var todo []runCase
	for _, c := range cases() {
		if !slices.Contains(o.workloads, c.workload) {
			continue
		}
		c.impls = slices.DeleteFunc(slices.Clone(c.impls), func(im impl) bool {
			return im != implNone && !slices.Contains(o.impls, im)
		})
		if len(c.impls) > 0 {
			todo = append(todo, c)
		}
	}

	info := runInfo{loadStart: loadAverage()}
	began := time.Now()
	res := results{}
	if slices.Contains(o.workloads, "incremental") || slices.Contains(o.workloads, "floor") {
		// The first run of a fresh process at full size is slower than the
		// rest (the heap grows from nothing, its pages fault in), and the
		// first reconciler to run would pay for it. An untimed floor run
		// takes that cost.
		start := time.Now()
		if _, err := incremental(ctx, o.cfg, implFloor, false); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		fmt.Fprintf(stderr, "[warm-up] untimed floor run (%s)\n", time.Since(start).Round(time.Millisecond))
	}
	for rep := range o.repeats {
		for _, c := range todo {
			order := slices.Clone(c.impls)
			if rep%2 == 1 {
				slices.Reverse(order) // alternate who goes first
			}
			for _, im := range order {
				if err := ctx.Err(); err != nil {
					return err
				}
				start := time.Now()
				m, err := c.fn(ctx, o.cfg, im)
				if err != nil {
					return fmt.Errorf("%s, %s: %w", c.name, im, err)
				}
				res.add(c.name, im, m)
				fmt.Fprintf(stderr, "[%d/%d] %-18s %-11s %s (%s)\n", rep+1, o.repeats, c.name, im, m, time.Since(start).Round(time.Millisecond))
			}
		}
	}
	settle()

	if o.memprofile != "" {
		f, err := os.Create(o.memprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			return err
		}
	}
	info.took, info.loadEnd = time.Since(began), loadAverage()
	printReport(stdout, o, res, info)
	return nil
}

func (m measurement) String() string {
	keys := make([]string, 0, len(m.values))
	for k := range m.values {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%.4g", k, m.values[k])
	}
	return strings.Join(parts, " ")
}

// runInfo describes the whole run for the report's header.
type runInfo struct {
	took               time.Duration
	loadStart, loadEnd string
}

// loadAverage returns the 1, 5 and 15 minute load averages, or "?". Other
// work on the machine shows up as noise in the figures.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

// machine describes where the figures come from.
func machine() string {
	return fmt.Sprintf("%s/%s, %d CPUs, GOMAXPROCS=%d, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
}

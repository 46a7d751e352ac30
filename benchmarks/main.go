// Command benchmarks runs converge's reconciler and the upstream StateDB
// reconciler (github.com/cilium/statedb/reconciler) on the same workloads in
// one process, alternating them, and prints one table comparing them:
//
//	go run ./benchmarks                     # everything, medians of 3 or more runs
//	go run ./benchmarks -quick              # small sizes, one run: a smoke run
//	go run ./benchmarks -workloads curve -curve-sizes 10k,1M
//	go run ./benchmarks -workloads incremental,latency -repeats 5
//	go run ./benchmarks -impls converge -workloads incremental -cpuprofile cpu.out
//
// Every run gets a fresh hive (statedb.Cell, job.Cell and a module with the
// table and the reconciler), and garbage is collected between runs. The
// figures are measurements, not assertions: nothing fails on time.
//
// Ratios are computed run by run and shown with their spread; the
// throughput ratios are repeated until their 95% confidence interval is
// within -spread or -max-repeats runs were made (runner.go, spread.go). The
// report warns when the machine was too busy to judge (busy.go).
//
// Workloads (-workloads, comma separated, default all):
//
//	incremental  -objects pending objects inserted in write transactions of
//	             -txn while the reconciler runs, no-op operations; objects
//	             per second until the last is Done, and bytes and allocations
//	             per object (process-wide, minus an insert-only baseline), with
//	             single and with batch operations.
//	floor        the same inserter against a bare loop that holds a write
//	             transaction while it reads Changes() and marks each pending
//	             object Done with CompareAndSwap as it reads it, committing
//	             every 1000: the least any StateDB reconciler must do. It runs in the
//	             same turn as the single-ops runs and again in that of the
//	             batch-ops runs, each time right after or before converge's,
//	             so that each ratio pairs adjacent runs.
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
//	fresh        one insert's time to Done while -fresh-queued refreshes or
//	             failing retries wait (fresh.go).
//	overhead     the incremental workload with -overhead-objects objects and
//	             converge's metrics disabled, expvar, Prometheus, tables.Cell
//	             (variant TablesCell), and Prometheus with it (overhead.go).
//	curve        the cost curve over -curve-sizes: incremental, restart
//	             backlog, two reconcilers sharing a status set, prune and
//	             refresh, for both libraries, and the floor's incremental
//	             run (curve.go).
//	multi        1, 2 and 4 (-multi-counts) named reconcilers sharing a
//	             status set on one table, each with its own target,
//	             -multi-objects objects: throughput until all are Done in
//	             all, bytes and CAS conflicts per object, and a check that
//	             nothing was lost; beside n floor loops, one floor loop that
//	             commits each object once for all n (multi.go).
//	outage       -outage-objects objects inserted Pending while the target
//	             fails every call for -outage-for, then recovers: calls to
//	             the target per second during the outage, time from the
//	             recovery until all are Done, for upstream and converge
//	             and converge with its circuit breaker, with single and
//	             batch ops; two runs unless -repeats is given (outage.go).
//	priority     run only when named: a stream of -priority-objects inserts
//	             that saturates converge, 1 in -priority-low-every (100) of
//	             low priority, with
//	             WithPriority on and off; the low and high objects' time
//	             to Done (priority.go).
//	soak         run only when named: one converge reconciler under a
//	             steady churn for -duration, sampled every -soak-interval,
//	             judged by a rule printed before it starts (soak.go,
//	             soak_verdict.go); the program exits with status 1 if the
//	             verdict is a failure.
//
// -plot DIR writes SVG charts of what ran: the cost curve, the incremental
// workload's throughput run by run, the multi, restart and outage
// workloads, the soak's series (plot.go, plot_workloads.go,
// outage_plot.go).
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
		if errors.Is(err, errSoakFailed) {
			os.Exit(1) // the verdict is printed
		}
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "benchmarks:", err)
		}
		os.Exit(2)
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
	for _, c := range cases(o.cfg) {
		c.impls, c.joins = c.selected(o.workloads, o.impls), nil
		if len(c.impls) > 0 {
			todo = append(todo, c)
		}
	}

	info := runInfo{start: readMachineState()}
	fmt.Fprintf(stderr, "[machine] load average %s, calibration loop %s\n", fmtLoad(info.start.load), info.start.calibrate.Round(100*time.Microsecond))
	if slices.ContainsFunc(o.workloads, func(w string) bool {
		return w == "incremental" || w == "floor" || w == "overhead" || w == "curve" || w == "multi"
	}) {
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
	res, err := runAll(ctx, o, todo, stderr)
	if err != nil {
		return err
	}
	if slices.Contains(o.workloads, priorityWorkload) {
		settle()
		if err := runPriority(ctx, o, stdout, stderr); err != nil {
			return fmt.Errorf("priority: %w", err)
		}
	}
	var soak *soakResult
	if slices.Contains(o.workloads, soakWorkload) {
		settle()
		if soak, err = runSoak(ctx, o.soak, stdout, stderr); err != nil {
			return fmt.Errorf("soak: %w", err)
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
	info.end = readMachineState()
	info.took = info.end.at.Sub(info.start.at)
	info.warnings = busyWarnings(info.start, info.end)
	for _, w := range info.warnings {
		fmt.Fprintf(stderr, "WARNING: machine busy, figures are noise: %s\n", w)
	}
	if len(todo) > 0 {
		printReport(stdout, o, res, info)
	} else if len(info.warnings) > 0 {
		fmt.Fprintf(stdout, "machine: %s\n", machine())
		for _, w := range info.warnings {
			fmt.Fprintf(stdout, "WARNING: machine busy during the run: %s\n", w)
		}
	}
	if o.plotDir != "" {
		files, err := writePlots(o, res, soak)
		if err != nil {
			return fmt.Errorf("-plot: %w", err)
		}
		for _, f := range files {
			fmt.Fprintf(stderr, "[plot] wrote %s\n", f)
		}
	}
	if soak != nil && !soak.pass {
		return errSoakFailed
	}
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
	took       time.Duration
	start, end machineState
	warnings   []string // reasons to distrust the figures
}

// machine describes where the figures come from.
func machine() string {
	return fmt.Sprintf("%s/%s, %d CPUs, GOMAXPROCS=%d, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
}

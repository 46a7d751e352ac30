package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"time"
)

// config holds the sizes of every workload.
type config struct {
	objects        int           // incremental, prune and refresh
	txnSize        int           // objects per insert transaction
	latencySamples int           // idle latency samples per run
	latencyGap     time.Duration // pause before each latency sample
	slowObjects    int           // slow target objects
	slowDelay      time.Duration // duration of each slow Update
	concurrency    int           // converge workers in the slow target's second row
	retryObjects   int           // retry storm objects
	retryMin       time.Duration
	retryMax       time.Duration
	timeout        time.Duration // bound on any single run

	overheadObjects  int   // objects in the metrics overhead workload
	curveSizes       []int // table sizes of the cost curve
	freshQueued      int   // refreshes or failing retries queued before the fresh write
	priorityObjects  int   // objects inserted by the priority workload
	priorityLowEvery int   // one in this many of them is of low priority
	sampleHeap       bool  // incremental also records the peak heap per object

	multi  multiConfig  // several reconcilers on one table (multi.go)
	outage outageConfig // a target down for everyone (outage.go)
}

// measurement is what one run yields; unused fields stay zero.
type measurement struct {
	values map[string]float64
}

func (m measurement) set(k string, v float64) { m.values[k] = v }

func newMeasurement() measurement { return measurement{values: map[string]float64{}} }

// settle collects garbage left by the previous run so it is not charged to
// the next one.
func settle() {
	runtime.GC()
	runtime.GC()
}

// runEnv starts a hive for s, hands it to body, and stops it.
func runEnv(ctx context.Context, cfg config, s setup, body func(ctx context.Context, e *env) error) error {
	settle()
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	e, err := start(ctx, s)
	if err != nil {
		return err
	}
	err = body(ctx, e)
	if stopErr := e.stop(); err == nil && stopErr != nil {
		err = fmt.Errorf("stopping %s hive: %w", s.impl, stopErr)
	}
	return err
}

// incremental inserts cfg.objects pending objects in transactions of
// cfg.txnSize while the reconciler runs, and measures until the last is
// Done: objects per second, and bytes and allocations per object over the
// whole process (the inserter included).
func incremental(ctx context.Context, cfg config, im impl, batch bool) (measurement, error) {
	return incrementalSetup(ctx, cfg, setup{impl: im, batch: batch})
}

// incrementalSetup is incremental with the run's hive described by s (its
// objects are set here). With cfg.sampleHeap it also records the peak growth
// of the heap per object ("heap/obj").
func incrementalSetup(ctx context.Context, cfg config, s setup) (measurement, error) {
	m := newMeasurement()
	s.objects = cfg.objects
	im := s.impl
	err := runEnv(ctx, cfg, s, func(ctx context.Context, e *env) error {
		settle()
		var heap *heapSampler
		if cfg.sampleHeap {
			heap = startHeapSampler()
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		t0 := time.Now()
		e.insert(0, cfg.objects, cfg.txnSize)
		if im != implNone {
			if err := e.waitDone(ctx, uint64(cfg.objects-1)); err != nil {
				return err
			}
		}
		d := time.Since(t0)
		runtime.ReadMemStats(&after)
		n := float64(cfg.objects)
		if heap != nil {
			m.set("heap/obj", heap.finish()/n)
		}
		m.set("obj/s", n/d.Seconds())
		m.set("B/obj", float64(after.TotalAlloc-before.TotalAlloc)/n)
		m.set("allocs/obj", float64(after.Mallocs-before.Mallocs)/n)
		if im == implNone {
			return nil
		}
		if err := e.checkAllDone(cfg.objects, time.Time{}); err != nil {
			return err
		}
		if im != implFloor && e.ops.updates.Load() != int64(cfg.objects) {
			return fmt.Errorf("%s: %d updates for %d objects", im, e.ops.updates.Load(), cfg.objects)
		}
		return nil
	})
	return m, err
}

// latency commits one pending object at a time, each after a pause of gap,
// into a reconciler with default options, and measures from the commit to
// Done. With no pause the reconciler has just finished the previous object;
// with a pause of a few milliseconds it is idle.
func latency(ctx context.Context, cfg config, im impl, gap time.Duration) (measurement, error) {
	m := newMeasurement()
	s := setup{impl: im, objects: cfg.latencySamples}
	err := runEnv(ctx, cfg, s, func(ctx context.Context, e *env) error {
		const warmup = 10
		lat := make([]time.Duration, 0, cfg.latencySamples)
		for i := range cfg.latencySamples + warmup {
			if gap > 0 {
				time.Sleep(gap)
			}
			wtxn := e.db.WriteTxn(e.tbl)
			e.tbl.Insert(wtxn, e.pending(uint64(i)))
			t0 := time.Now()
			wtxn.Commit()
			if err := e.waitDone(ctx, uint64(i)); err != nil {
				return err
			}
			if i >= warmup {
				lat = append(lat, time.Since(t0))
			}
		}
		slices.Sort(lat)
		m.set("p50", float64(percentile(lat, 0.50)))
		m.set("p99", float64(percentile(lat, 0.99)))
		return nil
	})
	return m, err
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// slowTarget inserts cfg.slowObjects pending objects whose Update sleeps
// cfg.slowDelay and measures objects per second until all are Done.
func slowTarget(ctx context.Context, cfg config, im impl, concurrency int) (measurement, error) {
	m := newMeasurement()
	s := setup{impl: im, concurrency: concurrency, statusIndex: true, objects: cfg.slowObjects, updateDelay: cfg.slowDelay}
	err := runEnv(ctx, cfg, s, func(ctx context.Context, e *env) error {
		t0 := time.Now()
		e.insert(0, cfg.slowObjects, cfg.txnSize)
		if err := e.waitAllDone(ctx); err != nil {
			return err
		}
		d := time.Since(t0)
		m.set("obj/s", float64(cfg.slowObjects)/d.Seconds())
		return e.checkAllDone(cfg.slowObjects, time.Time{})
	})
	return m, err
}

// retryStorm inserts cfg.retryObjects pending objects whose first Update
// fails, with WithRetry(cfg.retryMin, cfg.retryMax), and measures the time
// until every one is Done.
func retryStorm(ctx context.Context, cfg config, im impl, batch bool) (measurement, error) {
	m := newMeasurement()
	s := setup{
		impl: im, batch: batch, statusIndex: true, objects: cfg.retryObjects,
		failOnce: true, retryMin: cfg.retryMin, retryMax: cfg.retryMax,
	}
	err := runEnv(ctx, cfg, s, func(ctx context.Context, e *env) error {
		t0 := time.Now()
		e.insert(0, cfg.retryObjects, cfg.txnSize)
		if err := e.waitAllDone(ctx); err != nil {
			return err
		}
		m.set("s", time.Since(t0).Seconds())
		return e.checkAllDone(cfg.retryObjects, time.Time{})
	})
	return m, err
}

// prune preloads cfg.objects Done objects, waits until the reconciler has
// read them, then asks for a prune and measures until Prune has iterated
// every object.
func prune(ctx context.Context, cfg config, im impl) (measurement, error) {
	m := newMeasurement()
	s := setup{impl: im, objects: cfg.objects, preload: cfg.objects, noPrune: true}
	err := runEnv(ctx, cfg, s, func(ctx context.Context, e *env) error {
		if err := e.waitCaughtUp(ctx); err != nil {
			return err
		}
		t0 := time.Now()
		e.prune()
		select {
		case n := <-e.ops.pruned:
			m.set("s", time.Since(t0).Seconds())
			if n != cfg.objects {
				return fmt.Errorf("%s: Prune saw %d objects, want %d", im, n, cfg.objects)
			}
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for Prune: %w", im, ctx.Err())
		}
		return nil
	})
	return m, err
}

// refresh preloads cfg.objects objects whose Done status is an hour old,
// starts the reconciler with refreshing on (interval well below that age,
// no rate limit), and measures from the moment the jobs start until every
// object has been marked Refreshing, updated and written back Done. The
// staleness is made by back-dating the statuses, so the sweep covers the
// whole table at once instead of following the order of earlier writes.
func refresh(ctx context.Context, cfg config, im impl) (measurement, error) {
	m := newMeasurement()
	s := setup{
		impl: im, objects: cfg.objects, preload: cfg.objects,
		refresh: 10 * time.Minute, updateTarget: cfg.objects,
	}
	err := runEnv(ctx, cfg, s, func(ctx context.Context, e *env) error {
		select {
		case <-e.ops.reached:
		case <-ctx.Done():
			return fmt.Errorf("%s: %d of %d objects refreshed: %w", im, e.ops.updates.Load(), cfg.objects, ctx.Err())
		}
		// Every object has been marked and handed to Update; wait for
		// the last statuses to be committed. A status index would tell
		// too, but maintaining it on 2M status writes would dominate
		// the figure. The scan below checks the outcome.
		if err := e.waitCaughtUp(ctx); err != nil {
			return err
		}
		m.set("s", time.Since(e.ready).Seconds())
		return e.checkAllDone(cfg.objects, e.ready)
	})
	return m, err
}

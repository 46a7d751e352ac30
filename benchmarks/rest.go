package main

import (
	"context"
	"fmt"
	"math"
	"time"
)

// restart preloads cfg.objects objects Done (with pending, one in a
// hundred Pending: a restart that restores state with some work left)
// before the reconciler's jobs start, and measures from that start until
// the reconciler is idle, every change read and every object Done ("s"),
// and until its first prune has seen every object ("prune s"); also the
// peak growth of the heap per object from the start ("heap/obj") and the
// Update calls made ("updates"). converge fails the run if it calls Update
// for an object that was Done.
func restart(ctx context.Context, cfg config, im impl, pending bool) (measurement, error) {
	m := newMeasurement()
	s := setup{impl: im, objects: cfg.objects, preload: cfg.objects, preloadAs: preloadDone, heapAtReady: true, statusIndex: true}
	want := 0
	if pending {
		s.preloadAs, want = preloadSomePending, (cfg.objects+99)/100
	}
	err := runEnv(ctx, cfg, s, func(ctx context.Context, e *env) error {
		if err := e.waitCaughtUp(ctx); err != nil {
			return err
		}
		if err := e.waitAllDone(ctx); err != nil {
			return err
		}
		m.set("s", time.Since(e.ready).Seconds())
		select {
		case n := <-e.ops.pruned:
			m.set("prune s", time.Unix(0, e.ops.prunedAt.Load()).Sub(e.ready).Seconds())
			if n != cfg.objects {
				return fmt.Errorf("%s: the first Prune saw %d objects, want %d", im, n, cfg.objects)
			}
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for the first Prune: %w", im, ctx.Err())
		}
		m.set("heap/obj", e.heap.finish()/float64(cfg.objects))
		updates := e.ops.updates.Load()
		m.set("updates", float64(updates))
		if im == implConverge && updates != int64(want) {
			return fmt.Errorf("%s: %d Update calls, want %d (one per Pending object)", im, updates, want)
		}
		return e.checkAllDone(cfg.objects, time.Time{})
	})
	return m, err
}

// quietHeap returns the heap's objects once StateDB's graveyard, cleaned
// at most once a second, has let go of the deleted objects: after a
// collection, when two readings a second apart differ by less than 1%.
func quietHeap() uint64 {
	settle()
	prev := heapObjects()
	for range 10 {
		time.Sleep(time.Second)
		settle()
		h := heapObjects()
		if math.Abs(float64(h)-float64(prev)) < 0.01*float64(prev) {
			return h
		}
		prev = h
	}
	return prev
}

// atRest measures the heap a reconciler holds once it is idle ("held/obj",
// bytes per object, after a collection), against the heap just after the
// hive started with an empty table. The table's own objects are in it:
// the floor's figure, which holds nothing else, is what they cost. After
// is what the run does first: "converged", cfg.objects inserted Pending
// and reconciled; "deleted", the same then all deleted and reconciled;
// "burst", cfg.retryObjects whose first Update fails, all Done again.
func atRest(ctx context.Context, cfg config, im impl, after string) (measurement, error) {
	m := newMeasurement()
	n := cfg.objects
	s := setup{impl: im, objects: n, statusIndex: true, noPrune: true}
	if after == "burst" {
		n = cfg.retryObjects
		s.objects, s.failOnce, s.retryMin, s.retryMax = n, true, cfg.retryMin, cfg.retryMax
	}
	err := runEnv(ctx, cfg, s, func(ctx context.Context, e *env) error {
		settle()
		base := heapObjects()
		e.insert(0, n, cfg.txnSize)
		if err := e.waitAllDone(ctx); err != nil {
			return err
		}
		if after == "deleted" {
			e.deleteAll(n, cfg.txnSize)
		}
		if err := e.waitCaughtUp(ctx); err != nil {
			return err
		}
		m.set("held/obj", (float64(quietHeap())-float64(base))/float64(n))
		if after == "deleted" {
			if got := e.tbl.NumObjects(e.db.ReadTxn()); got != 0 {
				return fmt.Errorf("%s: %d objects left after deleting all", im, got)
			}
			return nil
		}
		return e.checkAllDone(n, time.Time{})
	})
	return m, err
}

package main

import (
	"context"
	"fmt"
	"time"
)

// freshWrite measures how long a user's write waits behind queued work:
// cfg.freshQueued objects are waiting to be reconciled again, then one new
// pending object is inserted and its time from commit to Done is the
// figure ("latency", in nanoseconds). "queued" is how many of the waiting
// objects had not been handed to an operation yet when it was inserted.
//
// With retries false the waiting objects are refreshes: they are in the
// table marked Refreshing when the reconciler starts (as a refresh sweep
// leaves them), and the fresh object is inserted as soon as the first of
// them is updated. With retries true they are objects whose every Update
// fails, with WithRetry(cfg.retryMin, cfg.retryMax): the fresh object is
// inserted once each has failed once, so all wait in the retry queue.
func freshWrite(ctx context.Context, cfg config, im impl, retries bool) (measurement, error) {
	m := newMeasurement()
	n := cfg.freshQueued
	s := setup{impl: im, objects: n + 1, noPrune: true}
	if retries {
		s.failBelow, s.retryMin, s.retryMax = n, cfg.retryMin, cfg.retryMax
	} else {
		s.preload, s.preloadAs, s.updateTarget = n, preloadRefreshing, 1
	}
	err := runEnv(ctx, cfg, s, func(ctx context.Context, e *env) error {
		if retries {
			e.insert(0, n, cfg.txnSize)
			if err := e.waitCaughtUp(ctx); err != nil {
				return err
			}
			if f := e.ops.failures.Load(); f < int64(n) {
				return fmt.Errorf("%s: %d failures before the fresh write, want at least %d", im, f, n)
			}
		} else {
			select {
			case <-e.ops.reached:
			case <-ctx.Done():
				return fmt.Errorf("%s: waiting for the first refresh: %w", im, ctx.Err())
			}
		}
		queued := int64(n) - e.ops.updates.Load()
		wtxn := e.db.WriteTxn(e.tbl)
		e.tbl.Insert(wtxn, e.pending(uint64(n)))
		t0 := time.Now()
		wtxn.Commit()
		if err := e.waitDone(ctx, uint64(n)); err != nil {
			return err
		}
		m.set("latency", float64(time.Since(t0)))
		m.set("queued", float64(max(0, queued)))
		return nil
	})
	return m, err
}

package reconciler_test

// Configure on a registered reconciler. (Workers shown, a new backoff,
// refreshing and pruning turned on at their new intervals, refusals,
// converging across the switches: testdata/configure.txtar; under chaos:
// chaos_configure_test.go; the breaker's probes:
// TestConfigureRetryBoundsTheBreakersProbes.)

import (
	"context"
	"fmt"
	"iter"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// workersShown waits until the reconcilers table says n workers.
func (f *fixture) workersShown(n int) {
	f.t.Helper()
	f.waitInfo(fmt.Sprintf("Workers=%d", n), func(i *tables.Info) bool { return i.Workers == n })
}

// Concurrency changed before the first start and while stopped applies at
// the start; on a running reconciler with work in flight and queued (1 ->
// 4 -> 1, 4 -> 2 -> 8) the new workers run as many at once, and back
// inline the loop runs those in flight to their end and the queued ones
// itself, one at a time. Nothing is lost or applied twice, the reconcilers
// table follows, and huge values saturate.
func TestConfigureConcurrency(t *testing.T) {
	o := newTarget()
	f := newFixture(t, o, &with{tables: true}, reconciler.WithConcurrency(3))
	configure := func(n int) { t.Helper(); require.NoError(t, f.rec.Configure(reconciler.WithConcurrency(n))) }
	inFlight := func(n int64) {
		t.Helper()
		o.waitStarts(t, fmt.Sprint(n, " in flight"), func() bool { return o.inflight.Load() == n })
	}
	configure(2) // before the first start
	f.start()
	f.workersShown(2)
	f.stop()
	configure(1)
	f.start()
	f.upsert(kititems("0", "warm")...)
	f.converged(o)
	f.workersShown(1)

	configure(4)
	let := o.holdAll()
	f.upsert(items("a", 8, "1")...)
	inFlight(4)
	f.workersShown(4)
	configure(1) // four in flight, four queued: back inline
	f.upsert(items("b", 3, "1")...)
	inFlight(5) // the loop runs the first queued one itself
	let()
	f.converged(o)
	f.workersShown(1)
	o.maxInflight.Store(o.inflight.Load())
	let = o.holdAll()
	f.upsert(items("c", 4, "1")...)
	inFlight(1)
	let()
	f.converged(o)
	assert.Equal(t, int64(1), o.maxInflight.Load(), "inline again: one operation at a time")

	configure(4)
	let = o.holdAll()
	f.upsert(items("d", 10, "1")...)
	inFlight(4)
	configure(2)
	f.workersShown(2)
	configure(8)
	f.upsert(items("e", 10, "1")...)
	f.workersShown(8)
	o.waitStarts(t, "8 new workers busy", func() bool { return o.inflight.Load() >= 8 })
	let()
	f.converged(o)
	assert.Empty(t, o.appliedTwice())

	huge := time.Duration(1 << 62)
	require.NoError(t, f.rec.Configure(reconciler.WithConcurrency(65536), reconciler.WithRetry(huge, huge),
		reconciler.WithRefreshing(huge, nil), reconciler.WithPruning(huge), reconciler.WithRoundLimits(1<<40, nil)))
	f.upsert(items("f", 20, "1")...)
	f.converged(o)
	configure(1)
	f.upsert(items("g", 1, "1")...)
	f.converged(o)
}

// A new round size bounds the batches of the next rounds; Configure while
// paused, growing the workers too, starts nothing until Resume.
func TestConfigureRoundSize(t *testing.T) {
	o := newTarget()
	f := startFixture(t, o, &with{batch: o, tables: true})
	for i, c := range []struct {
		opts []reconciler.Option
		want int64
	}{
		{[]reconciler.Option{reconciler.WithRoundLimits(3, nil)}, 3},
		{[]reconciler.Option{reconciler.WithRoundLimits(1000, rate.NewLimiter(rate.Inf, 1))}, 20},
		{[]reconciler.Option{reconciler.WithRoundLimits(2, nil), reconciler.WithConcurrency(4)}, 2},
	} {
		o.maxBatch.Store(0)
		f.rec.Pause()
		f.waitHealth(func(_ cell.Level, msg string) bool { return msg == "Paused" })
		calls := o.calls.Load()
		rev := f.upsert(items(fmt.Sprint("r", i), 20, "1")...)
		require.NoError(t, f.rec.Configure(c.opts...))
		_, _, err := f.rec.WaitUntilReconciled(ctxFor(t, 50*time.Millisecond), rev)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, calls, o.calls.Load(), "an operation while paused")
		f.rec.Resume()
		f.converged(o)
		assert.LessOrEqual(t, o.maxBatch.Load(), c.want, "batches of the new round size")
		if i < 2 {
			assert.Equal(t, c.want, o.maxBatch.Load(), "batches of the new round size")
		}
	}
}

// Configure refuses, with ErrInvalidConfig, the options Register refuses
// (saying what Register says, or that the option cannot be changed) and
// the options it does not take, naming them, and changes nothing, the
// valid options given with them included; it composes over the settings in
// force. A reconciler that cannot prune cannot have pruning turned on.
func TestConfigureRefused(t *testing.T) {
	o := newTarget()
	f := startFixture(t, o, &with{tables: true}, reconciler.WithConcurrency(2))
	configurable := []string{"WithConcurrency", "WithRoundLimits", "WithRefreshing", "WithPruning", "WithRetry", "WithRetryJitter"}
	for _, c := range refusedOptions(f.table) {
		err := f.rec.Configure(reconciler.WithConcurrency(5), c.opt)
		require.ErrorIs(t, err, reconciler.ErrInvalidConfig, c.name)
		rest := strings.TrimPrefix(err.Error(), "reconciler.Configure: option 1: ")
		if by, _, ok := strings.Cut(rest, " cannot be changed"); ok {
			assert.False(t, slices.Contains(configurable, by), "%s: %v", c.name, err)
		} else {
			assert.Contains(t, err.Error(), c.want, c.name)
		}
	}
	for name, opt := range map[string]reconciler.Option{
		"WithName":             reconciler.WithName("other"),
		"WithMetrics":          reconciler.WithMetrics(nil),
		"WithTracer":           reconciler.WithTracer(nil),
		"WithMaxAttempts":      reconciler.WithMaxAttempts(3),
		"WithCircuitBreaker":   reconciler.WithCircuitBreaker(3, time.Second, nil),
		"WithOperationTimeout": reconciler.WithOperationTimeout(time.Second),
		"WithoutPanicRecovery": reconciler.WithoutPanicRecovery(),
		"WithStartAfter":       reconciler.WithStartAfter(0),
		"WithSetup":            reconciler.WithSetup(func(context.Context, statedb.ReadTxn) error { return nil }),
		"WithDriftCheck":       reconciler.WithDriftCheck(newScriptDrift(o.Target).check),
	} {
		err := f.rec.Configure(reconciler.WithConcurrency(5), opt)
		require.ErrorIs(t, err, reconciler.ErrInvalidConfig, name)
		assert.Contains(t, err.Error(), name+" cannot be changed")
	}
	f.upsert(kititems("1", "a")...)
	f.converged(o)
	f.workersShown(2)
	f.waitHealth(func(_ cell.Level, msg string) bool { return msg == "Refreshing is off" }, "job-refresh")

	// Over the settings in force: a maximum below the new minimum is
	// refused, one above it accepted; valid edges: an unlimited limiter
	// without burst, 1ns retries.
	require.NoError(t, f.rec.Configure(reconciler.WithRetry(time.Second, 2*time.Second)))
	require.ErrorIs(t, f.rec.Configure(reconciler.WithRetry(time.Second, time.Millisecond)), reconciler.ErrInvalidConfig)
	require.NoError(t, f.rec.Configure(reconciler.WithRoundLimits(10, rate.NewLimiter(rate.Inf, 0)), reconciler.WithRetry(1, 1)))

	// A batch-only reconciler without a Prune method, as Register refuses.
	g := startFixture(t, nil, &with{batch: batchOnly{newTarget()}}, reconciler.WithPruning(0))
	require.ErrorIs(t, g.rec.Configure(reconciler.WithPruning(time.Minute)), reconciler.ErrInvalidConfig)
	require.NoError(t, g.rec.Configure(reconciler.WithPruning(0), reconciler.WithConcurrency(2)))
}

// Configure (with a prune guard's Prune and ConfirmPrune, and Pause and
// Resume) races running rounds from another goroutine, as fast as it can,
// while objects are written, deleted and failing and the hive stops and
// starts: nothing deadlocks, every object converges, and refreshing turned
// off at the end says so.
func TestConfigureRacesRoundsStopsAndStarts(t *testing.T) {
	forVariants(t, []variant{{1, false}, {1, true}}, func(t *testing.T, v variant) {
		o := newTarget()
		f := v.start(t, o, &with{tables: true}, reconciler.WithRetry(time.Millisecond, 5*time.Millisecond),
			reconciler.WithPruneGuard(5, 0, o.PlanPrune))
		var failed sync.Map // a "fail" value fails twice
		o.setFail(func(_ reconcilertest.Op, it *item) error {
			if it != nil && it.Value == "fail" {
				if n, _ := failed.LoadOrStore(it.ID, 0); n.(int) < 2 {
					failed.Store(it.ID, n.(int)+1)
					return errKitObject
				}
			}
			return nil
		})
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var once sync.Once
		halt := func() { once.Do(func() { close(stop) }); wg.Wait() }
		defer halt()
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(1, 2))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				opts := []reconciler.Option{
					reconciler.WithConcurrency(1 + rng.IntN(6)),
					reconciler.WithRoundLimits(1+rng.IntN(20), nil),
					reconciler.WithRetry(time.Millisecond, time.Duration(1+rng.IntN(5))*time.Millisecond),
					reconciler.WithRetryJitter(rng.Float64() / 2),
					reconciler.WithRefreshing(time.Duration(rng.IntN(3))*time.Millisecond, nil),
					reconciler.WithPruning(time.Duration(rng.IntN(3)) * time.Millisecond),
				}
				if err := f.rec.Configure(opts[:1+rng.IntN(len(opts))]...); err != nil {
					t.Error(err)
					return
				}
				f.rec.ConfirmPrune()
				f.rec.Prune()
				if i%3 == 0 {
					f.rec.Pause()
					f.rec.Resume()
				}
			}
		})
		for round := range 30 {
			objs := items("r", 20, fmt.Sprint(round))
			if round%3 == 0 {
				objs[round%20].Value = "fail"
			}
			f.upsert(objs...)
			if round%5 == 4 {
				f.remove(fmt.Sprintf("r-%05d", round%20))
			}
			if round%6 == 5 {
				f.stop()
				f.put("s", fmt.Sprint(round))
				f.start()
			}
		}
		f.reconciledTo(f.table.Revision(f.db.ReadTxn()))
		halt()
		require.NoError(t, f.rec.Configure(reconciler.WithRefreshing(0, nil), reconciler.WithPruning(0)))
		f.waitHealth(func(_ cell.Level, msg string) bool { return msg == "Refreshing is off" }, "job-refresh")
		f.converged(o)
		f.waitTable("no object Error", func(txn statedb.ReadTxn) bool { return f.countKind(txn, status.KindError) == 0 })
	})
}

// With priorities, a probe round reads fresh changes into the queue only
// while it holds fewer than four rounds' worth: round size 1 after
// Configure, four. Four objects failing as if the target were down, held
// by the open breaker, filled the queue for good: every probe took one of
// them and a change written since was never read (chaos: configure
// round=1, "the breaker's probes never got to it"; fixed in 62dae26).
func TestConfigureRoundOfOneProbesFreshChanges(t *testing.T) {
	down := []string{"a", "b", "c", "d"}
	o := newTarget().failIDs(down...)
	f := startFixture(t, o, &with{tables: true}, reconciler.WithRoundLimits(3, nil), reconciler.WithRetry(time.Millisecond, 2*time.Millisecond),
		reconciler.WithCircuitBreaker(1, time.Millisecond, nil), reconciler.WithPriority(func(*item) int { return 1 }, 1))
	require.NoError(t, f.rec.Configure(reconciler.WithRoundLimits(1, nil)))
	f.upsert(kititems("1", down...)...)
	o.waitStarts(t, "each object failing as if the target were down probed", func() bool {
		return !slices.ContainsFunc(down, func(k string) bool { return o.attempts(reconcilertest.OpUpdate, k) == 0 })
	})
	f.upsert(kititems("1", "fresh")...)
	o.waitUpdates(t, "fresh", 1) // a probe took the fresh change, and it succeeded
}

// The Reconciler's methods may be called from inside its callbacks: setup,
// a drift check, a prune plan and Update call Configure, Prune and
// ConfirmPrune (and Update Pause and Resume), and nothing deadlocks.
func TestControlFromInsideCallbacks(t *testing.T) {
	tg := newTarget()
	var rec atomic.Pointer[reconciler.Reconciler[*item]]
	var n atomic.Int32
	call := func(where string) {
		i, r := int(n.Add(1)), *rec.Load()
		if err := r.Configure(reconciler.WithConcurrency(1+i%3), reconciler.WithRetry(time.Millisecond, time.Duration(1+i%2)*time.Millisecond)); err != nil {
			t.Errorf("%s: %v", where, err)
		}
		r.Prune()
		r.ConfirmPrune()
	}
	setup := func(context.Context, statedb.ReadTxn) error { call("setup"); return nil }
	check := func(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, it *item) (bool, error) {
		call("check")
		return tg.has(it.ID, it.Value), nil
	}
	plan := func(context.Context, statedb.ReadTxn, iter.Seq2[*item, statedb.Revision]) (int, int, error) {
		call("plan")
		return 10, 10, nil
	}
	tg.setAfter(func(context.Context, *item) { call("update") })
	f := newFixture(t, tg, nil, reconciler.WithSetup(setup), reconciler.WithDriftCheck(check), reconciler.WithPruneGuard(5, 0, plan),
		reconciler.WithPruning(0), reconciler.WithRetry(time.Millisecond, 5*time.Millisecond))
	rec.Store(&f.rec)
	f.start()
	objs := items("k", 10, "1")
	f.upsert(objs...)
	f.caughtUp()
	f.refreshing(ids(objs)...)
	f.caughtUp()
	f.eventually("a prune confirmed from inside ran", func() bool { return tg.prunes.Load() >= 1 })
	tg.setAfter(func(context.Context, *item) { r := *rec.Load(); r.Pause(); r.Resume() })
	f.put("p", "1")
	f.waitKind("p", status.KindDone)
}

// A retry timed before a Configure of the backoff keeps its time; the
// failures from then on are timed with the new backoff. Lowered, the
// retry timed an hour out keeps its hour while new failures retry in
// milliseconds. Raised, whatever the jitter: the retry timer's jitter
// window was the new minimum times the jitter (six minutes for an hour and
// the default 0.1), which held the retry timed 300ms out for that long
// (found by an outside review; fixed in 79bd729).
func TestConfigureKeepsTheTimeOfARetryTimedBefore(t *testing.T) {
	for _, c := range []struct {
		name   string
		opts   []reconciler.Option
		jitter float64 // -1: lowered
	}{
		{"raised, default jitter", nil, 0.1},
		{"raised, jitter=0", []reconciler.Option{reconciler.WithRetryJitter(0)}, 0},
		{"raised, jitter=0.5", []reconciler.Option{reconciler.WithRetryJitter(0.5)}, 0.5},
		{"lowered", []reconciler.Option{reconciler.WithRetryJitter(0)}, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			before, after, jitter := 300*time.Millisecond, time.Hour, c.jitter
			if jitter < 0 {
				before, after = time.Hour, time.Millisecond
			}
			o := newTarget().failIDs("bad", "late")
			f := startFixture(t, o, &with{tables: true}, reconciler.WithRetry(before, before))
			f.put("bad", "1")
			f.waitRetryRow("bad", func(r *tables.RetryInfo) bool { return r.Attempts >= 1 && !r.NextAttempt.IsZero() })
			row, _ := f.retryRow("bad")
			require.NoError(t, f.rec.Configure(append(c.opts, reconciler.WithRetry(after, after))...))
			if after < before {
				f.put("late", "1")
				o.waitStarts(t, "late retried on the new backoff", func() bool { return o.attempts(reconcilertest.OpUpdate, "late") >= 4 })
				assert.Equal(t, row.Attempts, o.attempts(reconcilertest.OpUpdate, "bad"), "the retry timed before keeps its hour")
				return
			}
			deadline := time.After(3 * time.Second)
			for o.attempts(reconcilertest.OpUpdate, "bad") <= row.Attempts {
				select {
				case <-o.startedWatch():
				case <-deadline:
					t.Fatalf("the retry timed %v after attempt %d did not come within 3s of Configure", before, row.Attempts)
				}
			}
			var gap time.Duration
			f.waitRetryRow("bad", func(r *tables.RetryInfo) bool {
				if r.Attempts <= row.Attempts || r.NextAttempt.IsZero() || len(r.Errors) == 0 {
					return false
				}
				gap = r.NextAttempt.Sub(r.Errors[len(r.Errors)-1].At)
				return gap > time.Second // the first failure under the new backoff
			})
			lo := time.Duration(float64(time.Hour)*(1-jitter)) - time.Second
			hi := time.Duration(float64(time.Hour)*(1+jitter)) + time.Second
			assert.True(t, gap >= lo && gap <= hi, "next attempt %v after the failure, not within [%v, %v]", gap, lo, hi)
		})
	}
}

// A round limiter that fails, dropped by Configure, no longer fails: health
// and the reconcilers table recover, as they do when it is replaced or
// mended (found by an outside review: dropped, health stayed Degraded;
// fixed in 0a74b27).
func TestConfigureDroppingAFailingLimiterClearsHealth(t *testing.T) {
	for _, name := range []string{"dropped", "replaced", "mended"} {
		t.Run(name, func(t *testing.T) {
			lim := rate.NewLimiter(rate.Inf, 1)
			f := startFixture(t, newTarget(), &with{tables: true}, reconciler.WithPruning(0))
			require.NoError(t, f.rec.Configure(reconciler.WithRoundLimits(10, lim)))
			f.put("a", "1")
			f.waitKind("a", status.KindDone)
			lim.SetLimit(100)
			lim.SetBurst(0) // Wait fails from now on
			f.put("b", "1")
			f.waitKind("b", status.KindDone)
			f.waitHealth(func(level cell.Level, msg string) bool {
				return level == cell.StatusDegraded && strings.Contains(msg, "limiter")
			})
			switch name {
			case "dropped":
				require.NoError(t, f.rec.Configure(reconciler.WithRoundLimits(10, nil)))
			case "replaced":
				require.NoError(t, f.rec.Configure(reconciler.WithRoundLimits(10, rate.NewLimiter(rate.Inf, 1))))
			case "mended":
				lim.SetBurst(1)
			}
			f.put("c", "1")
			f.waitKind("c", status.KindDone)
			f.caughtUp()
			f.waitHealth(func(level cell.Level, _ string) bool { return level == cell.StatusOK })
			f.waitInfo("State=running", func(i *tables.Info) bool { return i.State == tables.StateRunning })
		})
	}
}

package reconciler_test

import (
	"context"
	"fmt"
	"iter"
	"math"
	"math/rand/v2"
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

// Concurrency goes 1 -> 4 -> 1 on a running reconciler: the new workers run
// four operations at once, the switch back runs the operations in flight to
// their end and the queued ones inline, nothing is lost or applied twice,
// and the reconcilers table follows.
func TestConfigureConcurrency(t *testing.T) {
	o := newTarget()
	f := startFixture(t, o, &with{tables: true}, reconciler.WithConcurrency(1))
	f.upsert(kititems("0", "warm")...)
	f.converged(o)
	f.workersShown(1)

	require.NoError(t, f.rec.Configure(reconciler.WithConcurrency(4)))
	let := o.holdAll()
	f.upsert(items("a", 8, "1")...)
	o.waitStarts(t, "4 updates in flight", func() bool { return o.inflight.Load() == 4 })
	f.workersShown(4)

	// Four in flight, four queued for the workers: back to inline.
	require.NoError(t, f.rec.Configure(reconciler.WithConcurrency(1)))
	f.upsert(items("b", 3, "1")...)
	// Inline, the loop runs the first queued one itself: it reports once
	// that returns.
	o.waitStarts(t, "the first queued one started inline", func() bool { return o.inflight.Load() == 5 })
	let()
	f.converged(o)
	f.workersShown(1)
	assert.Empty(t, o.appliedTwice())

	o.maxInflight.Store(o.inflight.Load())
	let = o.holdAll()
	f.upsert(items("c", 4, "1")...)
	o.waitStarts(t, "an update in flight", func() bool { return o.inflight.Load() == 1 })
	let()
	f.converged(o)
	assert.Equal(t, int64(1), o.maxInflight.Load(), "inline again: one operation at a time")
	assert.Empty(t, o.appliedTwice())
}

// A pool changing its number of workers (4 -> 2 -> 8) with work in flight
// and queued loses and repeats nothing.
func TestConfigureResizePool(t *testing.T) {
	o := newTarget()
	f := startFixture(t, o, &with{tables: true}, reconciler.WithConcurrency(4))
	let := o.holdAll()
	f.upsert(items("a", 10, "1")...)
	o.waitStarts(t, "4 in flight", func() bool { return o.inflight.Load() == 4 })
	require.NoError(t, f.rec.Configure(reconciler.WithConcurrency(2)))
	f.workersShown(2)
	require.NoError(t, f.rec.Configure(reconciler.WithConcurrency(8)))
	f.upsert(items("b", 10, "1")...)
	f.workersShown(8)
	o.waitStarts(t, "8 new workers busy", func() bool { return o.inflight.Load() >= 8 })
	let()
	f.converged(o)
	assert.Empty(t, o.appliedTwice())
}

// A new round size bounds the batches of the next rounds.
func TestConfigureRoundSize(t *testing.T) {
	o := newTarget()
	f := startFixture(t, o, &with{batch: o, tables: true})
	require.NoError(t, f.rec.Configure(reconciler.WithRoundLimits(3, nil)))
	f.rec.Pause()
	f.waitHealth(func(_ cell.Level, msg string) bool { return msg == "Paused" })
	f.upsert(items("a", 20, "1")...)
	f.rec.Resume()
	f.converged(o)
	assert.Equal(t, int64(3), o.maxBatch.Load(), "batches of the new round size")

	o.maxBatch.Store(0)
	require.NoError(t, f.rec.Configure(reconciler.WithRoundLimits(1000, rate.NewLimiter(rate.Inf, 1))))
	f.rec.Pause()
	f.waitHealth(func(_ cell.Level, msg string) bool { return msg == "Paused" })
	f.upsert(items("b", 20, "1")...)
	f.rec.Resume()
	f.converged(o)
	assert.Equal(t, int64(20), o.maxBatch.Load(), "one batch again")
}

// A new backoff applies to failures from then on; a retry already timed
// keeps its time.
func TestConfigureRetry(t *testing.T) {
	o := newTarget().failIDs("early", "late")
	f := startFixture(t, o, &with{tables: true}, reconciler.WithRetry(time.Hour, time.Hour))
	f.upsert(kititems("1", "early")...)
	o.waitStarts(t, "early failed", func() bool { return o.attempts(reconcilertest.OpUpdate, "early") == 1 })
	require.NoError(t, f.rec.Configure(reconciler.WithRetry(time.Millisecond, 2*time.Millisecond), reconciler.WithRetryJitter(0)))
	f.upsert(kititems("1", "late")...)
	o.waitStarts(t, "late retried on the new backoff", func() bool { return o.attempts(reconcilertest.OpUpdate, "late") >= 4 })
	assert.Equal(t, 1, o.attempts(reconcilertest.OpUpdate, "early"), "the retry timed before keeps its hour")
}

// Refreshing turned on while running marks Done objects again; turned off,
// the refresh job says so.
func TestConfigureRefresh(t *testing.T) {
	o := newTarget()
	f := startFixture(t, o, &with{tables: true})
	f.upsert(kititems("1", "a", "b")...)
	f.converged(o)
	f.waitHealth(func(_ cell.Level, msg string) bool { return msg == "Refreshing is off" }, "job-refresh")

	require.NoError(t, f.rec.Configure(reconciler.WithRefreshing(time.Millisecond, nil)))
	o.waitUpdates(t, "a", 3) // refreshed twice
	require.NoError(t, f.rec.Configure(reconciler.WithRefreshing(0, nil)))
	f.waitHealth(func(_ cell.Level, msg string) bool { return msg == "Refreshing is off" }, "job-refresh")
}

// Pruning turned on while running prunes every new interval.
func TestConfigurePruning(t *testing.T) {
	o := newTarget()
	f := startFixture(t, o, &with{tables: true}, reconciler.WithPruning(0))
	f.upsert(kititems("1", "a")...)
	f.converged(o)
	assert.Zero(t, o.prunes.Load())
	require.NoError(t, f.rec.Configure(reconciler.WithPruning(time.Millisecond)))
	o.waitStarts(t, "3 prunes", func() bool { return o.prunes.Load() >= 3 })
	require.NoError(t, f.rec.Configure(reconciler.WithPruning(time.Hour)))
}

// Settings changed while the hive is stopped, before its first start
// too, apply when it starts.
func TestConfigureStopped(t *testing.T) {
	o := newTarget()
	f := newFixture(t, o, &with{tables: true})
	require.NoError(t, f.rec.Configure(reconciler.WithConcurrency(2)), "before the first start")
	f.start()
	f.workersShown(2)
	f.stop()
	require.NoError(t, f.rec.Configure(reconciler.WithConcurrency(3)))
	f.start()
	f.upsert(kititems("1", "a")...)
	f.converged(o)
	f.workersShown(3)
}

// Options Configure does not take, and values Register would refuse, are
// refused with ErrInvalidConfig, naming the option, and change nothing, the
// valid options given with them included.
func TestConfigureRefused(t *testing.T) {
	o := newTarget()
	f := startFixture(t, o, &with{tables: true}, reconciler.WithConcurrency(2))
	refused := map[string]reconciler.Option{
		"WithName":             reconciler.WithName("other"),
		"WithMetrics":          reconciler.WithMetrics(nil),
		"WithTracer":           reconciler.WithTracer(nil),
		"WithMaxAttempts":      reconciler.WithMaxAttempts(3),
		"WithCircuitBreaker":   reconciler.WithCircuitBreaker(3, time.Second, nil),
		"WithOperationTimeout": reconciler.WithOperationTimeout(time.Second),
		"WithoutPanicRecovery": reconciler.WithoutPanicRecovery(),
		"WithStartAfter":       reconciler.WithStartAfter(0),
		"WithSetup":            reconciler.WithSetup(func(context.Context, statedb.ReadTxn) error { return nil }),
		"WithDriftCheck": reconciler.WithDriftCheck(func(context.Context, statedb.ReadTxn, statedb.Revision, *item) (bool, error) {
			return true, nil
		}),
		"nil Option": nil,
	}
	for name, opt := range refused {
		err := f.rec.Configure(reconciler.WithConcurrency(5), opt)
		require.ErrorIs(t, err, reconciler.ErrInvalidConfig, name)
		if opt != nil {
			assert.Contains(t, err.Error(), name+" cannot be changed")
		}
	}
	invalid := []reconciler.Option{
		reconciler.WithConcurrency(0),
		reconciler.WithConcurrency(1 << 17),
		reconciler.WithRoundLimits(0, nil),
		reconciler.WithRoundLimits(10, rate.NewLimiter(0, 1)),
		reconciler.WithRetry(2*time.Second, time.Second),
		reconciler.WithRetry(0, time.Second),
		reconciler.WithRetryJitter(1),
		reconciler.WithRetryJitter(-0.1),
		reconciler.WithRetryJitter(math.NaN()),
		reconciler.WithPruning(-1),
		reconciler.WithRefreshing(-1, nil),
		reconciler.WithRefreshing(time.Second, rate.NewLimiter(1, 0)),
	}
	for i, opt := range invalid {
		err := f.rec.Configure(reconciler.WithConcurrency(5), opt)
		require.ErrorIs(t, err, reconciler.ErrInvalidConfig, "invalid %d", i)
	}
	f.upsert(kititems("1", "a")...)
	f.converged(o)
	f.workersShown(2)
	f.waitHealth(func(_ cell.Level, msg string) bool { return msg == "Refreshing is off" }, "job-refresh")

	// Composed over the settings in force: a maximum below the new minimum
	// is refused, one above it accepted.
	require.NoError(t, f.rec.Configure(reconciler.WithRetry(time.Second, 2*time.Second)))
	require.ErrorIs(t, f.rec.Configure(reconciler.WithRetry(time.Second, time.Millisecond)), reconciler.ErrInvalidConfig)
	// Edges that are valid: an unlimited limiter without burst, 1ns retries.
	require.NoError(t, f.rec.Configure(reconciler.WithRoundLimits(10, rate.NewLimiter(rate.Inf, 0)), reconciler.WithRetry(1, 1)))
}

// A batch-only reconciler without a Prune method cannot have pruning
// turned on by Configure, as Register refuses it.
func TestConfigureNoPruner(t *testing.T) {
	f := startFixture(t, nil, &with{batch: batchOnly{newTarget()}}, reconciler.WithPruning(0))
	err := f.rec.Configure(reconciler.WithPruning(time.Minute))
	require.ErrorIs(t, err, reconciler.ErrInvalidConfig)
	require.NoError(t, f.rec.Configure(reconciler.WithPruning(0), reconciler.WithConcurrency(2)))
}

// Configure races running rounds: while objects are written, deleted and
// failing, settings change from another goroutine as fast as it can; every
// object converges, and no version is applied twice.
func TestConfigureRace(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprint("batch=", batch), func(t *testing.T) {
			o := newTarget()
			var w with
			if batch {
				w.batch = o
			}
			w.tables = true
			f := startFixture(t, o, &w, reconciler.WithRetry(time.Millisecond, 5*time.Millisecond))
			var failing sync.Map
			o.setFail(func(_ reconcilertest.Op, it *item) error {
				if it != nil {
					if n, _ := failing.LoadOrStore(it.ID+"="+it.Value, 0); n.(int) < 2 {
						failing.Store(it.ID+"="+it.Value, n.(int)+1)
						if it.Value == "fail" {
							return errKitObject
						}
					}
				}
				return nil
			})
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(1, 2))
				for ctx.Err() == nil {
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
				}
			}()
			for round := range 30 {
				objs := items("r", 20, fmt.Sprint(round))
				if round%3 == 0 {
					objs[round%20].Value = "fail"
				}
				f.upsert(objs...)
				if round%5 == 4 {
					f.remove(fmt.Sprintf("r-%05d", round%20))
				}
			}
			f.reconciledTo(f.table.Revision(f.db.ReadTxn()))
			cancel()
			wg.Wait()
			require.NoError(t, f.rec.Configure(reconciler.WithRefreshing(0, nil), reconciler.WithPruning(0)))
			f.converged(o)
			f.waitTable("no object Error", func(txn statedb.ReadTxn) bool { return f.countKind(txn, status.KindError) == 0 })
		})
	}
}

// With priorities, a probe round reads fresh changes into the queue only
// while it holds fewer than four rounds' worth: round size 1 after
// Configure, four. Four objects failing as if the target were down, held
// by the open breaker, then filled the queue for good: every probe took
// one of them, and a change written since was never read, however often
// the probes came (chaos: configure round=1, "the breaker's probes never
// got to it"). The turn of fresh changes reads one more.
func TestConfigureRoundOfOneProbesFreshChanges(t *testing.T) {
	down := []string{"a", "b", "c", "d"}
	o := newTarget().failIDs(down...)
	f := startFixture(t, o, &with{tables: true},
		reconciler.WithRoundLimits(3, nil),
		reconciler.WithRetry(time.Millisecond, 2*time.Millisecond),
		reconciler.WithCircuitBreaker(1, time.Millisecond, nil),
		reconciler.WithPriority(func(*item) int { return 1 }, 1))
	require.NoError(t, f.rec.Configure(reconciler.WithRoundLimits(1, nil)))
	f.upsert(kititems("1", down...)...)
	o.waitStarts(t, "each object failing as if the target were down probed", func() bool {
		for _, k := range down {
			if o.attempts(reconcilertest.OpUpdate, k) == 0 {
				return false
			}
		}
		return true
	})
	f.upsert(kititems("1", "fresh")...)
	o.waitUpdates(t, "fresh", 1) // a probe took the fresh change, and it succeeded
}

// Configure while paused, growing the workers: nothing starts until
// Resume, then everything converges.
func TestConfigureWhilePausedStartsNothing(t *testing.T) {
	tg := newTarget()
	f := startFixture(t, tg, nil, reconciler.WithPruning(0))
	f.rec.Pause()
	f.waitHealth(func(_ cell.Level, msg string) bool { return msg == "Paused" })
	rev := f.upsert(items("a", 10, "1")...)
	require.NoError(t, f.rec.Configure(reconciler.WithConcurrency(4), reconciler.WithRoundLimits(2, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, _, err := f.rec.WaitUntilReconciled(ctx, rev)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Zero(t, tg.calls.Load(), "an operation while paused")
	f.rec.Resume()
	f.converged(tg)
}

// Huge intervals, concurrency and round sizes saturate: the reconciler
// goes on converging, and back to one worker.
func TestConfigureSaturatesHugeValues(t *testing.T) {
	tg := newTarget()
	f := startFixture(t, tg, nil, reconciler.WithPruning(0))
	huge := time.Duration(1 << 62)
	require.NoError(t, f.rec.Configure(reconciler.WithConcurrency(65536), reconciler.WithRetry(huge, huge),
		reconciler.WithRefreshing(huge, nil), reconciler.WithPruning(huge), reconciler.WithRoundLimits(1<<40, nil)))
	f.upsert(items("a", 20, "1")...)
	f.converged(tg)
	require.NoError(t, f.rec.Configure(reconciler.WithConcurrency(1)))
	f.upsert(items("b", 1, "1")...)
	f.converged(tg)
}

// Configure, Pause and Resume, Prune and ConfirmPrune racing stops and
// starts of the hive: nothing deadlocks, and everything converges.
func TestConfigureRacesStopsAndStarts(t *testing.T) {
	tg := newTarget()
	f := startFixture(t, tg, nil, reconciler.WithPruning(0), reconciler.WithRetry(time.Millisecond, 5*time.Millisecond),
		reconciler.WithPruneGuard(5, 0, tg.PlanPrune))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := f.rec.Configure(reconciler.WithConcurrency(1+i%4), reconciler.WithPruning(time.Duration(i%2)*time.Millisecond)); err != nil {
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
	for round := range 5 {
		for i := range 20 {
			if i >= 5 || round == 0 {
				f.put(fmt.Sprint("k", i), fmt.Sprint(round))
			}
		}
		f.remove(fmt.Sprint("k", round))
		f.stop()
		f.put("s", fmt.Sprint(round))
		f.start()
	}
	close(stop)
	wg.Wait()
	f.rec.Resume()
	f.converged(tg)
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
	f.markRefreshing(ids(objs)...)
	f.eventually("a prune confirmed from inside ran", func() bool { return tg.prunes.Load() >= 1 })
	tg.setAfter(func(context.Context, *item) {
		r := *rec.Load()
		r.Pause()
		r.Resume()
	})
	f.put("p", "1")
	f.waitKind("p", status.KindDone)
}

// A retry timed before a Configure raising the backoff keeps its time,
// whatever the jitter: the retry timer's jitter window was the new minimum
// times the jitter (six minutes for an hour and the default 0.1), which
// held the retry timed 300ms out for that long. The failure of that retry
// is then timed with the new backoff (found by an outside review).
func TestConfigureRaisingTheBackoffKeepsTheTimeOfARetryTimedBefore(t *testing.T) {
	for _, c := range []struct {
		name   string
		opts   []reconciler.Option
		jitter float64
	}{
		{"default jitter", nil, 0.1},
		{"jitter=0", []reconciler.Option{reconciler.WithRetryJitter(0)}, 0},
		{"jitter=0.5", []reconciler.Option{reconciler.WithRetryJitter(0.5)}, 0.5},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := newTarget().failIDs("bad")
			const before = 300 * time.Millisecond
			f := startFixture(t, o, &with{tables: true}, reconciler.WithRetry(before, before))
			f.put("bad", "1")
			f.waitRetryRow("bad", func(r *tables.RetryInfo) bool { return r.Attempts >= 1 && !r.NextAttempt.IsZero() })
			row, _ := f.retryRow("bad")
			require.NoError(t, f.rec.Configure(append([]reconciler.Option{reconciler.WithRetry(time.Hour, time.Hour)}, c.opts...)...))
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
			lo := time.Duration(float64(time.Hour)*(1-c.jitter)) - time.Second
			hi := time.Duration(float64(time.Hour)*(1+c.jitter)) + time.Second
			assert.True(t, gap >= lo && gap <= hi, "next attempt %v after the failure, not within [%v, %v]", gap, lo, hi)
		})
	}
}

// A round limiter that fails, dropped by Configure, no longer fails: health
// and the reconcilers table recover, as they do when it is replaced or
// mended (found by an outside review: dropped, health stayed Degraded).
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

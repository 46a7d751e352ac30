package reconciler_test

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/converge-go/converge/compat/reconciler"
)

// These tests run in testing/synctest bubbles: time.Sleep advances the
// bubble's fake clock, and synctest.Wait returns once every goroutine of
// the bubble is blocked, that is once the reconciler has done all it can
// do at that instant. Times read inside a bubble are exact.

// A reconciler registered with no options refreshes Done objects every 30
// minutes, marking at most 100 per second, as the StateDB reconciler does:
// an agent that relies on it to repair drift keeps repairing it.
func TestDefaultRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, newRecorder())
		written := time.Now()
		f.insert(t, "a", "b", "c")
		time.Sleep(time.Second) // advance the fake clock past the round limiter
		synctest.Wait()
		require.Equal(t, map[string]reconciler.StatusKind{"a": reconciler.StatusKindDone, "b": reconciler.StatusKindDone, "c": reconciler.StatusKindDone}, f.kinds())

		time.Sleep(30*time.Minute - 2*time.Second) // advance the fake clock
		synctest.Wait()
		assert.Len(t, f.tgt.of("update", ""), 3, "nothing is refreshed before 30 minutes")

		time.Sleep(2 * time.Second)
		synctest.Wait()
		var marks []time.Time
		for _, id := range []string{"a", "b", "c"} {
			ups := f.tgt.of("update", id)
			require.Len(t, ups, 2, "%s is refreshed once", id)
			assert.Equal(t, reconciler.StatusKindRefreshing, ups[1].kind, "%s is handed a Refreshing status", id)
			assert.GreaterOrEqual(t, ups[1].at.Sub(written), 30*time.Minute, "%s is refreshed after 30 minutes", id)
			marks = append(marks, ups[1].at)
		}
		slices.SortFunc(marks, time.Time.Compare)
		for i := 1; i < len(marks); i++ {
			assert.GreaterOrEqual(t, marks[i].Sub(marks[i-1]), 10*time.Millisecond,
				"refreshes are at most 100 per second: %v", marks)
		}
		assert.Equal(t, map[string]reconciler.StatusKind{"a": reconciler.StatusKindDone, "b": reconciler.StatusKindDone, "c": reconciler.StatusKindDone}, f.kinds())
	})
}

// An option given to Register overrides the default: WithRefreshing with
// a zero interval turns refreshing off.
func TestRefreshCanBeTurnedOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, newRecorder(), reconciler.WithRefreshing(0, nil))
		f.insert(t, "a")
		time.Sleep(2 * time.Hour) // advance the fake clock
		synctest.Wait()
		assert.Len(t, f.tgt.of("update", "a"), 1, "no refresh")
	})
}

// roundSlack is how long a change may wait for rounds with the default
// round limiter, which lets one round start per millisecond: a few
// milliseconds. A failure's backoff starts when the round after the
// failure runs, so it may end up a millisecond later; the first prune
// waits for the first rounds.
const roundSlack = 5 * time.Millisecond

// assertGaps checks that the times between successive calls are those of
// want, each late by roundSlack at most.
func assertGaps(t *testing.T, want []time.Duration, calls []call) {
	t.Helper()
	var gaps []time.Duration
	for i := 1; i < len(calls); i++ {
		gaps = append(gaps, calls[i].at.Sub(calls[i-1].at))
	}
	require.GreaterOrEqual(t, len(gaps), len(want), "gaps: %v", gaps)
	for i, w := range want {
		if gaps[i] < w || gaps[i] > w+roundSlack {
			t.Errorf("gap %d is %v, want %v (late by %v at most); gaps: %v", i, gaps[i], w, roundSlack, gaps)
		}
	}
}

// A failing object is retried after 100ms, then after twice as long each
// time up to a minute, with no jitter, as by the StateDB reconciler (whose
// retries converge's own Register spreads by ±10%).
func TestDefaultRetryBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, newRecorder("a"))
		f.insert(t, "a")
		time.Sleep(5 * time.Minute) // advance the fake clock
		synctest.Wait()

		var want []time.Duration
		for d := 100 * time.Millisecond; len(want) < 12; d = min(2*d, time.Minute) {
			want = append(want, d)
		}
		assertGaps(t, want, f.tgt.of("update", "a"))
		assert.Equal(t, reconciler.StatusKindError, f.kinds()["a"])
	})
}

// WithRetry overrides the default backoff.
func TestRetryOverridden(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, newRecorder("a"), reconciler.WithRetry(time.Second, 2*time.Second))
		f.insert(t, "a")
		time.Sleep(10 * time.Second) // advance the fake clock
		synctest.Wait()
		assertGaps(t, []time.Duration{time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second}, f.tgt.of("update", "a"))
	})
}

// Rounds start at most 1000 times a second by default: a change written
// just after a round waits a millisecond for the next. With the limiter
// removed it is taken at once.
func TestDefaultRoundRate(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []reconciler.Option
		wait time.Duration
	}{
		{"default", nil, time.Millisecond},
		{"unlimited", []reconciler.Option{reconciler.WithRoundLimits(1000, nil)}, 0},
		{"overridden", []reconciler.Option{reconciler.WithRoundLimits(1000, rate.NewLimiter(10, 1))}, 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := start(t, newRecorder(), tc.opts...)
				f.insert(t, "a")
				synctest.Wait()
				f.insert(t, "b")
				written := time.Now()
				time.Sleep(time.Second) // advance the fake clock
				synctest.Wait()
				ups := f.tgt.of("update", "b")
				require.Len(t, ups, 1)
				assert.Equal(t, tc.wait, ups[0].at.Sub(written))
			})
		})
	}
}

// The target is pruned once the table is initialized (here at once: it
// has no initializers), then every hour from the start.
func TestDefaultPruneInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		started := time.Now()
		f := start(t, newRecorder())
		time.Sleep(2*time.Hour + time.Second) // advance the fake clock
		synctest.Wait()
		prunes := f.tgt.of("prune", "")
		require.Len(t, prunes, 3)
		for i, want := range []time.Duration{0, time.Hour, 2 * time.Hour} {
			at := prunes[i].at.Sub(started)
			assert.True(t, at >= want && at <= want+roundSlack, "prune %d at %v, want %v", i, at, want)
		}
	})
}

package reconciler

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBackoffDoublesUpToTheMaximum(t *testing.T) {
	const lo, hi = 10 * time.Millisecond, 100 * time.Millisecond
	want := []time.Duration{10, 20, 40, 80, 100, 100}
	for i, w := range want {
		assert.Equal(t, w*time.Millisecond, backoff(i+1, lo, hi, 0, 0.5), "attempt %d", i+1)
	}
	assert.Equal(t, hi, backoff(1000, lo, hi, 0, 0.5), "huge attempt counts do not overflow")
	assert.Equal(t, lo, backoff(0, lo, hi, 0, 0.5), "attempt 0 counts as the first")
}

func TestBackoffJitterStaysInBounds(t *testing.T) {
	const lo, hi, jitter = 10 * time.Millisecond, 100 * time.Millisecond, 0.25
	for attempt := 1; attempt <= 8; attempt++ {
		base := backoff(attempt, lo, hi, 0, 0)
		for _, u := range []float64{0, 0.1, 0.5, 0.9, 0.999999} {
			d := backoff(attempt, lo, hi, jitter, u)
			require.GreaterOrEqual(t, d, time.Duration(float64(base)*(1-jitter)), "attempt %d u %v", attempt, u)
			require.Less(t, d, time.Duration(float64(base)*(1+jitter))+1, "attempt %d u %v", attempt, u)
			require.GreaterOrEqual(t, d, time.Duration(float64(lo)*(1-jitter)))
			require.LessOrEqual(t, d, time.Duration(float64(hi)*(1+jitter)))
		}
		assert.NotEqual(t, backoff(attempt, lo, hi, jitter, 0.1), backoff(attempt, lo, hi, jitter, 0.9),
			"jitter spreads retries")
	}
}

func TestRetryQueueOrdersReplacesAndRemoves(t *testing.T) {
	q := newRetryQueue[string]()
	t0 := time.Unix(1000, 0)
	q.add(&retry[string]{key: "a", rev: 5, at: t0.Add(3 * time.Second)})
	q.add(&retry[string]{key: "b", rev: 3, at: t0.Add(1 * time.Second)})
	q.add(&retry[string]{key: "c", rev: 9, at: t0.Add(2 * time.Second)})
	require.Equal(t, 3, q.len())
	assert.Equal(t, uint64(3), q.lowWatermark())

	next, ok := q.next()
	require.True(t, ok)
	assert.Equal(t, t0.Add(time.Second), next)

	// Replacing a key moves it.
	q.add(&retry[string]{key: "b", rev: 7, at: t0.Add(5 * time.Second)})
	assert.Equal(t, 3, q.len())
	assert.Equal(t, uint64(5), q.lowWatermark())

	_, ok = q.popDue(t0)
	assert.False(t, ok, "nothing due yet")
	item, ok := q.popDue(t0.Add(2 * time.Second))
	require.True(t, ok)
	assert.Equal(t, "c", item.key)

	q.removeKeyBytes([]byte("a"))
	q.removeKey("missing")
	assert.Equal(t, 1, q.len())
	assert.Equal(t, uint64(7), q.lowWatermark())
	item, ok = q.popDue(t0.Add(time.Hour))
	require.True(t, ok)
	assert.Equal(t, "b", item.key)
	assert.Equal(t, uint64(0), q.lowWatermark())
	_, ok = q.next()
	assert.False(t, ok)
}

func TestRetryQueueMatchesASortedModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	q := newRetryQueue[int]()
	model := map[string]time.Time{} // key -> at
	t0 := time.Unix(0, 0)
	for step := range 20000 {
		key := fmt.Sprintf("k%d", rng.IntN(500))
		switch rng.IntN(4) {
		case 0, 1:
			at := t0.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
			q.add(&retry[int]{key: key, at: at, rev: uint64(step)})
			model[key] = at
		case 2:
			q.removeKey(key)
			delete(model, key)
		case 3:
			now := t0.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
			var prev time.Time
			for {
				item, ok := q.popDue(now)
				if !ok {
					break
				}
				require.False(t, item.at.After(now))
				require.False(t, item.at.Before(prev), "popped out of order")
				prev = item.at
				require.Equal(t, model[item.key], item.at)
				delete(model, item.key)
			}
			for _, at := range model {
				require.True(t, at.After(now), "an entry due at %v was left behind at %v", at, now)
			}
		}
		require.Equal(t, len(model), q.len())
		for i, e := range q.heap {
			require.Equal(t, i, e.item.pos)
		}
	}
}

package backoff

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBackoffDoublesUpToTheMaximum(t *testing.T) {
	const lo, hi = 10 * time.Millisecond, 100 * time.Millisecond
	want := []time.Duration{10, 20, 40, 80, 100, 100}
	for i, w := range want {
		assert.Equal(t, w*time.Millisecond, Wait(i+1, lo, hi, 0, 0.5), "attempt %d", i+1)
	}
	assert.Equal(t, hi, Wait(1000, lo, hi, 0, 0.5), "huge attempt counts do not overflow")
	assert.Equal(t, lo, Wait(0, lo, hi, 0, 0.5), "attempt 0 counts as the first")
}

func TestBackoffJitterStaysInBounds(t *testing.T) {
	const lo, hi, jitter = 10 * time.Millisecond, 100 * time.Millisecond, 0.25
	for attempt := 1; attempt <= 8; attempt++ {
		base := Wait(attempt, lo, hi, 0, 0)
		for _, u := range []float64{0, 0.1, 0.5, 0.9, 0.999999} {
			d := Wait(attempt, lo, hi, jitter, u)
			require.GreaterOrEqual(t, d, time.Duration(float64(base)*(1-jitter)), "attempt %d u %v", attempt, u)
			require.Less(t, d, time.Duration(float64(base)*(1+jitter))+1, "attempt %d u %v", attempt, u)
			require.GreaterOrEqual(t, d, time.Duration(float64(lo)*(1-jitter)))
			require.LessOrEqual(t, d, time.Duration(float64(hi)*(1+jitter)))
		}
		assert.NotEqual(t, Wait(attempt, lo, hi, jitter, 0.1), Wait(attempt, lo, hi, jitter, 0.9),
			"jitter spreads retries")
	}
}

func TestBackoffAndDueTimesSaturate(t *testing.T) {
	// Bug 9 of the outside review: maxima near MaxInt64 overflowed the
	// jitter, and a due time past 2262 wrapped into the past.
	huge := time.Duration(math.MaxInt64)
	for _, u := range []float64{0, 0.5, 0.999999} {
		d := Wait(70, time.Millisecond, huge, 0.9, u)
		assert.GreaterOrEqual(t, d, time.Duration(0), "u=%v", u)
	}
	assert.Equal(t, huge, Wait(200, huge, huge, 0.9, 0.999999), "saturates at MaxInt64")
	now := time.Now().UnixNano()
	assert.Equal(t, int64(math.MaxInt64), Add(now, huge), "a retry centuries away stays in the future")
	assert.Equal(t, now+5, Add(now, 5))
	assert.Equal(t, time.Duration(0), Duration(math.NaN()))
	assert.Equal(t, huge, Duration(math.Inf(1)))
}

func BenchmarkBackoff(b *testing.B) {
	u := 0.0
	var sink time.Duration
	for b.Loop() {
		attempts := int(u*16) + 1
		sink += Wait(attempts, 10*time.Millisecond, 100*time.Millisecond, 0.1, u)
		u += 0.0001
		if u >= 1 {
			u = 0
		}
	}
	_ = sink
}

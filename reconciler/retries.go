package reconciler

import (
	"math"
	"time"
)

// backoff returns the wait before the next attempt after the given number
// of failures (at least 1): minimum doubled per further failure, capped at
// maximum, then spread by ±jitter. u is a uniform random number in [0, 1).
// It saturates: whatever the options, the result is in [0, MaxInt64].
func backoff(attempts int, minimum, maximum time.Duration, jitter, u float64) time.Duration {
	d := float64(minimum) * math.Pow(2, float64(max(attempts, 1)-1))
	d = min(d, float64(maximum))
	d *= 1 + jitter*(2*u-1)
	return durationOf(d)
}

// durationOf converts ns to a Duration, saturating at the bounds.
func durationOf(ns float64) time.Duration {
	switch {
	case !(ns > 0): // NaN too
		return 0
	case ns >= math.MaxInt64:
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// addSat returns t + d in Unix nanoseconds, saturating at MaxInt64: a
// retry years away stays years away instead of wrapping into the past.
func addSat(t int64, d time.Duration) int64 {
	if d > 0 && t > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return t + int64(d)
}

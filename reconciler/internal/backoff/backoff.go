// Package backoff computes when a failed attempt is tried again: the
// exponential wait with jitter of a retry, a prune's or a setup step's, and
// the saturating time arithmetic that keeps a wait years away in the
// future rather than wrapping into the past. It keeps no state and reads no
// clock: the caller passes the time and the random number.
package backoff

import (
	"math"
	"time"
)

// Wait returns the wait before the next attempt after the given number
// of failures (at least 1): minimum doubled per further failure, capped at
// maximum, then spread by ±jitter. u is a uniform random number in [0, 1).
// It saturates: whatever the options, the result is in [0, MaxInt64].
func Wait(attempts int, minimum, maximum time.Duration, jitter, u float64) time.Duration {
	d := float64(minimum) * math.Pow(2, float64(max(attempts, 1)-1))
	d = min(d, float64(maximum))
	d *= 1 + jitter*(2*u-1)
	return Duration(d)
}

// Duration converts ns to a Duration, saturating at the bounds.
func Duration(ns float64) time.Duration {
	switch {
	case !(ns > 0): // NaN too
		return 0
	case ns >= math.MaxInt64:
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// Add returns t + d in Unix nanoseconds, saturating at MaxInt64: a
// retry years away stays years away instead of wrapping into the past.
func Add(t int64, d time.Duration) int64 {
	if d > 0 && t > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return t + int64(d)
}

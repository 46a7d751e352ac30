package reconciler

import (
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode"
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

// errors returns up to limit errors of failing objects: those being
// attempted now (by key), then those waiting, earliest attempt first. It
// visits O(limit log limit) entries of the heap, not all of them.
func (lc *lifecycles[Obj]) errors(limit int) []error {
	errs := make([]error, 0, min(limit, lc.retrying))
	add := func(s *keyState[Obj]) {
		errs = append(errs, fmt.Errorf("%s: %w", displayKey(s.key), s.err))
	}
	var again []*keyState[Obj]
	for _, s := range lc.active {
		if s.attempts > 0 {
			again = append(again, s)
		}
	}
	slices.SortFunc(again, func(a, b *keyState[Obj]) int { return strings.Compare(a.key, b.key) })
	for _, s := range again {
		if len(errs) == limit {
			return errs
		}
		add(s)
	}
	// The smallest entries of a heap are found by walking it from the
	// root, always expanding the smallest entry seen so far.
	h := lc.heap.entries
	frontier := []int{}
	push := func(i int) {
		if i < len(h) {
			frontier = append(frontier, i)
		}
	}
	push(0)
	for len(errs) < limit && len(frontier) > 0 {
		best := 0
		for i := range frontier {
			if h[frontier[i]].before(h[frontier[best]]) {
				best = i
			}
		}
		i := frontier[best]
		add(h[i].s)
		frontier[best] = frontier[len(frontier)-1]
		frontier = frontier[:len(frontier)-1]
		push(2*i + 1)
		push(2*i + 2)
	}
	return errs
}

// displayKey renders a primary key for messages and the retries table: as
// is when it is printable text, in hex ("0x" followed by the bytes)
// otherwise. A printable key that itself starts with "0x" is shown in hex
// too, so that no two keys are shown the same.
func displayKey(key string) string {
	if strings.HasPrefix(key, "0x") {
		return "0x" + hex.EncodeToString([]byte(key))
	}
	for _, r := range key {
		if !unicode.IsPrint(r) {
			return "0x" + hex.EncodeToString([]byte(key))
		}
	}
	return key
}

// Package histogram counts durations in fixed buckets with atomic counters,
// for the expvar and Prometheus implementations of package metrics. An
// observation is two atomic adds; a batch of them is one add per bucket
// used. Nothing allocates after New.
package histogram

import (
	"math"
	"sync/atomic"
	"time"
)

// Histogram counts durations in buckets. Its methods are safe for
// concurrent use; a reader may see an observation's count before its sum.
type Histogram struct {
	bounds  []float64      // upper bounds in seconds
	nanos   []int64        // the same in nanoseconds
	counts  []atomic.Int64 // per bucket, not cumulative; the last is +Inf
	sumNano atomic.Int64
}

// New returns a histogram with the given upper bounds, in seconds and in
// increasing order, plus a last bucket, +Inf. bounds must not be modified
// afterwards.
func New(bounds []float64) *Histogram {
	h := &Histogram{
		bounds: bounds,
		nanos:  make([]int64, len(bounds)),
		counts: make([]atomic.Int64, len(bounds)+1),
	}
	for i, b := range bounds {
		h.nanos[i] = int64(math.Round(b * 1e9))
	}
	return h
}

// Bounds returns the upper bounds in seconds, without +Inf. The caller must
// not modify them.
func (h *Histogram) Bounds() []float64 { return h.bounds }

// bucket returns the index of the first bucket whose bound is at or above
// d: buckets hold values up to their bound.
func (h *Histogram) bucket(d time.Duration) int {
	for i, b := range h.nanos {
		if int64(d) <= b {
			return i
		}
	}
	return len(h.nanos)
}

// Observe records one duration.
func (h *Histogram) Observe(d time.Duration) {
	h.counts[h.bucket(d)].Add(1)
	h.sumNano.Add(int64(d))
}

// maxBuckets is the most buckets ObserveAll counts on the stack.
const maxBuckets = 32

// ObserveAll records every duration of ds, with one atomic add per bucket
// used rather than two per duration.
func (h *Histogram) ObserveAll(ds []time.Duration) {
	if len(ds) <= 1 || len(h.counts) > maxBuckets {
		for _, d := range ds {
			h.Observe(d)
		}
		return
	}
	var counts [maxBuckets]int64
	var sum int64
	for _, d := range ds {
		counts[h.bucket(d)]++
		sum += int64(d)
	}
	for i := range h.counts {
		if counts[i] != 0 {
			h.counts[i].Add(counts[i])
		}
	}
	h.sumNano.Add(sum)
}

// Cumulative returns the number of observations in bucket i and those
// below it; i = len(Bounds()) is +Inf, every observation.
func (h *Histogram) Cumulative(i int) int64 {
	var n int64
	for j := 0; j <= i && j < len(h.counts); j++ {
		n += h.counts[j].Load()
	}
	return n
}

// Sum returns the sum of the observations in seconds.
func (h *Histogram) Sum() float64 { return float64(h.sumNano.Load()) / 1e9 }

// Snapshot fills cumulative, which must have len(Bounds()) elements, with
// the cumulative count of each bucket, and returns the count and the sum
// in seconds of all observations.
func (h *Histogram) Snapshot(cumulative []uint64) (count uint64, sum float64) {
	sum = h.Sum()
	var n int64
	for i := range h.nanos {
		n += h.counts[i].Load()
		cumulative[i] = uint64(n)
	}
	n += h.counts[len(h.nanos)].Load()
	return uint64(n), sum
}

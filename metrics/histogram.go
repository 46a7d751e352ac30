package metrics

import (
	"expvar"
	"math"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
)

// histogram counts observations in buckets and is published as an
// *expvar.Map of each bucket's upper bound in seconds ("0.001", ..., "+Inf")
// to the cumulative count of observations at or below it, plus "count" and
// "sum", the number and the sum of all observations. Observing is two
// atomic operations and does not allocate; the cumulative counts are worked
// out when the map is rendered.
type histogram struct {
	bounds []float64      // shared, never modified
	counts []atomic.Int64 // per bucket, not cumulative; the last is +Inf
	sum    *expvar.Float
	view   *expvar.Map
}

// bucketVar renders the cumulative count of the buckets up to index i of h.
// The "+Inf" and "count" entries are bucketVars of the last bucket.
type bucketVar struct {
	h *histogram
	i int
}

// Value returns the cumulative count, like expvar.Int's Value.
func (b bucketVar) Value() int64 {
	var n int64
	for i := 0; i <= b.i; i++ {
		n += b.h.counts[i].Load()
	}
	return n
}

func (b bucketVar) String() string { return strconv.FormatInt(b.Value(), 10) }

func newHistogram(bounds []float64) *histogram {
	h := &histogram{
		bounds: bounds,
		counts: make([]atomic.Int64, len(bounds)+1),
		sum:    new(expvar.Float),
		view:   new(expvar.Map).Init(),
	}
	for i, b := range bounds {
		h.view.Set(strconv.FormatFloat(b, 'f', -1, 64), bucketVar{h, i})
	}
	all := bucketVar{h, len(bounds)}
	h.view.Set("+Inf", all)
	h.view.Set("count", all)
	h.view.Set("sum", h.sum)
	return h
}

// observe records one observation of v seconds. NaN is ignored.
func (h *histogram) observe(v float64) {
	if math.IsNaN(v) {
		return
	}
	// The first bound at or above v: buckets hold values up to their bound.
	h.counts[sort.SearchFloat64s(h.bounds, v)].Add(1)
	h.sum.Add(v)
}

// histogramMu serialises the creation of histograms, so that instances
// sharing published maps also share the histogram under each key.
var histogramMu sync.Mutex

// histogramVar returns the histogram under key in m, creating it with
// bounds if there is none. A variable of another kind under key is
// replaced.
func histogramVar(m *expvar.Map, key string, bounds []float64) *histogram {
	histogramMu.Lock()
	defer histogramMu.Unlock()
	if view, ok := m.Get(key).(*expvar.Map); ok {
		if b, ok := view.Get("+Inf").(bucketVar); ok {
			return b.h
		}
	}
	h := newHistogram(bounds)
	m.Set(key, h.view)
	return h
}

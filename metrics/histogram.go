package metrics

import (
	"expvar"
	"strconv"
	"sync"

	"github.com/converge-go/converge/metrics/internal/histogram"
)

// histogramView publishes a histogram as an *expvar.Map of each bucket's
// upper bound in seconds ("0.001", ..., "+Inf") to the cumulative count of
// observations at or below it, plus "count" and "sum", the number and the
// sum in seconds of all observations. The cumulative counts are worked out
// when the map is rendered.
func histogramView(h *histogram.Histogram) *expvar.Map {
	view := new(expvar.Map).Init()
	for i, b := range h.Bounds() {
		view.Set(strconv.FormatFloat(b, 'f', -1, 64), bucketVar{h, i})
	}
	all := bucketVar{h, len(h.Bounds())}
	view.Set("+Inf", all)
	view.Set("count", all)
	view.Set("sum", sumVar{h})
	return view
}

// bucketVar renders the cumulative count of the buckets up to index i of h.
// The "+Inf" and "count" entries are bucketVars of the last bucket.
type bucketVar struct {
	h *histogram.Histogram
	i int
}

// Value returns the cumulative count, like expvar.Int's Value.
func (b bucketVar) Value() int64 { return b.h.Cumulative(b.i) }

func (b bucketVar) String() string { return strconv.FormatInt(b.Value(), 10) }

// sumVar renders the sum of a histogram in seconds.
type sumVar struct{ h *histogram.Histogram }

// Value returns the sum in seconds, like expvar.Float's Value.
func (s sumVar) Value() float64 { return s.h.Sum() }

func (s sumVar) String() string { return strconv.FormatFloat(s.Value(), 'g', -1, 64) }

// histogramMu serialises the creation of histograms, so that instances
// sharing published maps also share the histogram under each key.
var histogramMu sync.Mutex

// histogramVar returns the histogram under key in m, creating it with
// bounds if there is none. A variable of another kind under key is
// replaced.
func histogramVar(m *expvar.Map, key string, bounds []float64) *histogram.Histogram {
	histogramMu.Lock()
	defer histogramMu.Unlock()
	if view, ok := m.Get(key).(*expvar.Map); ok {
		if b, ok := view.Get("+Inf").(bucketVar); ok {
			return b.h
		}
	}
	h := histogram.New(bounds)
	m.Set(key, histogramView(h))
	return h
}

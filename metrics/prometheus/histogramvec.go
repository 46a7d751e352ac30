package prometheus

import (
	"slices"
	"sync"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/converge-go/converge/metrics/internal/histogram"
)

// histogramVec is a histogram family whose series are counted with package
// histogram, in two atomic adds per observation and one add per bucket for
// a batch, and exported as constant histograms when collected. It can
// export its series under several names (workqueue_work_duration_seconds
// and reconcile_time_seconds), so that one observation feeds all of them.
type histogramVec struct {
	descs  []*prom.Desc
	bounds []float64

	mu     sync.Mutex
	series []histogramSeries // append-only
}

type histogramSeries struct {
	labelValues []string
	h           *histogram.Histogram
}

// family is the name and help of one exported family.
type family struct{ fqName, help string }

func newHistogramVec(bounds []float64, labels []string, families ...family) *histogramVec {
	v := &histogramVec{bounds: bounds}
	for _, f := range families {
		v.descs = append(v.descs, prom.NewDesc(f.fqName, f.help, labels, nil))
	}
	return v
}

// with returns the histogram of the series with labelValues, creating it
// if needed. Callers cache the result: this takes a lock.
func (v *histogramVec) with(labelValues ...string) *histogram.Histogram {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, s := range v.series {
		if slices.Equal(s.labelValues, labelValues) {
			return s.h
		}
	}
	h := histogram.New(v.bounds)
	v.series = append(v.series, histogramSeries{labelValues: slices.Clone(labelValues), h: h})
	return h
}

// Describe implements prom.Collector.
func (v *histogramVec) Describe(ch chan<- *prom.Desc) {
	for _, d := range v.descs {
		ch <- d
	}
}

// Collect implements prom.Collector.
func (v *histogramVec) Collect(ch chan<- prom.Metric) {
	v.mu.Lock()
	series := v.series[:len(v.series):len(v.series)]
	v.mu.Unlock()
	cumulative := make([]uint64, len(v.bounds))
	for _, s := range series {
		count, sum := s.h.Snapshot(cumulative)
		buckets := make(map[float64]uint64, len(v.bounds))
		for i, b := range v.bounds {
			buckets[b] = cumulative[i]
		}
		for _, d := range v.descs {
			ch <- prom.MustNewConstHistogram(d, count, sum, buckets, s.labelValues...)
		}
	}
}

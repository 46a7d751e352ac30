package metrics_test

import (
	"encoding/json"
	"expvar"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
)

// histogramOf decodes the histogram under key in m.
func histogramOf(t testing.TB, m *expvar.Map, key string) map[string]float64 {
	t.Helper()
	v := m.Get(key)
	require.NotNil(t, v, "no histogram under %q in %s", key, m)
	_, isMap := v.(*expvar.Map)
	require.True(t, isMap, "a histogram is an *expvar.Map, not %T", v)
	var h map[string]float64
	require.NoError(t, json.Unmarshal([]byte(v.String()), &h), v.String())
	return h
}

func TestHistogramBucketEdges(t *testing.T) {
	m := metrics.NewUnpublishedExpVar()
	mod := cell.FullModuleID{"mod"}
	// 1ms lands in the 0.001 bucket (upper bounds are inclusive), just above
	// it in 0.0025; 2m past the last bound only in +Inf.
	for _, d := range []time.Duration{time.Millisecond, time.Millisecond + time.Nanosecond, 2 * time.Minute, 0} {
		m.ReconciliationDuration(mod, "r", metrics.OpUpdate, d)
	}
	h := histogramOf(t, m.ReconciliationDurationHistogramVar, "mod/r/update")
	assert.Equal(t, 1.0, h["0.00001"], "zero is in the first bucket")
	assert.Equal(t, 1.0, h["0.0005"])
	assert.Equal(t, 2.0, h["0.001"], "inclusive upper bound")
	assert.Equal(t, 3.0, h["0.0025"], "cumulative")
	assert.Equal(t, 3.0, h["60"])
	assert.Equal(t, 4.0, h["+Inf"])
	assert.Equal(t, 4.0, h["count"])
	assert.InDelta(t, 120.002000001, h["sum"], 1e-9)
	assert.Len(t, h, len(metrics.DurationBuckets())+3, "every bound, +Inf, count and sum")

	// Buckets hold cumulative counts: never decreasing.
	prev := 0.0
	for _, b := range metrics.DurationBuckets() {
		n := h[strconv.FormatFloat(b, 'f', -1, 64)]
		assert.GreaterOrEqual(t, n, prev, "bucket %v", b)
		prev = n
	}
}

func TestHistogramBucketsReadAsNumbers(t *testing.T) {
	m := metrics.NewUnpublishedExpVar()
	mod := cell.FullModuleID{"mod"}
	m.ReconciliationDuration(mod, "r", metrics.OpDelete, 3*time.Second)
	h := m.ReconciliationDurationHistogramVar.Get("mod/r/delete").(*expvar.Map)
	// A bucket has a Value method, like expvar.Int.
	inf, ok := h.Get("+Inf").(interface{ Value() int64 })
	require.True(t, ok, "%T", h.Get("+Inf"))
	assert.Equal(t, int64(1), inf.Value())
	assert.Equal(t, "0", h.Get("2.5").String())
	assert.Equal(t, "1", h.Get("5").String())
}

func TestHistogramHugeDuration(t *testing.T) {
	// The largest duration lands in +Inf.
	m := metrics.NewUnpublishedExpVar()
	mod := cell.FullModuleID{"mod"}
	m.ReconciliationDuration(mod, "r", metrics.OpUpdate, time.Duration(math.MaxInt64))
	h := histogramOf(t, m.ReconciliationDurationHistogramVar, "mod/r/update")
	assert.Equal(t, 1.0, h["+Inf"])
	assert.Equal(t, 0.0, h["60"])
}

func TestHistogramSharedAcrossPublishedInstances(t *testing.T) {
	a, b := metrics.NewExpVar(), metrics.NewExpVar()
	mod := uniqueModule(t)
	start := make(chan struct{})
	var wg sync.WaitGroup
	const n = 500
	for _, m := range []*metrics.ExpVar{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range n {
				m.ReconciliationDuration(mod, "r", metrics.OpUpdate, time.Millisecond)
				m.Committed(mod, "r", metrics.CommitStats{Latencies: []time.Duration{time.Second}})
			}
		}()
	}
	close(start)
	wg.Wait()
	key := metrics.Key(mod, "r")
	h := histogramOf(t, a.ReconciliationDurationHistogramVar, key+"/update")
	assert.Equal(t, 2.0*n, h["count"], "both instances observe into one histogram")
	assert.Equal(t, 2.0*n, h["0.001"])
	h = histogramOf(t, b.ConvergenceDurationHistogramVar, key)
	assert.Equal(t, 2.0*n, h["1"])
	assert.Equal(t, 0.0, h["0.5"])
}

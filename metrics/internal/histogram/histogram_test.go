package histogram

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestBuckets(t *testing.T) {
	h := New([]float64{0.001, 0.01, 1})
	h.Observe(0)
	h.Observe(time.Millisecond)     // on the bound: in it
	h.Observe(time.Millisecond + 1) // just above: the next
	h.Observe(2 * time.Second)      // past the last: +Inf
	h.ObserveAll([]time.Duration{time.Second, 5 * time.Millisecond, time.Hour})
	assert.Equal(t, int64(2), h.Cumulative(0))
	assert.Equal(t, int64(4), h.Cumulative(1))
	assert.Equal(t, int64(5), h.Cumulative(2))
	assert.Equal(t, int64(7), h.Cumulative(3))
	assert.Equal(t, int64(7), h.Cumulative(99))
	assert.InDelta(t, 0.001+0.001000001+2+1+0.005+3600, h.Sum(), 1e-9)

	cum := make([]uint64, 3)
	count, sum := h.Snapshot(cum)
	assert.Equal(t, []uint64{2, 4, 5}, cum)
	assert.Equal(t, uint64(7), count)
	assert.InDelta(t, h.Sum(), sum, 1e-12)
}

func TestObserveAllMatchesObserve(t *testing.T) {
	bounds := []float64{0.00001, 0.0001, 0.001, 0.01, 0.1, 1, 10}
	a, b := New(bounds), New(bounds)
	var ds []time.Duration
	for i := range 1000 {
		ds = append(ds, time.Duration(i*i*i)*time.Nanosecond)
	}
	a.ObserveAll(ds)
	for _, d := range ds {
		b.Observe(d)
	}
	for i := range len(bounds) + 1 {
		assert.Equal(t, b.Cumulative(i), a.Cumulative(i), "bucket %d", i)
	}
	assert.Equal(t, b.Sum(), a.Sum())
}

func TestManyBucketsFallBack(t *testing.T) {
	bounds := make([]float64, 40)
	for i := range bounds {
		bounds[i] = float64(i + 1)
	}
	h := New(bounds)
	h.ObserveAll([]time.Duration{time.Second, 39 * time.Second, time.Minute})
	assert.Equal(t, int64(1), h.Cumulative(0))
	assert.Equal(t, int64(2), h.Cumulative(38))
	assert.Equal(t, int64(3), h.Cumulative(40))
}

func TestConcurrent(t *testing.T) {
	h := New([]float64{0.001})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				h.Observe(time.Microsecond)
				h.ObserveAll([]time.Duration{time.Second, time.Second})
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(4000), h.Cumulative(0))
	assert.Equal(t, int64(12000), h.Cumulative(1))
}

func TestObserveDoesNotAllocate(t *testing.T) {
	h := New([]float64{0.001, 1})
	ds := []time.Duration{1, 2, 3}
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		h.Observe(time.Millisecond)
		h.ObserveAll(ds)
	}))
}

package main

import (
	"runtime/metrics"
	"sync"
	"time"
)

// heapObjectsMetric is the memory occupied by live objects and by dead ones
// not yet swept: what the heap holds at that moment.
const heapObjectsMetric = "/memory/classes/heap/objects:bytes"

// heapSampler records the peak of the heap's objects while a run goes on,
// every few milliseconds, without stopping the world.
type heapSampler struct {
	base uint64 // heap objects when the sampler started
	peak uint64
	stop chan struct{}
	done sync.WaitGroup
}

func heapObjects() uint64 {
	s := []metrics.Sample{{Name: heapObjectsMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// startHeapSampler starts sampling; call after settle() so that base is
// the live heap.
func startHeapSampler() *heapSampler {
	h := &heapSampler{base: heapObjects(), stop: make(chan struct{})}
	h.peak = h.base
	h.done.Add(1)
	go func() {
		defer h.done.Done()
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			h.peak = max(h.peak, heapObjects())
			select {
			case <-h.stop:
				return
			case <-t.C:
			}
		}
	}()
	return h
}

// finish stops sampling and returns the peak growth of the heap over base,
// in bytes.
func (h *heapSampler) finish() float64 {
	close(h.stop)
	h.done.Wait()
	h.peak = max(h.peak, heapObjects())
	return float64(h.peak - h.base)
}

package reconciler

import (
	"math"
	"time"
)

// retryHeap is a binary min-heap ordered by (at, seq). The ordering keys are
// kept inline in the slice, next to the pointer, so that sifting compares
// without touching the entries themselves; only a move writes an entry's
// position.
type retryHeap[Obj any] []heapEntry[Obj]

type heapEntry[Obj any] struct {
	at   int64 // item.at in Unix nanoseconds
	seq  uint64
	item *retry[Obj]
}

func (h retryHeap[Obj]) less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}

func (h retryHeap[Obj]) move(to int, e heapEntry[Obj]) {
	h[to] = e
	e.item.pos = to
}

func (h *retryHeap[Obj]) push(item *retry[Obj]) {
	*h = append(*h, heapEntry[Obj]{at: item.at.UnixNano(), seq: item.seq, item: item})
	h.up(len(*h) - 1)
}

// remove deletes the entry at position i.
func (h *retryHeap[Obj]) remove(i int) {
	old := *h
	last := len(old) - 1
	if i != last {
		old.move(i, old[last])
	}
	old[last] = heapEntry[Obj]{}
	*h = old[:last]
	if i != last {
		if !h.down(i) {
			h.up(i)
		}
	}
}

func (h retryHeap[Obj]) up(i int) {
	e := h[i]
	for i > 0 {
		parent := (i - 1) / 2
		if h[parent].at < e.at || (h[parent].at == e.at && h[parent].seq < e.seq) {
			break
		}
		h.move(i, h[parent])
		i = parent
	}
	h.move(i, e)
}

// down sifts the entry at i towards the leaves and reports whether it moved.
func (h retryHeap[Obj]) down(i int) bool {
	start, e, n := i, h[i], len(h)
	for {
		child := 2*i + 1
		if child >= n {
			break
		}
		if r := child + 1; r < n && h.less(r, child) {
			child = r
		}
		if e.at < h[child].at || (e.at == h[child].at && e.seq < h[child].seq) {
			break
		}
		h.move(i, h[child])
		i = child
	}
	h.move(i, e)
	return i != start
}

// backoff returns the wait before the next attempt after the given number of
// failures (at least 1): minimum doubled per further failure, capped at
// maximum, then spread by ±jitter. u is a uniform random number in [0, 1).
func backoff(attempts int, minimum, maximum time.Duration, jitter, u float64) time.Duration {
	d := float64(minimum) * math.Pow(2, float64(max(attempts, 1)-1))
	d = min(d, float64(maximum))
	d *= 1 + jitter*(2*u-1)
	return time.Duration(d)
}

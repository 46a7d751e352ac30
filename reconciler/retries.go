package reconciler

import (
	"container/heap"
	"encoding/hex"
	"fmt"
	"math"
	"time"
	"unicode"

	"github.com/cilium/statedb"
)

// retry is an object waiting for another attempt.
type retry[Obj any] struct {
	key      string
	obj      Obj // the deleted object, or the object as last written
	rev      statedb.Revision
	delete   bool
	statusID uint64    // identity of the Error status written for it
	since    time.Time // when reconciliation of this version was asked for
	attempts int       // failures so far
	err      error
	at       time.Time // when to try again
	seq      uint64    // insertion order, to break ties
	pos      int       // position in the heap
}

// retryQueue holds failing objects ordered by the time of their next attempt.
// Adding, replacing and removing an object cost O(log n); taking the due
// objects costs O(log n) each, so a round never scans the whole queue.
// It is owned by the reconciler's loop goroutine.
type retryQueue[Obj any] struct {
	byKey   map[string]*retry[Obj]
	heap    retryHeap[Obj]
	seq     uint64
	version uint64 // changes on every add or remove, for cheap "has it changed"

	low      statedb.Revision // lowest rev in the queue, valid if !lowDirty
	lowDirty bool
}

func newRetryQueue[Obj any]() *retryQueue[Obj] {
	return &retryQueue[Obj]{byKey: map[string]*retry[Obj]{}}
}

func (q *retryQueue[Obj]) len() int { return len(q.heap) }

// add queues item, replacing any entry of the same key.
func (q *retryQueue[Obj]) add(item *retry[Obj]) {
	q.removeKey(item.key)
	q.seq++
	item.seq = q.seq
	q.byKey[item.key] = item
	heap.Push(&q.heap, item)
	q.version++
	if !q.lowDirty && (len(q.heap) == 1 || item.rev < q.low) {
		q.low = item.rev
	}
}

// removeKey drops the entry of key, if any. The conversion in the map index
// does not allocate.
func (q *retryQueue[Obj]) removeKey(key string) {
	if len(q.byKey) == 0 {
		return
	}
	if item, ok := q.byKey[key]; ok {
		q.remove(item)
	}
}

func (q *retryQueue[Obj]) removeKeyBytes(key []byte) {
	if len(q.byKey) == 0 {
		return
	}
	if item, ok := q.byKey[string(key)]; ok {
		q.remove(item)
	}
}

func (q *retryQueue[Obj]) remove(item *retry[Obj]) {
	delete(q.byKey, item.key)
	heap.Remove(&q.heap, item.pos)
	q.version++
	if item.rev == q.low {
		q.lowDirty = true
	}
}

// popDue removes and returns the earliest entry if it is due at now.
func (q *retryQueue[Obj]) popDue(now time.Time) (*retry[Obj], bool) {
	if len(q.heap) == 0 || q.heap[0].at.After(now) {
		return nil, false
	}
	item := q.heap[0]
	q.remove(item)
	return item, true
}

// next returns the time of the earliest attempt.
func (q *retryQueue[Obj]) next() (time.Time, bool) {
	if len(q.heap) == 0 {
		return time.Time{}, false
	}
	return q.heap[0].at, true
}

// lowWatermark returns the lowest revision of a queued object, or 0. It
// rescans only after the entry holding the lowest revision left.
func (q *retryQueue[Obj]) lowWatermark() statedb.Revision {
	if len(q.heap) == 0 {
		q.low, q.lowDirty = 0, false
		return 0
	}
	if q.lowDirty {
		q.low = math.MaxUint64
		for _, item := range q.heap {
			q.low = min(q.low, item.rev)
		}
		q.lowDirty = false
	}
	return q.low
}

// errors returns up to limit errors of queued objects, earliest first.
func (q *retryQueue[Obj]) errors(limit int) []error {
	errs := make([]error, 0, min(limit, len(q.heap)))
	for _, item := range q.heap {
		if len(errs) == limit {
			break
		}
		errs = append(errs, fmt.Errorf("%s: %w", displayKey(item.key), item.err))
	}
	return errs
}

// displayKey renders a primary key for messages: as is when it is printable
// text, in hex otherwise (for example for integer keys).
func displayKey(key string) string {
	for _, r := range key {
		if !unicode.IsPrint(r) {
			return "0x" + hex.EncodeToString([]byte(key))
		}
	}
	return key
}

type retryHeap[Obj any] []*retry[Obj]

func (h retryHeap[Obj]) Len() int { return len(h) }
func (h retryHeap[Obj]) Less(i, j int) bool {
	if h[i].at.Equal(h[j].at) {
		return h[i].seq < h[j].seq
	}
	return h[i].at.Before(h[j].at)
}
func (h retryHeap[Obj]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos = i
	h[j].pos = j
}
func (h *retryHeap[Obj]) Push(x any) {
	item := x.(*retry[Obj])
	item.pos = len(*h)
	*h = append(*h, item)
}
func (h *retryHeap[Obj]) Pop() any {
	old := *h
	item := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return item
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

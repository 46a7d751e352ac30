package reconciler

import (
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"slices"
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
	first    time.Time // when this version first failed
	at       time.Time // when to try again
	seq      uint64    // insertion order, to break ties
	pos      int       // position in the heap
}

// retryQueue holds failing objects ordered by the time of their next attempt.
// Adding, replacing and removing an object cost O(log n); taking the due
// objects costs O(log n) each, so a round never scans the whole queue.
//
// A retry taken for an attempt stays counted, in running, until the
// attempt's outcome is committed (see start and settle): the object is still
// failing until then, for health and for the retry low watermark.
// It is owned by the reconciler's loop goroutine.
type retryQueue[Obj any] struct {
	byKey   map[string]*retry[Obj] // waiting in heap
	heap    retryHeap[Obj]
	running map[string]*retry[Obj] // taken for an attempt, not yet settled

	// dirty holds the keys changed since the last changes() call, when
	// tracking; spareDirty is the other half of its double buffer.
	dirty, spareDirty map[string]*retry[Obj]
	seq               uint64
	version           uint64 // changes on every add or remove, for cheap "has it changed"

	low      statedb.Revision // lowest rev in the queue, valid if !lowDirty
	lowDirty bool

	oldest      time.Time // earliest since in the heap, valid if !oldestDirty
	oldestDirty bool
}

func newRetryQueue[Obj any]() *retryQueue[Obj] {
	return &retryQueue[Obj]{byKey: map[string]*retry[Obj]{}, running: map[string]*retry[Obj]{}}
}

// len returns the number of failing objects: waiting or running.
func (q *retryQueue[Obj]) len() int { return len(q.heap) + len(q.running) }

// add queues item, replacing any entry of the same key, waiting or running.
func (q *retryQueue[Obj]) add(item *retry[Obj]) {
	q.removeKey(item.key)
	q.settle(item.key)
	q.seq++
	item.seq = q.seq
	q.byKey[item.key] = item
	q.heap.push(item)
	q.version++
	q.changed(item.key, item)
	if !q.lowDirty && (len(q.heap) == 1 || item.rev < q.low) {
		q.low = item.rev
	}
	if !q.oldestDirty && (len(q.heap) == 1 || item.since.Before(q.oldest)) {
		q.oldest = item.since
	}
}

// knows reports whether key has a retry, waiting or running, for the
// status of identity statusID. The conversion in the map index does not
// allocate.
func (q *retryQueue[Obj]) knows(key []byte, statusID uint64) bool {
	if item, ok := q.byKey[string(key)]; ok && item.statusID == statusID {
		return true
	}
	item, ok := q.running[string(key)]
	return ok && item.statusID == statusID
}

// start records that item, just taken with popDue, is being attempted.
func (q *retryQueue[Obj]) start(item *retry[Obj]) {
	q.running[item.key] = item
	q.version++
	q.changed(item.key, item)
}

// trackChanges makes the queue remember which keys changed (see changes),
// for the retries table.
func (q *retryQueue[Obj]) trackChanges() {
	q.dirty, q.spareDirty = map[string]*retry[Obj]{}, map[string]*retry[Obj]{}
}

// changed notes that key now holds item (nil: nothing), if tracking.
func (q *retryQueue[Obj]) changed(key string, item *retry[Obj]) {
	if q.dirty != nil {
		q.dirty[key] = item
	}
}

// changes returns the keys changed since the last call, with what each
// holds now (nil: no longer failing). The map is valid until the next call.
func (q *retryQueue[Obj]) changes() map[string]*retry[Obj] {
	d := q.dirty
	if len(d) > 0 {
		q.dirty = q.spareDirty
		q.spareDirty = d
		clear(q.dirty)
	}
	return d
}

// settle forgets the attempt on key, if one is running, and returns it:
// its outcome has been committed (and a failure queued again with add).
func (q *retryQueue[Obj]) settle(key string) *retry[Obj] {
	if len(q.running) == 0 {
		return nil
	}
	item, ok := q.running[key]
	if ok {
		delete(q.running, key)
		q.version++
		q.changed(key, nil)
	}
	return item
}

// removeKey drops the waiting entry of key, if any; a running attempt stays
// until settled. The conversion in the map index does not allocate.
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
	q.heap.remove(item.pos)
	item.pos = -1
	q.version++
	q.changed(item.key, nil)
	if item.rev == q.low {
		q.lowDirty = true
	}
	if item.since.Equal(q.oldest) {
		q.oldestDirty = true
	}
}

// popDue removes and returns the earliest entry if it is due at now.
func (q *retryQueue[Obj]) popDue(now time.Time) (*retry[Obj], bool) {
	if len(q.heap) == 0 || q.heap[0].at > now.UnixNano() {
		return nil, false
	}
	item := q.heap[0].item
	q.remove(item)
	return item, true
}

// next returns the time of the earliest attempt.
func (q *retryQueue[Obj]) next() (time.Time, bool) {
	if len(q.heap) == 0 {
		return time.Time{}, false
	}
	return q.heap[0].item.at, true
}

// lowWatermark returns the lowest revision of a failing object, waiting or
// running, or 0. It rescans the waiting ones only after the entry holding
// their lowest revision left.
func (q *retryQueue[Obj]) lowWatermark() statedb.Revision {
	low := q.waitingLow()
	for _, item := range q.running {
		if low == 0 || item.rev < low {
			low = item.rev
		}
	}
	return low
}

// oldestSince returns the earliest time at which a failing object, waiting
// or running, was asked to be reconciled, or the zero time.
func (q *retryQueue[Obj]) oldestSince() time.Time {
	if len(q.heap) == 0 {
		q.oldest, q.oldestDirty = time.Time{}, false
	} else if q.oldestDirty {
		q.oldest = q.heap[0].item.since
		for _, e := range q.heap {
			if e.item.since.Before(q.oldest) {
				q.oldest = e.item.since
			}
		}
		q.oldestDirty = false
	}
	oldest := q.oldest
	for _, item := range q.running {
		if oldest.IsZero() || item.since.Before(oldest) {
			oldest = item.since
		}
	}
	return oldest
}

func (q *retryQueue[Obj]) waitingLow() statedb.Revision {
	if len(q.heap) == 0 {
		q.low, q.lowDirty = 0, false
		return 0
	}
	if q.lowDirty {
		q.low = math.MaxUint64
		for _, e := range q.heap {
			q.low = min(q.low, e.item.rev)
		}
		q.lowDirty = false
	}
	return q.low
}

// errors returns up to limit errors of failing objects, earliest attempt
// first: those being attempted now (by key), then those waiting, by the
// time of their next attempt. It visits O(limit log limit) entries of the
// heap, not all of them.
func (q *retryQueue[Obj]) errors(limit int) []error {
	errs := make([]error, 0, min(limit, q.len()))
	add := func(item *retry[Obj]) {
		errs = append(errs, fmt.Errorf("%s: %w", displayKey(item.key), item.err))
	}
	for _, key := range slices.Sorted(maps.Keys(q.running)) {
		if len(errs) == limit {
			return errs
		}
		add(q.running[key])
	}
	// The smallest entries of a heap are found by walking it from the
	// root, always expanding the smallest entry seen so far.
	var frontier retryHeap[Obj]
	pos := []int{} // frontier[i] is q.heap[pos[i]]
	push := func(i int) {
		if i < len(q.heap) {
			frontier = append(frontier, q.heap[i])
			pos = append(pos, i)
		}
	}
	push(0)
	for len(errs) < limit && len(frontier) > 0 {
		best := 0
		for i := range frontier {
			if frontier.less(i, best) {
				best = i
			}
		}
		i := pos[best]
		add(frontier[best].item)
		last := len(frontier) - 1
		frontier[best], pos[best] = frontier[last], pos[last]
		frontier, pos = frontier[:last], pos[:last]
		push(2*i + 1)
		push(2*i + 2)
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

package keyqueue

// recheckHeap holds the re-checks asked for with RecheckAfter: per key, the
// Done status written for the version that asked and when to mark it
// Refreshing. A key has at most one; a later ask replaces it. It is a
// binary min-heap by due time with a position per key, so asking,
// replacing and taking what is due cost O(log n). The zero value is
// empty. The loop's goroutine owns it; it lives as long as the
// reconciler, across stops and starts.
type recheckHeap[Obj any] struct {
	heap  []*recheck[Obj]
	byKey map[string]*recheck[Obj]
}

// recheck is one re-check: obj carried the Done status statusID when it
// was written.
type recheck[Obj any] struct {
	key      string
	obj      Obj
	statusID uint64
	due      int64 // Unix ns
	pos      int
}

// ask records a re-check of key, whose object obj was written with the
// Done status statusID, due at due (Unix ns).
func (q *recheckHeap[Obj]) ask(key string, obj Obj, statusID uint64, due int64) {
	if q.byKey == nil {
		q.byKey = map[string]*recheck[Obj]{}
	}
	if c, ok := q.byKey[key]; ok {
		c.obj, c.statusID, c.due = obj, statusID, due
		if !q.down(c.pos) {
			q.up(c.pos)
		}
		return
	}
	c := &recheck[Obj]{key: key, obj: obj, statusID: statusID, due: due, pos: len(q.heap)}
	q.byKey[key] = c
	q.heap = append(q.heap, c)
	q.up(c.pos)
}

// drop forgets the re-check of key, if any: a newer version of its object
// or its delete was read, which replaces it. The object it held is let go
// at once, not when the re-check would have fallen due.
func (q *recheckHeap[Obj]) drop(key []byte) {
	if c, ok := q.byKey[string(key)]; ok {
		q.remove(c.pos)
		if len(q.heap) == 0 {
			q.heap, q.byKey = nil, nil
		}
	}
}

// next returns when the earliest re-check is due (Unix ns).
func (q *recheckHeap[Obj]) next() (int64, bool) {
	if len(q.heap) == 0 {
		return 0, false
	}
	return q.heap[0].due, true
}

// count returns how many re-checks are asked for.
func (q *recheckHeap[Obj]) count() int { return len(q.byKey) }

// takeDue removes up to n re-checks due at now (Unix ns), earliest first,
// and appends each to dst as a task with the object and the identity of
// the Done status it was asked with: the caller marks the object
// Refreshing if it still carries that status (a changed or deleted object
// has had, or has, its own turn).
func (q *recheckHeap[Obj]) takeDue(now int64, n int, dst []Task[Obj]) []Task[Obj] {
	for ; n > 0 && len(q.heap) > 0 && q.heap[0].due <= now; n-- {
		c := q.heap[0]
		q.remove(0)
		dst = append(dst, Task[Obj]{Obj: c.obj, StatusID: c.statusID})
	}
	if len(q.heap) == 0 && len(q.byKey) > 0 {
		q.heap, q.byKey = nil, nil // give back what a burst took
	}
	return dst
}

func (q *recheckHeap[Obj]) remove(i int) {
	c := q.heap[i]
	delete(q.byKey, c.key)
	last := len(q.heap) - 1
	q.swap(i, last)
	q.heap[last] = nil
	q.heap = q.heap[:last]
	if i < last && !q.down(i) {
		q.up(i)
	}
}

func (q *recheckHeap[Obj]) swap(i, j int) {
	q.heap[i], q.heap[j] = q.heap[j], q.heap[i]
	q.heap[i].pos, q.heap[j].pos = i, j
}

func (q *recheckHeap[Obj]) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if q.heap[parent].due <= q.heap[i].due {
			return
		}
		q.swap(i, parent)
		i = parent
	}
}

// down sifts the entry at i towards the leaves and reports whether it moved.
func (q *recheckHeap[Obj]) down(i int) bool {
	start, n := i, len(q.heap)
	for {
		child := 2*i + 1
		if child >= n {
			break
		}
		if r := child + 1; r < n && q.heap[r].due < q.heap[child].due {
			child = r
		}
		if q.heap[i].due <= q.heap[child].due {
			break
		}
		q.swap(i, child)
		i = child
	}
	return i != start
}

package keyqueue

// backlogRing holds the changes that wait behind fresh ones: objects
// marked Refreshing (by the refresh sweep or a dependency) and the backlog
// of Pending objects that were in the table when the reconcile job first ran.
// A deferred change is taken as its object now is, if that still asks for
// work (see the reconciler's collectDeferred). It has no cap: its entries
// are small (an object and two revisions), and a cap would hold fresh
// changes back behind it. It is owned by the
// loop goroutine.
type backlogRing[Obj any] struct {
	ring []deferredChange[Obj]
	head int
	size int // how many changes are deferred
}

// deferredChange is one change deferred.
type deferredChange[Obj any] struct {
	obj   Obj
	rev   uint64 // the object's, when deferred
	asked uint64 // the first revision the change stands for (see Task.Asked)
}

// push defers a change.
func (q *backlogRing[Obj]) push(obj Obj, rev, asked uint64) {
	if q.size == len(q.ring) {
		grown := make([]deferredChange[Obj], max(2*len(q.ring), 64))
		for i := range q.size {
			grown[i] = q.ring[(q.head+i)%len(q.ring)]
		}
		q.ring, q.head = grown, 0
	}
	q.ring[(q.head+q.size)%len(q.ring)] = deferredChange[Obj]{obj, rev, asked}
	q.size++
}

// pop takes the oldest deferred change.
func (q *backlogRing[Obj]) pop() deferredChange[Obj] {
	d := q.ring[q.head]
	q.ring[q.head] = deferredChange[Obj]{}
	q.head = (q.head + 1) % len(q.ring)
	q.size--
	if q.size == 0 && len(q.ring) > shrinkAbove {
		q.ring, q.head = nil, 0 // a backlog drained: give its memory back
	}
	return d
}

// lowRev returns the first revision the oldest deferred change stands
// for, the lowest of all (changes are deferred in the order they are
// read), or 0 if none.
func (q *backlogRing[Obj]) lowRev() uint64 {
	if q.size == 0 {
		return 0
	}
	return q.ring[q.head].asked
}

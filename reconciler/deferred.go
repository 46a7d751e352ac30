package reconciler

import (
	"github.com/cilium/statedb"
)

// deferCap bounds how many deferred changes are held. Once it is reached,
// a round reads no further changes until some are taken. A burst of this
// many refresh marks or a restart backlog of this size still lets a fresh
// change behind it be taken in the next round.
const deferCap = 1 << 17

// deferredQueue holds the changes that wait behind fresh ones: objects
// marked Refreshing (by the refresh sweep or a dependency) and the backlog
// of Pending objects that were in the table when the loop first started.
// Fresh changes (new Pending versions, deletes) are taken first, then
// retries, then these, oldest first, as the round's budget allows. A
// deferred change is taken only if its object is still at the revision it
// was deferred at: if it changed since, the iterator brings the newer
// version in its own turn, and taking both would apply one version twice
// or an old one last. It is owned by the loop goroutine.
type deferredQueue[Obj any] struct {
	ring       []deferred[Obj]
	head, size int
}

type deferred[Obj any] struct {
	obj Obj
	rev statedb.Revision
}

func (q *deferredQueue[Obj]) len() int   { return q.size }
func (q *deferredQueue[Obj]) full() bool { return q.size >= deferCap }

// push defers a change.
func (q *deferredQueue[Obj]) push(obj Obj, rev statedb.Revision) {
	if q.size == len(q.ring) {
		grown := make([]deferred[Obj], max(2*len(q.ring), 64))
		for i := range q.size {
			grown[i] = q.ring[(q.head+i)%len(q.ring)]
		}
		q.ring, q.head = grown, 0
	}
	q.ring[(q.head+q.size)%len(q.ring)] = deferred[Obj]{obj, rev}
	q.size++
}

// pop takes the oldest deferred change.
func (q *deferredQueue[Obj]) pop() deferred[Obj] {
	d := q.ring[q.head]
	q.ring[q.head] = deferred[Obj]{}
	q.head = (q.head + 1) % len(q.ring)
	q.size--
	return d
}

// lowRev returns the revision of the oldest deferred change, 0 if none.
func (q *deferredQueue[Obj]) lowRev() statedb.Revision {
	if q.size == 0 {
		return 0
	}
	return q.ring[q.head].rev
}

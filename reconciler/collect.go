package reconciler

import (
	"errors"
	"iter"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/status"
)

// collect is the first stage of a round: it returns the work to start, at
// most room ops, taken in this order and by this budget rule:
//
//  1. queued keys (work cut short by a stop or a pause, or a successor
//     released by the last commit) keep their place and come first;
//  2. fresh changes (new Pending versions and deletes) may take all that
//     is left, but for a reserve of an eighth kept while retries are due or
//     changes are deferred, so that a stream of writes cannot starve those;
//  3. due retries and deferred changes (Refreshing marks and the backlog
//     found at the first start) share the rest, half each, and either takes
//     what the other leaves.
//
// Every share is a non-negative int no larger than room, so no option
// value makes one negative or overflow. Reading a change that is deferred,
// dropped or parked behind a running version costs no budget, and the
// deferred queue has no cap, so a fresh change is never held back by a
// backlog or a burst of refresh marks: only by room. With no room it reads
// nothing and looks again next round.
func (l *loop[Obj]) collect(txn statedb.ReadTxn, now time.Time, room int) []op[Obj] {
	lc := l.r.keys
	l.work = l.work[:0]
	if room <= 0 {
		l.watch = closedChan // look again as soon as there is room
		return nil
	}
	for _, s := range lc.takeQueued(room) {
		if l.current(txn, s) {
			l.start(s)
		} else {
			lc.forget(s)
		}
	}
	left := room - len(l.work)
	due, dueOK := lc.nextDue()
	reserve := 0
	if (dueOK && due <= now.UnixNano()) || l.r.deferred.len() > 0 {
		reserve = left / 8
	}
	if budget := left - reserve; budget > 0 {
		var seq iter.Seq2[statedb.Change[Obj], statedb.Revision]
		seq, l.watch = l.r.changes.next(txn)
		l.collectChanges(seq, budget, now)
		l.r.lastRev = max(l.r.lastRev, l.r.changes.position())
		l.r.keys.readUpTo(l.r.lastRev, l.r.table.Revision(txn))
	} else {
		l.watch = closedChan // changes wait for room
	}
	left = room - len(l.work)
	deferredShare := min(l.r.deferred.len(), left/2)
	l.collectRetries(txn, now, left-deferredShare)
	l.collectDeferred(txn, now, room-len(l.work))
	if len(lc.queued) > 0 || l.r.deferred.len() > 0 {
		l.watch = closedChan // more work for the next round
	}
	return l.work
}

// start adds the job of s to the round's work.
func (l *loop[Obj]) start(s *keyState[Obj]) {
	l.r.keys.start(s)
	l.work = append(l.work, op[Obj]{task: s.task, s: s, key: s.key})
}

// collectChanges reads changes, turning those that need work into ops,
// until budget ops were added or the changes run out. A change read is
// consumed, so the budget is checked once a change has been acted on.
func (l *loop[Obj]) collectChanges(changes iter.Seq2[statedb.Change[Obj], statedb.Revision], budget int, now time.Time) {
	added := 0
	for change, rev := range changes {
		l.r.lastRev = rev
		if l.collectChange(change, rev, now) {
			if added++; added >= budget {
				break
			}
		}
	}
}

// collectChange acts on one change and reports whether it added an op.
func (l *loop[Obj]) collectChange(change statedb.Change[Obj], rev statedb.Revision, now time.Time) bool {
	r, lc := l.r, l.r.keys
	j := task[Obj]{obj: change.Object, rev: change.Revision, delete: change.Deleted, since: now, ready: now.UnixNano()}
	if change.Deleted {
		if key, ok := r.primary.ObjectToKey(change.Object); ok {
			lc.sawDelete(key)
		}
	} else if st := r.getStatus(change.Object); !st.IsPendingOrRefreshing() {
		switch {
		case st.Kind != status.KindError && !lc.mayBeStale():
			return false // a Done, most often this reconciler's own: nothing to ask
		case l.own.has(rev):
			return false
		case l.stale(change.Object, st):
			// Put back with a status older than what is known of its key:
			// apply it as if Pending (see lifecycles.stale).
			j.obj, j.statusID = r.setStatus(r.clone(change.Object), status.PendingAt(now)), st.ID()
		case st.Kind == status.KindError && !st.Terminal:
			l.adopt(change.Object, rev, st, now)
			return false
		default:
			return false
		}
	} else {
		j.statusID, j.refresh = st.ID(), st.Kind == status.KindRefreshing
		if !st.UpdatedAt.IsZero() {
			j.since, j.ready = st.UpdatedAt, st.UpdatedAt.UnixNano()
		}
		if j.refresh || rev <= l.r.backlog {
			l.r.deferred.push(change.Object, rev)
			if lc.tracked() {
				if key, ok := r.keyOf(change.Object); ok {
					lc.dropRetry(key) // a newer version waits in the deferred queue
				}
			}
			return false
		}
	}
	if r.opts.concurrency == 1 && !lc.tracked() {
		l.work = append(l.work, op[Obj]{task: j}) // untracked: see keyState
		return true
	}
	key, ok := r.keyOf(change.Object)
	if !ok {
		r.noKey("a change of the table", change.Object)
		return false
	}
	if s := lc.observe(key, j); s != nil {
		l.start(s)
		return true
	}
	return false
}

// stale reports whether st, a status of obj that asks for no work, is
// older than what is known of obj's key (see lifecycles.stale).
func (l *loop[Obj]) stale(obj Obj, st status.Status) bool {
	lc := l.r.keys
	if !lc.mayBeStale() {
		return false
	}
	for _, p := range lc.pruned {
		if st.ID() != 0 && st.ID() <= p.cut {
			if _, _, found := l.r.lookup(p.txn, obj); !found {
				return true // the prune may have removed it (see pruneSnapshot)
			}
		}
	}
	key, ok := l.r.primary.ObjectToKey(obj)
	return ok && lc.stale(key, st.ID())
}

// adopt hands lifecycles.adopt an Error status found on obj.
func (l *loop[Obj]) adopt(obj Obj, rev statedb.Revision, st status.Status, now time.Time) {
	r := l.r
	key, ok := r.keyOf(obj)
	if !ok {
		r.noKey("an Error status", obj)
		return
	}
	since := st.UpdatedAt
	if since.IsZero() {
		since = now
	}
	j := task[Obj]{
		obj:      r.setStatus(r.clone(obj), status.PendingAt(since)),
		rev:      rev,
		statusID: st.ID(),
		since:    since,
		ready:    now.UnixNano(),
	}
	r.keys.adopt(key, j, st.ID(), errors.New(st.Error), now)
}

// collectRetries takes retries due at now, up to budget. A retry whose
// object changed since is dropped (see current).
func (l *loop[Obj]) collectRetries(txn statedb.ReadTxn, now time.Time, budget int) {
	lc := l.r.keys
	for added := 0; added < budget; {
		s, ok := lc.popDue(now.UnixNano())
		if !ok {
			return
		}
		lc.attempt(s)
		if !l.current(txn, s) {
			lc.forget(s)
			continue
		}
		l.start(s)
		added++
	}
}

// current reports whether the task of s, queued or due for a retry, is
// still what the table asks for, and if so brings its object up to date.
// Work queued before a stop, or a retry, may have been overtaken by a
// change not read yet: that change brings its own work, and the task is
// dropped. A delete is current while the key is absent; an update while
// the object carries the status the task answers, whatever else changed
// (another reconciler's status, say). The update is then applied to the
// object as it is in the table (Update may have modified it, and another
// reconciler may have written its own status since) but with this
// reconciler's status put back to the one that asked for the work, Pending
// or Refreshing, rather than the Error status a failure wrote: an
// operation that reads the status sees the same request on every attempt.
func (l *loop[Obj]) current(txn statedb.ReadTxn, s *keyState[Obj]) bool {
	r := l.r
	cur, rev, found := r.lookup(txn, s.task.obj)
	switch {
	case s.task.delete:
		return !found
	case !found:
		return false
	case r.getStatus(cur).ID() != s.task.statusID:
		if st := r.getStatus(cur); !st.IsPendingOrRefreshing() && st.ID() != 0 && st.ID() < s.task.statusID {
			// Written back with an older status over the version the
			// task is for, which may have been applied in part (cut
			// short by a stop, or failed): that object is new work when
			// its change is read, as it is when a commit finds it.
			if key, ok := r.primary.ObjectToKey(cur); ok {
				r.keys.sawOlder(key, s.task.statusID)
			}
		}
		return false
	case rev != s.task.rev:
		r.keys.retarget(s, r.setStatus(r.clone(cur), r.getStatus(s.task.obj)), rev)
	}
	return true
}

// collectDeferred takes up to budget deferred changes, oldest first,
// dropping those whose object has changed since (see deferredQueue).
func (l *loop[Obj]) collectDeferred(txn statedb.ReadTxn, now time.Time, budget int) {
	r, lc := l.r, l.r.keys
	for added := 0; added < budget && l.r.deferred.len() > 0; {
		d := l.r.deferred.pop()
		if _, rev, found := r.lookup(txn, d.obj); !found || rev != d.rev {
			continue
		}
		st := r.getStatus(d.obj)
		j := task[Obj]{obj: d.obj, rev: d.rev, statusID: st.ID(), since: st.UpdatedAt, refresh: st.Kind == status.KindRefreshing}
		if j.since.IsZero() {
			j.since = now
		}
		j.ready = j.since.UnixNano()
		if r.opts.concurrency == 1 && !lc.tracked() {
			l.work = append(l.work, op[Obj]{task: j})
			added++
			continue
		}
		key, ok := r.keyOf(d.obj)
		if !ok {
			r.noKey("a deferred change", d.obj)
			continue
		}
		if s := lc.observe(key, j); s != nil {
			l.start(s)
			added++
		}
	}
}

// deferredQueue holds the changes that wait behind fresh ones: objects
// marked Refreshing (by the refresh sweep or a dependency) and the backlog
// of Pending objects that were in the table when the reconcile job first ran.
// A deferred change is taken only if its object is still at the revision it
// was deferred at: if it changed since, the iterator brings the newer
// version in its own turn. It has no cap: its entries are two words each,
// and a cap would hold fresh changes back behind it. It is owned by the
// loop goroutine.
type deferredQueue[Obj any] struct {
	ring       []deferred[Obj]
	head, size int
}

type deferred[Obj any] struct {
	obj Obj
	rev statedb.Revision
}

func (q *deferredQueue[Obj]) len() int { return q.size }

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

// ownWrites remembers the revisions at which the loop's commits wrote
// statuses, so that collect can tell an Error status it wrote itself from
// one a user wrote back without looking the key up: in a retry storm those
// are most of the changes read. Every status a commit writes takes a
// revision within the commit's range, and nobody else writes the table in
// that transaction. The ranges are in increasing order, one per commit
// that wrote; a new run of the loop starts empty.
type ownWrites struct {
	ranges []revRange
}

type revRange struct{ lo, hi statedb.Revision }

// add records that a commit wrote the revisions lo to hi (both included),
// and forgets the ranges that changes up to read have passed.
func (w *ownWrites) add(lo, hi, read statedb.Revision) {
	w.forget(read)
	if n := len(w.ranges); n > 0 && w.ranges[n-1].hi+1 == lo {
		w.ranges[n-1].hi = hi
		return
	}
	w.ranges = append(w.ranges, revRange{lo, hi})
}

// has reports whether rev was written by a commit. Calls must come in
// increasing order of rev, as changes are read.
func (w *ownWrites) has(rev statedb.Revision) bool {
	w.forget(rev - 1)
	return len(w.ranges) > 0 && w.ranges[0].lo <= rev
}

// forget drops the ranges that end at or before rev.
func (w *ownWrites) forget(rev statedb.Revision) {
	i := 0
	for i < len(w.ranges) && w.ranges[i].hi <= rev {
		i++
	}
	if i > 0 {
		w.ranges = append(w.ranges[:0], w.ranges[i:]...)
	}
}

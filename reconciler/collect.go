package reconciler

import (
	"errors"
	"iter"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/status"
)

// collect is the first stage of a round: it turns up to budget changes of
// the table, then work carried over from an earlier run of the loop, then
// retries due at now and deferred changes (refresh marks and the backlog
// found at start; see deferredQueue) into l.work. Fresh changes thus never
// wait behind a burst of refreshes, a retry storm or a backlog for more
// than a round, and none of those waits forever behind the others. With no budget (every
// worker slot is taken) it reads nothing and leaves the changes for a later
// round.
func (l *loop[Obj]) collect(txn statedb.ReadTxn, now time.Time, budget int) {
	if budget <= 0 {
		l.watch = closedChan // look again as soon as there is room
		return
	}
	// Fresh changes come first but leave an eighth of the budget, when
	// there is other work, so that a stream of writes cannot starve it.
	// Retries and deferred changes share what is left, so that neither
	// starves the other.
	reserve := 0
	if at, ok := l.r.retries.next(); (ok && !at.After(now)) || l.deferred.len() > 0 || len(l.r.carried) > 0 {
		reserve = budget / 8
	}
	added := 0
	if !l.deferred.full() {
		var changes iter.Seq2[statedb.Change[Obj], statedb.Revision]
		changes, l.watch = l.changes.Next(txn)
		added = l.collectChanges(changes, budget-reserve, now)
	}
	added += l.collectCarried(txn, budget-added, now)
	deferredShare := min(l.deferred.len(), (budget-added+1)/2)
	retried := l.collectRetries(txn, now, budget-added-deferredShare)
	added += l.collectDeferred(txn, budget-added-retried, now)
	l.adds, l.retried = added+retried, retried
	if len(l.r.carried) > 0 || l.deferred.len() > 0 {
		l.watch = closedChan // more work for the next round
	}
}

// collectChanges reads changes, turning those that need work into ops,
// until budget ops were added or the changes run out. It records the last
// revision read in l.lastRev. now stands in for the time of a status
// written without one.
func (l *loop[Obj]) collectChanges(changes iter.Seq2[statedb.Change[Obj], statedb.Revision], budget int, now time.Time) (added int) {
	r := l.r
	needKeys := r.opts.concurrency > 1 // workers track flights by key
	for change, rev := range changes {
		l.lastRev = rev
		var st status.Status
		if !change.Deleted {
			st = r.getStatus(change.Object)
			if !st.IsPendingOrRefreshing() {
				if st.Kind == status.KindError && !st.Terminal && !l.own.has(rev) {
					l.adoptError(change.Object, rev, st, now)
				}
				continue
			}
			if st.Kind == status.KindRefreshing || rev <= l.backlog {
				l.deferred.push(change.Object, rev)
				r.supersede(change.Object, nil)
				if l.deferred.full() {
					break
				}
				continue
			}
		}
		o := op[Obj]{
			obj:      change.Object,
			rev:      rev,
			delete:   change.Deleted,
			statusID: st.ID(),
			since:    st.UpdatedAt,
			refresh:  st.Kind == status.KindRefreshing,
		}
		if o.since.IsZero() {
			o.since = now
		}
		o.ready = o.since.UnixNano()
		var key []byte
		if needKeys {
			key = r.keyBytes(change.Object)
			o.key = string(key)
		}
		r.supersede(change.Object, key)
		l.work = append(l.work, o)
		added++
		if added >= budget {
			break
		}
	}
	return added
}

// supersede drops what waits for an older version of obj's object: its
// queued retry and the work carried over for it. Every change read, fresh
// or deferred, does this. key is obj's primary key, or nil to compute it
// when there is something to drop.
func (r *reconciler[Obj]) supersede(obj Obj, key []byte) {
	if r.retries.len() == 0 && len(r.carried) == 0 {
		return
	}
	if key == nil {
		key = r.keyBytes(obj)
	}
	r.retries.removeKeyBytes(key)
	if len(r.carried) > 0 {
		delete(r.carried, string(key))
	}
}

// adoptError queues a retry, due at now, for obj, found in the table with
// the retryable Error status st, unless this reconciler already retries
// that status. Its own failures are always known; an unknown one was
// written back by a user after its retry was dropped (a revert, or the
// re-insert of an object read before a later attempt committed), or was in
// the table before the reconciler started. Left alone, such an object
// would stay failed for good. The attempt hands Update a Pending status.
func (l *loop[Obj]) adoptError(obj Obj, rev statedb.Revision, st status.Status, now time.Time) {
	r := l.r
	key := r.keyBytes(obj)
	if r.retries.knows(key, st.ID()) {
		return
	}
	if c, ok := r.carried[string(key)]; ok && c.statusID == st.ID() {
		return
	}
	since := st.UpdatedAt
	if since.IsZero() {
		since = now
	}
	r.retries.add(&retry[Obj]{
		key:      string(key),
		obj:      r.setStatus(r.clone(obj), status.PendingAt(since)),
		rev:      rev,
		statusID: st.ID(),
		since:    since,
		attempts: 1,
		err:      errors.New(st.Error),
		first:    since,
		at:       now,
	})
}

// collectRetries turns retries due at now into ops, up to budget.
func (l *loop[Obj]) collectRetries(txn statedb.ReadTxn, now time.Time, budget int) (added int) {
	r := l.r
	for added < budget {
		item, ok := r.retries.popDue(now)
		if !ok {
			break
		}
		if l.recheck(txn, item, item.at) {
			added++
		}
	}
	return added
}

// collectDeferred takes up to budget deferred changes, oldest first,
// dropping those whose object has changed since (see deferredQueue).
func (l *loop[Obj]) collectDeferred(txn statedb.ReadTxn, budget int, now time.Time) (added int) {
	r := l.r
	for added < budget && l.deferred.len() > 0 {
		d := l.deferred.pop()
		if _, rev, found := r.lookup(txn, d.obj); !found || rev != d.rev {
			continue
		}
		st := r.getStatus(d.obj)
		o := op[Obj]{obj: d.obj, rev: d.rev, statusID: st.ID(), since: st.UpdatedAt, refresh: st.Kind == status.KindRefreshing}
		if o.since.IsZero() {
			o.since = now
		}
		o.ready = o.since.UnixNano()
		if r.opts.concurrency > 1 || len(r.carried) > 0 {
			o.key = r.keyOf(d.obj)
			delete(r.carried, o.key)
		}
		l.work = append(l.work, o)
		added++
	}
	return added
}

// collectCarried takes up to budget of the ops that an earlier run of the
// loop had collected but not committed when it stopped (see carryOver).
func (l *loop[Obj]) collectCarried(txn statedb.ReadTxn, budget int, now time.Time) (added int) {
	r := l.r
	for key, item := range r.carried {
		if added >= budget {
			break
		}
		delete(r.carried, key)
		if l.recheck(txn, item, now) {
			added++
		}
	}
	return added
}

// recheck adds an op for item, a retry or a carried op, if it is still
// needed. It is dropped if its object changed, was deleted, or was
// re-inserted after a delete: the change that did it brings its own work.
//
// An update is retried on the object as it is in the table (Update may have
// modified it, and another reconciler may have written its own status since)
// but with this reconciler's status put back to the one that asked for the
// work, Pending or Refreshing, rather than the Error status the failure
// wrote: an operation that reads the status sees the same request on every
// attempt.
func (l *loop[Obj]) recheck(txn statedb.ReadTxn, item *retry[Obj], ready time.Time) bool {
	r := l.r
	cur, rev, found := r.lookup(txn, item.obj)
	o := op[Obj]{
		key:      item.key,
		since:    item.since,
		attempts: item.attempts,
		delete:   item.delete,
		ready:    ready.UnixNano(),
	}
	if item.delete {
		if found {
			return false
		}
		o.obj, o.rev = item.obj, item.rev
	} else {
		if !found || r.getStatus(cur).ID() != item.statusID {
			return false
		}
		asked := r.getStatus(item.obj)
		o.obj = r.setStatus(r.clone(cur), asked)
		o.rev, o.statusID, o.refresh = rev, item.statusID, asked.Kind == status.KindRefreshing
	}
	if o.attempts > 0 {
		r.retries.start(item)
	}
	l.work = append(l.work, o)
	return true
}

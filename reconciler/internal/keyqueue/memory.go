package keyqueue

// The verbs of the queue's other memory about keys: the changes deferred
// behind fresh ones (Add with Backlogged), the re-checks asked for (Done
// with Outcome.RecheckAt) and the cuts of the stale-status rule.

// Seen records that a change of key was read, a delete if deleted: the
// re-check asked for key, if any, is dropped (the change replaces it),
// and after a delete every status handed out so far, up to the identity
// last, is stale for the key (see Stale).
func (q *Queue[Obj]) Seen(key []byte, deleted bool, last uint64) {
	q.rechecks.drop(key)
	if deleted {
		q.cuts.sawDelete(key, last)
	}
}

// SawOlder records that a commit found the object of key written back
// with a status older than statusID, the identity of the status that
// asked for the version applied: every status before statusID is stale
// for the key (see Stale).
func (q *Queue[Obj]) SawOlder(key []byte, statusID uint64) { q.cuts.sawOlder(key, statusID) }

// TakeRechecks removes the re-checks due at now (Unix ns) and hands each
// to due.
func (q *Queue[Obj]) TakeRechecks(now int64, due func(obj Obj, statusID uint64)) {
	q.rechecks.takeDue(now, due)
}

// Undefer takes the oldest deferred change, if any (see Backlogged).
func (q *Queue[Obj]) Undefer() (Deferred[Obj], bool) {
	if q.deferred.size == 0 {
		return Deferred[Obj]{}, false
	}
	return q.deferred.pop(), true
}

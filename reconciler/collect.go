package reconciler

import (
	"iter"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/status"
)

// collectChanges reads changes of the table, turning those that need work
// into ops handed to add, until budget ops were added or the changes run out.
// It records the last revision read in l.lastRev. now stands in for the
// time of a status written without one.
func (l *loop[Obj]) collectChanges(changes iter.Seq2[statedb.Change[Obj], statedb.Revision], budget int, now time.Time) (added int) {
	r := l.r
	for change, rev := range changes {
		l.lastRev = rev
		var st status.Status
		if !change.Deleted {
			st = r.getStatus(change.Object)
			if !st.IsPendingOrRefreshing() {
				continue
			}
		}
		o := op[Obj]{
			obj:      change.Object,
			rev:      rev,
			delete:   change.Deleted,
			statusID: st.ID(),
			since:    st.UpdatedAt,
		}
		if o.since.IsZero() {
			o.since = now
		}
		if l.needKeys {
			o.key = string(r.primary.ObjectToKey(change.Object))
			r.retries.removeKey(o.key)
		} else if r.retries.len() > 0 {
			// A new version supersedes the queued retry of an older one.
			r.retries.removeKeyBytes(r.primary.ObjectToKey(change.Object))
		}
		l.add(o)
		added++
		if added >= budget {
			break
		}
	}
	return added
}

// collectRetries turns retries due at now into ops, up to budget. A retry
// whose object changed, was deleted, or was re-inserted after a delete is
// dropped: the change that did it brings its own work.
func (l *loop[Obj]) collectRetries(txn statedb.ReadTxn, now time.Time, budget int) (added int) {
	r := l.r
	for added < budget {
		item, ok := r.retries.popDue(now)
		if !ok {
			break
		}
		cur, rev, found := r.table.Get(txn, r.primary.QueryFromObject(item.obj))
		o := op[Obj]{
			key:      item.key,
			since:    item.since,
			attempts: item.attempts,
			delete:   item.delete,
		}
		if item.delete {
			if found {
				continue
			}
			o.obj, o.rev = item.obj, item.rev
		} else {
			if !found || r.getStatus(cur).ID() != item.statusID {
				continue
			}
			o.obj, o.rev, o.statusID = cur, rev, item.statusID
		}
		l.add(o)
		added++
	}
	return added
}

package reconciler

import (
	"iter"

	"github.com/cilium/statedb"
)

// changeFeed reads the changes of one table for as long as the reconciler
// lives, across stops and starts of the hive, while holding a StateDB
// change iterator only when its job runs.
//
// The job opens the feed when it starts and closes it when it stops, on its
// own goroutine: an iterator left to a runtime cleanup would be closed on
// another goroutine (fatal inside a testing/synctest bubble), and one kept
// open while stopped would hold every deleted object of the table. What is
// deleted while no iterator is open is recovered when the next one opens:
// the feed holds the table as it was when the last iterator closed (a
// snapshot costs nothing to hold), and a key found there but gone from the
// table is handed out as a delete. Upserts need no such care: a new
// iterator hands out every object, and those at or below the revision
// already read are skipped.
//
// Recovered deletes come first, with the revision just after the
// snapshot's. By the time one is read its key may be back in the table:
// the object put back is then newer than the delete (see recovered).
//
// Make one with newChangeFeed, at registration, so that deletes before the
// first start are not missed; one goroutine uses it at a time.
type changeFeed[Obj any] struct {
	db    *statedb.DB
	table statedb.Table[Obj]

	iter    statedb.ChangeIterator[Obj] // nil while closed
	read    statedb.Revision            // every change up to it was handed out
	drained statedb.Revision            // every write up to it was handed out (see drainedTo)
	opened  statedb.Revision            // the table's revision when iter opened
	floor   statedb.Revision            // upserts at or below it were read before iter opened
	held    statedb.ReadTxn             // while closed: the table as of the last iterator's end
	missed  []statedb.Change[Obj]       // deletes to hand out before iter's changes
	missedN int                         // how many of missed were handed out
}

// newChangeFeed begins a feed of table's changes: every object then in the
// table, and every change from then on, is handed out once the feed opens.
func newChangeFeed[Obj any](db *statedb.DB, table statedb.Table[Obj]) *changeFeed[Obj] {
	return &changeFeed[Obj]{db: db, table: table, held: db.ReadTxn()}
}

// open starts a StateDB change iterator and finds what was deleted while
// the feed was closed. It returns the table's revision when it opened.
func (f *changeFeed[Obj]) open() (statedb.Revision, error) {
	if f.iter != nil {
		return f.read, nil
	}
	wtxn := f.db.WriteTxn(f.table)
	it, err := f.table.Changes(wtxn)
	now := wtxn.Commit()
	if err != nil {
		return 0, err
	}
	f.iter, f.floor, f.opened = it, f.read, f.table.Revision(now)
	f.missed = append(f.missed, f.gone(f.held, now)...)
	f.held = nil
	return f.opened, nil
}

// gone returns a delete for every object of before whose key now lacks.
func (f *changeFeed[Obj]) gone(before, now statedb.ReadTxn) []statedb.Change[Obj] {
	if before == nil || f.table.NumObjects(before) == 0 || f.table.Revision(before) == f.table.Revision(now) {
		return nil
	}
	var deletes []statedb.Change[Obj]
	after := f.table.Revision(before) + 1
	primary := f.table.PrimaryIndexer()
	for obj := range f.table.All(before) {
		q, ok := primary.QueryFromObject(obj)
		if !ok {
			continue
		}
		if _, _, found := f.table.Get(now, q); !found {
			deletes = append(deletes, statedb.Change[Obj]{Object: obj, Revision: after, Deleted: true})
		}
	}
	return deletes
}

// next returns the changes not handed out yet, as of txn, and a channel
// closed when there are more. A change handed out is consumed, whether or
// not the reader goes on. Beside each change it yields the revision read so
// far (for a recovered delete, not the delete's own), which a reader may
// follow without passing a change it has not read. The feed must be open.
func (f *changeFeed[Obj]) next(txn statedb.ReadTxn) (iter.Seq2[statedb.Change[Obj], statedb.Revision], <-chan struct{}) {
	changes, watch := f.iter.Next(txn)
	if len(f.missed) > 0 {
		watch = closedChan // the reader may stop before the iterator's changes
	}
	return func(yield func(statedb.Change[Obj], statedb.Revision) bool) {
		for f.missedN < len(f.missed) {
			change := f.missed[f.missedN]
			f.missed[f.missedN] = statedb.Change[Obj]{}
			f.missedN++
			if f.missedN == len(f.missed) {
				f.missed, f.missedN = nil, 0
			}
			if !yield(change, f.read) {
				return
			}
		}
		for change, rev := range changes {
			if !change.Deleted && rev <= f.floor {
				continue // read by an earlier iterator
			}
			f.read = rev
			if !yield(change, rev) {
				return
			}
		}
		// Every change up to the revision at the open was handed out:
		// the iterator's objects and the deletes found missing. A delete
		// made before the open is not in the iterator, and may be the
		// table's last change.
		f.read = max(f.read, f.opened)
		f.drained = max(f.drained, f.table.Revision(txn))
	}, watch
}

// recovered reports whether change, handed out by next beside rev, is a
// delete recovered when the feed opened. Its key may have been put back
// since: the iterator hands out the object put back after it.
func recovered[Obj any](change statedb.Change[Obj], rev statedb.Revision) bool {
	return change.Deleted && rev < change.Revision
}

// position returns the revision up to which every change was handed out.
func (f *changeFeed[Obj]) position() statedb.Revision { return f.read }

// drainedTo returns the revision up to which every write was handed out:
// the table's revision in the last read that went to the end of its
// changes. It is below position while a read stopped short: StateDB hands
// out only the newest version of an object, so an object written at or
// below position and again after it comes with that later write, which a
// read that stopped short has not reached yet.
func (f *changeFeed[Obj]) drainedTo() statedb.Revision { return f.drained }

// close reads the deletes the iterator still holds, keeps them for the next
// open with the table as of that read, and closes the iterator. Upserts
// are left: the next iterator hands them out again.
func (f *changeFeed[Obj]) close() {
	if f.iter == nil {
		return
	}
	txn := f.db.ReadTxn()
	changes, _ := f.iter.Next(txn)
	for change := range changes {
		if change.Deleted {
			f.missed = append(f.missed, change)
		}
	}
	f.iter.Close()
	f.iter, f.held = nil, txn
}

// closedChan is a closed channel: receiving from it never blocks.
var closedChan = func() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// deferredQueue holds the changes that wait behind fresh ones: objects
// marked Refreshing (by the refresh sweep or a dependency) and the backlog
// of Pending objects that were in the table when the reconcile job first ran.
// A deferred change is taken as its object now is, if that still asks for
// work (see collectDeferred). It has no cap: its entries are two words each,
// and a cap would hold fresh changes back behind it. It is owned by the
// loop goroutine.
type deferredQueue[Obj any] struct {
	ring       []deferred[Obj]
	head, size int
}

type deferred[Obj any] struct {
	obj   Obj
	rev   statedb.Revision // the object's, when deferred
	asked statedb.Revision // the first revision the change stands for (see task.asked)
}

func (q *deferredQueue[Obj]) len() int { return q.size }

// push defers a change.
func (q *deferredQueue[Obj]) push(obj Obj, rev, asked statedb.Revision) {
	if q.size == len(q.ring) {
		grown := make([]deferred[Obj], max(2*len(q.ring), 64))
		for i := range q.size {
			grown[i] = q.ring[(q.head+i)%len(q.ring)]
		}
		q.ring, q.head = grown, 0
	}
	q.ring[(q.head+q.size)%len(q.ring)] = deferred[Obj]{obj, rev, asked}
	q.size++
}

// pop takes the oldest deferred change.
func (q *deferredQueue[Obj]) pop() deferred[Obj] {
	d := q.ring[q.head]
	q.ring[q.head] = deferred[Obj]{}
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
func (q *deferredQueue[Obj]) lowRev() statedb.Revision {
	if q.size == 0 {
		return 0
	}
	return q.ring[q.head].asked
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

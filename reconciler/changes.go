package reconciler

import (
	"iter"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/status"
)

// feed is the reconciler's change feed: the table's changes, across stops,
// and what the loop keeps of reading them. Its zero value is not usable:
// Register sets changes. The reconcile job's goroutine owns it.
type feed[Obj any] struct {
	changes *changeFeed[Obj] // the table's changes, across stops
	lastRev statedb.Revision // last change read
	backlog statedb.Revision // the table's revision when the job first ran: what is deferred
	started bool             // whether the job has run

	// The state of one run of the reconcile job, reset when it opens the
	// feed.
	own   ownWrites       // revisions of the statuses commits wrote
	watch <-chan struct{} // closed when the table has changes not read
	work  []op[Obj]       // collect's buffer
	// figures is collect's copy of the key queue's figures while it reads
	// changes, read again whenever a change alters the queue (see
	// collectChange).
	figures keyqueue.Figures
}

// open opens the table's changes for a run of the reconcile job (see
// changeFeed.open) and readies the run's state. At the first open, what
// the table holds is the backlog: it waits behind fresh changes.
func (f *feed[Obj]) open() error {
	opened, err := f.changes.open()
	if err != nil {
		return err
	}
	if !f.started {
		f.started, f.backlog = true, opened
	}
	f.own, f.watch, f.work = ownWrites{}, closedChan, nil
	return nil
}

// changeFeed hands out the changes of one table for as long as the
// reconciler lives, holding a StateDB change iterator only while the job
// runs (open to close, on the job's goroutine). Deletes made while it is
// closed are recovered at the next open from the snapshot kept at close,
// and handed out first (see open and gone). Make one with newChangeFeed at
// registration; one goroutine uses it at a time.
type changeFeed[Obj any] struct {
	db    *statedb.DB
	table statedb.Table[Obj]

	iter statedb.ChangeIterator[Obj] // nil while closed
	// Every change up to read was handed out, and every write up to
	// drained: a read that stops short leaves drained behind, since an
	// object written below read and again after it comes only with its
	// later write.
	read    statedb.Revision
	drained statedb.Revision
	opened  statedb.Revision      // the table's revision when iter opened
	floor   statedb.Revision      // upserts at or below it were read before iter opened
	held    statedb.ReadTxn       // while closed: the table as of the last iterator's end
	missed  []statedb.Change[Obj] // deletes to hand out before iter's changes
	missedN int                   // how many of missed were handed out
	// statusOf, while set, reads an upsert's status: next passes over
	// those whose status asks for nothing (see quiet), as read, without
	// handing them out. The reader sets it while it would drop them
	// itself, unlooked at (see reconciler.skipQuiet): on a restart nearly
	// every change, which then costs what the StateDB reconciler's does.
	statusOf func(Obj) status.Status
}

// newChangeFeed begins a feed of table's changes: every object then in the
// table, and every change from then on, is handed out once the feed opens.
func newChangeFeed[Obj any](db *statedb.DB, table statedb.Table[Obj]) *changeFeed[Obj] {
	return &changeFeed[Obj]{db: db, table: table, held: db.ReadTxn()}
}

// open starts a StateDB change iterator and finds what was deleted while
// the feed was closed. An iterator must be closed on the goroutine that
// opened it (a runtime cleanup closing it elsewhere is fatal inside a
// testing/synctest bubble), and one kept open while stopped would hold
// every deleted object. It returns the table's revision when it opened.
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

// gone returns a delete for every object of before whose key now lacks,
// at the revision just after before's. Upserts need no such care: a new
// iterator hands out every object, and those read before are skipped.
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
			if !change.Deleted {
				if rev <= f.floor {
					continue // read by an earlier iterator
				}
				if f.statusOf != nil && quiet(f.statusOf(change.Object)) {
					f.read = rev
					continue
				}
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

// wrote records that a commit wrote the statuses at the revisions w (none
// if w is zero): their changes are the loop's own (see ownWrites).
func (f *feed[Obj]) wrote(w revRange) {
	if w.hi > 0 {
		f.own.add(w.lo, w.hi, f.lastRev)
	}
}

// closedChan is a closed channel: receiving from it never blocks.
var closedChan = func() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

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
	if len(w.ranges) > 0 {
		w.forget(read)
	}
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

// quiet reports whether st asks for nothing: neither Pending, Refreshing
// nor Error (Done, or unset).
func quiet(st status.Status) bool {
	return st.Kind != status.KindPending && st.Kind != status.KindRefreshing && st.Kind != status.KindError
}

// Package changes hands out the changes of one StateDB table for as long
// as a reconciler lives, across the stops and starts of its job, deletes
// made while it was stopped included. See [Feed].
package changes

import (
	"iter"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/status"
)

// Feed hands out the changes of one table for as long as the reconciler
// lives, holding a StateDB change iterator only while the job runs (Open
// to Close, on the job's goroutine). Deletes made while it is closed are
// recovered at the next Open from the snapshot kept at Close, and handed
// out first (see Open). Make one with New at registration; the zero value
// is not usable. A Feed is not safe for concurrent use: one goroutine uses
// it at a time.
type Feed[Obj any] struct {
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
	// statusOf, while set, reads an upsert's status: Next passes over
	// those whose status asks for nothing (see Quiet), as read, without
	// handing them out (see PassOverQuiet).
	statusOf func(Obj) status.Status
	// own, while statusOf is set, tells the revisions the reader wrote
	// itself: Next passes over those too, without reading their status
	// (see PassOverOwn).
	own func(statedb.Revision) bool
}

// New begins a feed of table's changes: every object then in the table,
// and every change from then on, is handed out once the feed opens.
func New[Obj any](db *statedb.DB, table statedb.Table[Obj]) *Feed[Obj] {
	return &Feed[Obj]{db: db, table: table, held: db.ReadTxn()}
}

// Open starts a StateDB change iterator and finds what was deleted while
// the feed was closed. An iterator must be closed on the goroutine that
// opened it (a runtime cleanup closing it elsewhere is fatal inside a
// testing/synctest bubble), and one kept open while stopped would hold
// every deleted object. It returns the table's revision when it opened.
func (f *Feed[Obj]) Open() (statedb.Revision, error) {
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
func (f *Feed[Obj]) gone(before, now statedb.ReadTxn) []statedb.Change[Obj] {
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

// Next returns the changes not handed out yet, as of txn, and a channel
// closed when there are more. A change handed out is consumed, whether or
// not the reader goes on. Beside each change it yields the revision read so
// far (for a recovered delete, not the delete's own), which a reader may
// follow without passing a change it has not read. The feed must be open.
func (f *Feed[Obj]) Next(txn statedb.ReadTxn) (iter.Seq2[statedb.Change[Obj], statedb.Revision], <-chan struct{}) {
	changes, watch := f.iter.Next(txn)
	if len(f.missed) > 0 {
		watch = closed // the reader may stop before the iterator's changes
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
				if f.statusOf != nil && ((f.own != nil && f.own(rev)) || Quiet(f.statusOf(change.Object))) {
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

// Close reads the deletes the iterator still holds, keeps them for the next
// open with the table as of that read, and closes the iterator. Upserts
// are left: the next iterator hands them out again.
func (f *Feed[Obj]) Close() {
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

// Quiet reports whether st asks for nothing: neither Pending, Refreshing
// nor Error (Done, or unset).
func Quiet(st status.Status) bool {
	return st.Kind != status.KindPending && st.Kind != status.KindRefreshing && st.Kind != status.KindError
}

// Read is the revision of the last change handed out, or passed over.
func (f *Feed[Obj]) Read() statedb.Revision { return f.read }

// Drained is the table's revision as of the last read that handed out
// every change: every write up to it was handed out, or passed over.
func (f *Feed[Obj]) Drained() statedb.Revision { return f.drained }

// PassOverQuiet makes Next pass over, as read and without handing them
// out, the upserts whose status (read with statusOf) asks for nothing
// (see Quiet); nil hands out every change. A reader sets it while it would
// drop them itself, unlooked at: on a restart that finds every object
// Done, nearly every change, which then costs what a bare StateDB change
// iterator's does.
func (f *Feed[Obj]) PassOverQuiet(statusOf func(Obj) status.Status) { f.statusOf = statusOf }

// PassOverOwn makes Next, while it passes over quiet upserts, pass over
// those at the revisions own reports too, without reading their status:
// a reader's own status writes, whose status is the one it wrote and asks
// for nothing of it. own is called in increasing order of revision; nil
// reads every status.
func (f *Feed[Obj]) PassOverOwn(own func(statedb.Revision) bool) { f.own = own }

// PassingOverQuiet reports whether Next passes over quiet upserts (see
// PassOverQuiet).
func (f *Feed[Obj]) PassingOverQuiet() bool { return f.statusOf != nil }

// closed is a closed channel: receiving from it never blocks.
var closed = func() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

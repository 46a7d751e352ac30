package reconciler

import (
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/changes"
	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/reconciler/internal/work"
)

// feed is the reconciler's change feed: the table's changes, across stops,
// and what the loop keeps of reading them. Its zero value is not usable:
// Register sets changes. The reconcile job's goroutine owns it.
type feed[Obj any] struct {
	changes *changes.Feed[Obj] // the table's changes, across stops
	lastRev statedb.Revision   // last change read
	backlog statedb.Revision   // the table's revision when the job first ran: what is deferred
	started bool               // whether the job has run

	// The state of one run of the reconcile job, reset when it opens the
	// feed.
	own   ownWrites       // revisions of the statuses commits wrote
	watch <-chan struct{} // closed when the table has changes not read
	work  []work.Op[Obj]  // collect's buffer
	// reserve is collect's share of rounds for retries and deferred
	// changes, carried from round to round.
	reserve reserve
	// figures is collect's copy of the key queue's figures while it reads
	// changes, read again whenever a change alters the queue (see
	// collectChange).
	figures keyqueue.Figures
}

// open opens the table's changes for a run of the reconcile job (see
// changeFeed.open) and readies the run's state. At the first open, what
// the table holds is the backlog: it waits behind fresh changes.
func (f *feed[Obj]) open() error {
	opened, err := f.changes.Open()
	if err != nil {
		return err
	}
	if !f.started {
		f.started, f.backlog = true, opened
	}
	f.own, f.watch, f.work = ownWrites{}, closedChan, nil
	return nil
}

// wrote records that a commit wrote the statuses at the revisions lo to hi:
// their changes are the loop's own (see ownWrites).
func (f *feed[Obj]) wrote(lo, hi statedb.Revision) {
	f.own.add(lo, hi, f.lastRev)
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

// reserve is the room of rounds kept for retries and deferred changes
// while there are any: an eighth, counted over successive rounds, so that
// rounds of fewer than eight objects keep it too (one round of one object
// in eight).
type reserve struct{ owed float64 }

// take returns the reserve of a round with room left.
func (v *reserve) take(left int) int {
	v.owed += float64(left) / 8
	n := min(int(v.owed), left)
	v.owed -= float64(n)
	return n
}

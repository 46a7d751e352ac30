package reconciler

import "github.com/cilium/statedb"

// ownWrites remembers the revisions at which the loop's commits wrote
// statuses, so that collect can tell a change it made itself from one a
// user made without looking the object up. Every status a commit writes
// takes a revision of the table within the commit's range, and nobody else
// writes the table in that transaction.
//
// Collect reads its own Error statuses back in the changes, after each
// commit, and in a retry storm those are most of the changes: tens of
// thousands of them can come in one round after the reconciler has lagged.
// A status the loop wrote has a retry already (or needs none), so only the
// others go through adoptError and its lookups.
//
// The ranges are in increasing order, one per commit that wrote. It is
// owned by the loop's goroutine; a new run of the loop starts empty, and
// then every Error change takes the exact, slower path.
type ownWrites struct {
	ranges []revRange
}

type revRange struct{ lo, hi statedb.Revision }

// add records that a commit wrote the revisions lo to hi (both included),
// and forgets the ranges that changes up to read (the last revision
// collect has read) have passed.
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

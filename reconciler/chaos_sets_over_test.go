package reconciler_test

// The write over a changed object in a "-sets" run, aimed at the redo
// after a Retire (issue 49). When another writer changes an object while
// a name's update of it runs, but keeps that name's status (a Retire of
// another name, an identical re-insert), the name's status is written
// over the newer object rather than the update redone. With the names'
// statuses written together (reconciler/internal/groupcommit), a name
// whose entries the group's write checked may go on before that write
// commits; until it does, the other writer's change reads as the version
// just applied, Pending as it was, and the name applied it again. The
// checks of the run (each status identity applied at most as often as it
// was written, chaosOps.count) catch such a redo.
//
// overMove, before one step in chaosOverOdds of a run with three names or
// more, holds name x's update of k, lets the others settle k, writes into
// k an entry of a name nobody serves (every running name's status kept,
// as a Retire keeps them), then holds two other names' updates of j once
// applied, and lets the three go at once with the set index slow (each
// object write waits a while, as a user's index function may): x's status
// of k is written over the changed object in the same write as the
// others' statuses of j, which the slow index keeps from committing while
// x reads its next changes. It draws from an RNG of its own, so that the
// rest of a seed's schedule stays as it was.

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/status"
)

// chaosOverOdds: one step in chaosOverOdds of a "-sets" run with three
// names or more is an over move.
const chaosOverOdds = 12

// chaosSlowIndex is the set index's delay while an over move turns it on.
type chaosSlowIndex struct{ on atomic.Bool }

// kind is setKind, slowed while on.
func (s *chaosSlowIndex) kind(it *item) status.Status {
	if s.on.Load() {
		<-time.After(time.Millisecond) // the index function's own work: any length is a valid schedule
	}
	return setKind(it)
}

func newOverRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x0e7e5)) }

// overMove is the over move (see the top of the file).
func (r *chaosRun) overMove() {
	s := r.sets
	if s == nil || len(r.recs) < 3 || s.over.IntN(chaosOverOdds) != 0 {
		return
	}
	if why := r.unquiet(); why != "" {
		r.logf("no over move: %s", why)
		return
	}
	defer r.calm()()
	perm := s.over.Perm(len(r.recs))
	x, y, z := r.recs[perm[0]], r.recs[perm[1]], r.recs[perm[2]]
	k := fmt.Sprintf("k%02d", s.over.IntN(chaosKeys))
	j := k
	for j == k {
		j = fmt.Sprintf("k%02d", s.over.IntN(chaosKeys))
	}
	hx := x.target.hold(k, false)
	defer x.target.release(hx)
	r.overSet(k, fmt.Sprintf(", %supdate held for a write over it", x.label()))
	if !closedWithin(hx.started, 50*time.Millisecond) {
		r.logf("%s: %snot in flight, no write over it", k, x.label())
		return
	}
	if !r.waitTableFor(100*time.Millisecond, func(txn statedb.ReadTxn) bool {
		o, _, ok := r.gen.table.Get(txn, itemID.Query(k))
		return ok && y.getStatus(o).Kind == status.KindDone && z.getStatus(o).Kind == status.KindDone
	}) {
		r.logf("%s: not settled by %sand %s, no write over it", k, y.label(), z.label())
		return
	}
	r.ghostEntry(k, true)
	defer r.ghostEntry(k, false)
	hy, hz := y.target.hold(j, true), z.target.hold(j, true)
	defer y.target.release(hy)
	defer z.target.release(hz)
	r.overSet(j, fmt.Sprintf(", %sand %supdates held once applied", y.label(), z.label()))
	if !closedWithin(hy.started, 50*time.Millisecond) || !closedWithin(hz.started, 50*time.Millisecond) {
		r.logf("%s: not in flight for both, no shared write", j)
		return
	}
	s.slow.on.Store(true)
	defer s.slow.on.Store(false)
	x.target.release(hx)
	y.target.release(hy)
	z.target.release(hz)
	settled := r.waitTableFor(200*time.Millisecond, func(txn statedb.ReadTxn) bool {
		o, _, ok := r.gen.table.Get(txn, itemID.Query(k))
		return ok && x.getStatus(o).Kind == status.KindDone
	})
	r.logf("%s: %sreleased with %s's and %s's updates of %s, the index slow: %s Done %v", k, x.label(), y.name, z.name, j, x.name, settled)
}

// chaosGhost is the name of a status.Set entry no reconciler of a "-sets"
// run serves: an over move writes one, Done, to change an object but no
// running name's status, as a Retire of a name does, and removes it.
const chaosGhost = "ghost"

// ghostEntry writes key's object with a Done entry of chaosGhost (add) or
// without one, every other entry as it is.
func (r *chaosRun) ghostEntry(key string, add bool) {
	wtxn := r.gen.db.WriteTxn(r.gen.table)
	defer wtxn.Abort()
	obj, _, found := r.gen.table.Get(wtxn, itemID.Query(key))
	if !found {
		return
	}
	c := obj.clone()
	if add {
		c.Statuses = c.Statuses.Set(chaosGhost, status.Done())
	} else {
		c.Statuses = c.Statuses.Delete(chaosGhost)
	}
	_, _, err := r.gen.table.Insert(wtxn, c)
	require.NoError(r.t, err)
	r.setsWrote(wtxn, []chaosChange{{key: key}})
	r.logf("@%d %s=%s with the entry of %s %s (%s)", r.gen.table.Revision(wtxn), key, obj.Value, chaosGhost,
		map[bool]string{true: "added", false: "removed"}[add], r.statuses(obj))
	wtxn.Commit()
}

// overSet writes key a new value, of the over moves' own.
func (r *chaosRun) overSet(key, why string) {
	r.sets.overValues++
	v := fmt.Sprintf("o%d.%d", r.gens, r.sets.overValues) // r.value() would draw from the run's RNG
	main := r.rng
	r.rng = r.sets.over // write draws, for a set, whether the new object keeps the old one's entries
	rev := r.write(chaosChange{key: key, value: v})
	r.rng = main
	r.logf("@%d set %s=%s%s", rev, key, v, why)
}

// waitTableFor waits up to d, on the table's watch channel, until cond
// holds.
func (r *chaosRun) waitTableFor(d time.Duration, cond func(statedb.ReadTxn) bool) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		txn := r.gen.db.ReadTxn()
		_, watch := r.gen.table.AllWatch(txn)
		if cond(txn) {
			return true
		}
		select {
		case <-watch:
		case <-deadline.C:
			return false
		}
	}
}

package reconciler_test

// The chaos test's generator: each step draws a move from the run's
// seeded RNG (see chaosRun.step). A move must draw from r.rng in the same
// order for a seed, so that a seed keeps meaning the same schedule.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/status"
)

func (r *chaosRun) key() string { return fmt.Sprintf("k%02d", r.rng.IntN(chaosKeys)) }

func (r *chaosRun) value() string {
	r.values++
	switch n := r.rng.IntN(40); {
	case n < 4:
		return fmt.Sprintf("poison-%d.%d", r.gens, r.values)
	case n == 4:
		return fmt.Sprintf("later-%d.%d", r.gens, r.values)
	}
	return fmt.Sprintf("v%d.%d", r.gens, r.values)
}

func (r *chaosRun) step() {
	switch p := r.rng.IntN(109); {
	case p < 28: // insert or update
		k := r.key()
		v := r.value()
		if old, ok := r.current(k); ok && r.rng.IntN(8) == 0 {
			v = old // same value, new Pending status
		}
		rev := r.write(chaosChange{key: k, value: v})
		r.logf("@%d set %s=%s", rev, k, v)
	case p < 38: // delete
		k := r.key()
		rev := r.write(chaosChange{key: k})
		r.logf("@%d delete %s", rev, k)
	case p < 46: // a transaction of several changes, possibly of one key
		n := 2 + r.rng.IntN(7)
		changes := make([]chaosChange, n)
		words := make([]string, n)
		for i := range changes {
			changes[i].key = r.key()
			switch r.rng.IntN(4) {
			case 0: // delete
			case 1:
				changes[i].obj = r.earlier(changes[i].key)
			}
			if changes[i].obj == nil && r.rng.IntN(3) > 0 {
				changes[i].value = r.value()
			}
			words[i] = changes[i].key + "=" + changes[i].value
			if changes[i].obj != nil {
				words[i] = changes[i].key + "=" + changes[i].obj.Value + " (revert)"
			}
		}
		rev := r.write(changes...)
		r.logf("@%d txn %s", rev, strings.Join(words, " "))
	case p < 51: // delete then re-insert, in two transactions
		k := r.key()
		rev := r.write(chaosChange{key: k})
		r.logf("@%d delete %s", rev, k)
		r.keyMove(k, r.rng.IntN(2)+1)
	case p < 56: // revert, re-insert the object as it is, or put it back after a delete
		r.keyMove(r.key(), 2+r.rng.IntN(3))
	case p < 64:
		switch r.rng.IntN(4) {
		case 0:
			r.writeBackAfterPrune()
		case 1:
			r.putBackOverAHeldDelete()
		case 2:
			r.putBackAfterARestart()
		default:
			r.scenario()
		}
	case p < 68:
		switch r.rng.IntN(4) {
		case 0:
			r.pruneWhileBusy()
			return
		case 1:
			r.twoPrunesWhileSaturated()
			return
		}
		if !r.manualPrune {
			r.logf("(no Prune() in this seed)")
			return
		}
		i := r.rng.IntN(len(r.recs))
		r.gen.recs[i].Prune()
		r.logf("%sPrune()", r.recs[i].label())
	case p < 82: // let a reconciler catch up with the current revision, or not
		i := r.rng.IntN(len(r.recs))
		rev := r.gen.table.Revision(r.gen.db.ReadTxn())
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+r.rng.IntN(20))*time.Millisecond)
		reached, low, err := r.gen.recs[i].WaitUntilReconciled(ctx, rev)
		cancel()
		r.logf("%swait for @%d: reached @%d, retry low @%d, err=%v", r.recs[i].label(), rev, reached, low, err)
		r.checkTable()
		if err == nil && reached >= rev && low == 0 {
			r.checkDoneApplied(i, rev)
		}
	case p < 95: // wait for some operations on a target
		i := r.rng.IntN(len(r.recs))
		n := 1 + r.rng.IntN(10)
		r.waitCalls(r.recs[i].target, n, 10*time.Millisecond)
		r.logf("%swait for %d calls", r.recs[i].label(), n)
	case p < 101: // change what objects depend on
		d := fmt.Sprintf("d%d", r.rng.IntN(chaosDeps))
		wtxn := r.gen.db.WriteTxn(r.gen.deps)
		var err error
		if r.rng.IntN(4) == 0 {
			_, _, err = r.gen.deps.Delete(wtxn, &chaosDep{ID: d})
			r.logf("delete dependency %s", d)
		} else {
			v := r.value()
			_, _, err = r.gen.deps.Insert(wtxn, &chaosDep{ID: d, Value: v})
			r.logf("set dependency %s=%s", d, v)
		}
		wtxn.Commit()
		require.NoError(r.t, err)
		r.depChangedAt[d] = len(r.steps)
	case p < 104: // pause, or resume
		if !r.gen.paused && r.rng.IntN(2) == 0 {
			if r.rng.IntN(2) == 0 {
				r.pauseWhileBusy()
			} else {
				r.pauseFromAnOperation()
			}
			return
		}
		r.setPaused(!r.gen.paused)
	default:
		if r.restarts >= chaosMaxRestarts {
			r.logf("(no restart: limit reached)")
			return
		}
		r.restarts++
		r.checkTable()
		if r.rng.IntN(2) == 0 {
			r.restartInPlace()
			return
		}
		desired := maps.Clone(r.model)
		r.stopGen()
		r.startGen(desired)
		r.logf("restart as generation %d with %s", r.gens, describe(desired))
	}
}

// earlier returns an object the test inserted for key in this generation,
// as it was inserted (status identity included), or nil.
func (r *chaosRun) earlier(key string) *item {
	objs := r.written[key]
	if len(objs) == 0 {
		return nil
	}
	return objs[r.rng.IntN(len(objs))]
}

// keyMove makes one change to key: 0 delete, 1 a new value, 2 a revert to
// an earlier value, 3 an identical re-insert of the object as it is now,
// 4 a delete and then the object put back as it was before it.
func (r *chaosRun) keyMove(key string, move int) {
	switch move {
	case 0:
		rev := r.write(chaosChange{key: key})
		r.logf("@%d delete %s", rev, key)
		return
	case 4:
		if obj, _, found := r.gen.table.Get(r.gen.db.ReadTxn(), itemID.Query(key)); found {
			r.putBackAfterDelete(key, obj)
			return
		}
	case 2:
		if obj := r.earlier(key); obj != nil {
			rev := r.write(chaosChange{key: key, obj: obj})
			r.logf("@%d revert %s=%s (%s)", rev, key, obj.Value, r.statuses(obj))
			return
		}
	case 3:
		if obj, _, found := r.gen.table.Get(r.gen.db.ReadTxn(), itemID.Query(key)); found {
			// Sometimes the object as read some steps ago, statuses
			// included: a read-modify-write that spans transactions
			// writes back statuses that reconcilers have replaced. Not a
			// Done status: no reconciler can tell a stale Done from a
			// true one without remembering every object it applied. (A
			// write-back may also undo a dependency's mark; see
			// writeBackUndoesMark.)
			if old := r.read[key]; old != nil && !r.anyDone(old) && r.rng.IntN(2) == 0 {
				r.read[key] = obj
				rev := r.write(chaosChange{key: key, obj: old})
				r.logf("@%d re-insert %s=%s as read earlier (%s)", rev, key, old.Value, r.statuses(old))
				return
			}
			// The object as it is, read and written in one transaction:
			// an identical re-insert, which leaves marks in place.
			if rev, obj, ok := r.reinsertAsIs(key); ok {
				r.read[key] = obj
				r.logf("@%d re-insert %s=%s as it is (%s)", rev, key, obj.Value, r.statuses(obj))
				return
			}
		}
	}
	v := r.value()
	rev := r.write(chaosChange{key: key, value: v})
	r.logf("@%d set %s=%s", rev, key, v)
}

// putBackAfterDelete deletes key and then writes obj, its object read
// just before, back as it was, statuses included: Done ones too. A Done
// status from before a delete says nothing about the target once the
// delete has run, so a reconciler that read the delete must apply obj
// again; one that did not still holds obj's version, unless the delete is
// still to run. Sometimes the test waits, briefly, for a reconciler to read
// the delete first.
func (r *chaosRun) putBackAfterDelete(key string, obj *item) {
	rev := r.write(chaosChange{key: key})
	r.logf("@%d delete %s", rev, key)
	if r.rng.IntN(2) == 0 {
		i := r.rng.IntN(len(r.recs))
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+r.rng.IntN(10))*time.Millisecond)
		reached, _, err := r.gen.recs[i].WaitUntilReconciled(ctx, rev)
		cancel()
		r.logf("%swait for @%d: reached @%d, err=%v", r.recs[i].label(), rev, reached, err)
	}
	rev = r.write(chaosChange{key: key, obj: obj})
	r.logf("@%d put %s=%s back as it was before its delete (%s)", rev, key, obj.Value, r.statuses(obj))
}

// restoredInError returns key=value with a retryable Error status for
// every reconciler, each with a fresh identity, as decoding a saved table
// gives.
func (r *chaosRun) restoredInError(key, value string) *item {
	obj := &item{ID: key, Value: value}
	st := status.ErrorAt(time.Now().Add(-time.Hour), errors.New("restored"))
	if r.cfg.set {
		obj.Statuses = status.NewSet()
		for _, rec := range r.recs {
			obj.Statuses = obj.Statuses.Set(rec.name, status.ErrorAt(st.UpdatedAt, errors.New("restored")))
		}
	} else {
		obj.Status = st
	}
	return obj
}

// reinsertAsIs writes key's object back as it is, statuses included, in
// the write transaction that reads it.
func (r *chaosRun) reinsertAsIs(key string) (statedb.Revision, *item, bool) {
	g := r.gen
	wtxn := g.db.WriteTxn(g.table)
	defer wtxn.Abort()
	obj, _, found := g.table.Get(wtxn, itemID.Query(key))
	if !found {
		return 0, nil, false
	}
	_, _, err := g.table.Insert(wtxn, obj.clone())
	require.NoError(r.t, err)
	for _, rec := range r.recs {
		rec.target.reinserted(r.statusIDs(obj)...)
	}
	rev := g.table.Revision(wtxn)
	wtxn.Commit()
	return rev, obj, true
}

// anyDone reports whether a reconciler's status on obj is Done.
func (r *chaosRun) anyDone(obj *item) bool {
	for _, rec := range r.recs {
		if rec.getStatus(obj).Kind == status.KindDone {
			return true
		}
	}
	return false
}

func (r *chaosRun) statuses(obj *item) string {
	var words []string
	for _, rec := range r.recs {
		st := rec.getStatus(obj)
		words = append(words, fmt.Sprintf("%s%s id %d", rec.label(), st.Kind, st.ID()))
	}
	return strings.Join(words, ", ")
}

// scenario writes a key and, while its operation on one target is held in
// flight, or held with a newer version parked behind it, or has failed and
// waits for its retry, changes the key a few times: deletes, new values,
// reverts (often to the very value being applied) and identical re-inserts.
func (r *chaosRun) scenario() {
	k := r.key()
	i := r.rng.IntN(len(r.recs))
	c := r.recs[i].target
	mode := []string{"held in flight", "parked behind", "waiting for a retry"}[r.rng.IntN(3)]
	var h *chaosHold
	if mode == "waiting for a retry" {
		c.mu.Lock()
		c.failNext[k] = 1 + r.rng.IntN(2)
		c.mu.Unlock()
	} else {
		h = c.hold(k)
	}
	v := r.value()
	rev := r.write(chaosChange{key: k, value: v})
	first := r.written[k][len(r.written[k])-1]
	r.logf("@%d set %s=%s, %soperation to be %s", rev, k, v, r.recs[i].label(), mode)

	// Give the operation time to start; it may not (the key may be
	// deleted, or the object busy with an earlier version).
	if h != nil {
		timer := time.NewTimer(20 * time.Millisecond)
		select {
		case <-h.started:
			r.logf("%s: operation held", k)
		case <-timer.C:
		}
		timer.Stop()
	} else {
		r.waitCalls(c, 1, 10*time.Millisecond)
	}
	if mode == "parked behind" {
		r.keyMove(k, 1)
	}
	if mode == "held in flight" {
		switch r.rng.IntN(3) {
		case 0:
			// Deleted, a new value, and at once the object in flight
			// again, status identity included: after a delete, the same
			// identity is new work.
			r.keyMove(k, 0)
			r.keyMove(k, 1)
			rev := r.write(chaosChange{key: k, obj: first})
			r.logf("@%d revert %s=%s, the value in flight, after a delete", rev, k, first.Value)
		case 1:
			// The same, but the update is let go once the delete is
			// written, and the delete that follows it is held in turn:
			// the new value and the revert arrive while the delete of
			// the very object being reverted to is in flight.
			r.keyMove(k, 0)
			next := c.hold(k)
			c.release(h)
			h = next
			if r.waitStarted(h, 20*time.Millisecond) {
				r.logf("%s: update released, delete held", k)
			}
			r.keyMove(k, 1)
			rev := r.write(chaosChange{key: k, obj: first})
			r.logf("@%d revert %s=%s, the value of the update, while its delete is held", rev, k, first.Value)
		}
	}
	for n := r.rng.IntN(3); n > 0; n-- {
		r.keyMove(k, r.rng.IntN(5))
	}
	if r.rng.IntN(2) == 0 {
		rev := r.write(chaosChange{key: k, obj: first})
		r.logf("@%d revert %s=%s, the value %s", rev, k, first.Value, mode)
	}
	if h != nil {
		c.release(h)
		r.logf("%s: released", k)
	}
}

// writeBackAfterPrune holds k's operation (sometimes its retry) on one
// target in flight, deletes k, has that reconciler prune while the
// operation is held (the prune may
// remove what the operation applies), and then lets the operation go while
// a writer it wakes puts k back as it was read before the delete, status
// identity included. The write-back lands while the operation returns, so
// it may fall between the changes a round has read and that round's
// commit; the object is then new work, not the version the operation
// applied. Sometimes the hive is stopped and started again as the
// operation returns.
func (r *chaosRun) writeBackAfterPrune() {
	k := r.key()
	i := r.rng.IntN(len(r.recs))
	c := r.recs[i].target
	// Sometimes the first attempt fails and its retry is held: what is
	// read then, and written back, carries the Error status the retry
	// answers.
	retry := r.rng.IntN(3) == 0
	// Sometimes the update is held once it has applied its object: then
	// the prune removes what it applied.
	applyFirst := r.rng.IntN(2) == 0
	hold := c.hold
	if applyFirst {
		hold = c.holdAfterApply
	}
	var h *chaosHold
	if retry {
		c.mu.Lock()
		c.failNext[k] = 1
		c.mu.Unlock()
	} else {
		h = hold(k)
	}
	v := r.value()
	rev := r.write(chaosChange{key: k, value: v})
	r.logf("@%d set %s=%s, %soperation held for a write-back after a prune (retry: %v, held after applying: %v)", rev, k, v, r.recs[i].label(), retry, applyFirst)
	if retry {
		r.waitCalls(c, 1, 20*time.Millisecond)
		h = hold(k)
	}
	if !r.waitStarted(h, 20*time.Millisecond) {
		c.release(h)
		r.logf("%s: operation did not start", k)
		return
	}
	read, _, found := r.gen.table.Get(r.gen.db.ReadTxn(), itemID.Query(k))
	if !found || r.anyDone(read) {
		c.release(h)
		r.logf("%s: released, nothing to write back", k)
		return
	}
	rev = r.write(chaosChange{key: k})
	r.logf("@%d delete %s", rev, k)
	if r.manualPrune {
		r.pruneAndWait(i, 20*time.Millisecond)
		r.logf("%sPrune() while %s is held", r.recs[i].label(), k)
	}
	yields := r.rng.IntN(4)
	if applyFirst && r.heldStops < chaosMaxHeldStops && r.rng.IntN(3) == 0 {
		// The hive stops while the update, which applied its object
		// before the prune removed it, is still held: it reports
		// success as the stop cuts it short, with the write-back
		// waiting to apply the object again.
		r.heldStops++
		rev = r.write(chaosChange{key: k, obj: read})
		r.logf("@%d write-back %s=%s as read before the delete (%s), while its operation is held", rev, k, read.Value, r.statuses(read))
		c.mu.Lock()
		h.succeedAtStop = true
		c.mu.Unlock()
		<-time.After(20 * time.Millisecond) // for a loop with workers to read the write-back
		r.logf("%s: the hive stops while the operation is held; it reports success", k)
		r.restartInPlace()
		c.release(h)
		return
	}
	restart := r.restarts < chaosMaxRestarts && r.rng.IntN(4) == 0
	if stop := restart && r.rng.IntN(2) == 0; stop || r.rng.IntN(3) == 0 {
		// The write-back comes while the operation is held, so that it
		// is read while it runs and waits to be applied again after
		// it; sometimes the hive stops as the operation returns.
		rev = r.write(chaosChange{key: k, obj: read})
		r.logf("@%d write-back %s=%s as read before the delete (%s), while its operation is held", rev, k, read.Value, r.statuses(read))
		if !stop {
			// A few milliseconds for a loop with workers to read it;
			// any order is a valid schedule.
			<-time.After(5 * time.Millisecond)
			c.release(h)
			return
		}
		c.release(h)
		r.restarts++
		r.restartInPlace()
		return
	}
	written := make(chan statedb.Revision, 1)
	c.mu.Lock()
	h.done = make(chan struct{})
	h.inside = func() {
		go func() {
			for range yields {
				runtime.Gosched()
			}
			// The test goroutine waits for this write: r is not
			// shared.
			written <- r.write(chaosChange{key: k, obj: read})
		}()
	}
	c.mu.Unlock()
	c.release(h)
	select {
	case rev = <-written:
		r.logf("@%d write-back %s=%s as read before the delete (%s), from inside its operation", rev, k, read.Value, r.statuses(read))
	case <-h.cut:
		// The operation was cut short (a timeout) and woke no writer.
		rev = r.write(chaosChange{key: k, obj: read})
		r.logf("@%d write-back %s=%s from the test: the operation was cut short", rev, k, read.Value)
	}
	if restart {
		r.restarts++
		r.restartInPlace()
	}
}

// pruneAndWait asks reconciler i for a prune and waits up to d for one to
// end; paused, or without workers while an operation is held (the loop is
// in it), the prune waits, and the test goes on without it.
func (r *chaosRun) pruneAndWait(i int, d time.Duration) bool {
	c, ops := r.recs[i].target, r.gen.ops[i]
	c.mu.Lock()
	before := ops.prunes
	c.mu.Unlock()
	r.gen.recs[i].Prune()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		pruned, changed := ops.prunes > before, c.changed
		c.mu.Unlock()
		if pruned {
			return true
		}
		select {
		case <-changed:
		case <-deadline.C:
			return false
		}
	}
}

// twoPrunesWhileSaturated holds operations on as many keys as one
// reconciler's workers and their queue take, so that its loop reads no
// change, and then, with k Done: deletes k, has the reconciler prune (which
// removes k from its target, the delete unread), puts k back as read
// before the delete, Done status included, and has it prune again, before
// the operations go. The second prune finds k; the first one's removal
// must still count: k is new work.
func (r *chaosRun) twoPrunesWhileSaturated() {
	slots := max(r.roundSize, 2*r.cfg.workers) // the executor's limit
	if !r.manualPrune || r.cfg.workers == 1 || slots >= chaosKeys-6 {
		r.logf("(no two prunes while saturated in this seed)")
		return
	}
	i := r.rng.IntN(len(r.recs))
	c := r.recs[i].target
	k := r.key()
	read, _, found := r.gen.table.Get(r.gen.db.ReadTxn(), itemID.Query(k))
	if !found || r.recs[i].getStatus(read).Kind != status.KindDone {
		r.logf("%s: not Done, no two prunes", k)
		return
	}
	var holds []*chaosHold
	var busy []chaosChange
	// A few more than the slots: a key whose version is parked behind
	// its operation, or queued already, takes none.
	for _, n := range r.rng.Perm(chaosKeys) {
		if other := fmt.Sprintf("k%02d", n); other != k && len(busy) < slots+6 {
			holds = append(holds, c.hold(other))
			busy = append(busy, chaosChange{key: other, value: r.value()})
		}
	}
	rev := r.write(busy...)
	r.logf("@%d %soperations held on %s, to take every slot", rev, r.recs[i].label(), describeChanges(busy))
	started := 0
	for _, h := range holds {
		if started < r.cfg.workers && r.waitStarted(h, 5*time.Millisecond) {
			started++
		}
	}
	<-time.After(2 * time.Millisecond) // for the loop to fill its queue; any order is a valid schedule
	rev = r.write(chaosChange{key: k})
	r.logf("@%d delete %s (%d held operations started)", rev, k, started)
	r.logf("%sPrune() while saturated: ran %v", r.recs[i].label(), r.pruneAndWait(i, 20*time.Millisecond))

	rev = r.write(chaosChange{key: k, obj: read})
	r.logf("@%d put %s=%s back as read before the delete (%s)", rev, k, read.Value, r.statuses(read))
	r.logf("%sPrune() again: ran %v", r.recs[i].label(), r.pruneAndWait(i, 20*time.Millisecond))
	for _, h := range holds {
		c.release(h)
	}
	r.logf("%soperations released", r.recs[i].label())

	// Once the put-back is read, the target must come to hold it, or its
	// status change (applied again, or failed): a Done that stays while
	// the target lacks the object was believed. A retry or a requeued
	// batch entry may still be on its way, so this waits a while.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	reached, _, err := r.gen.recs[i].WaitUntilReconciled(ctx, rev)
	cancel()
	if err != nil || reached < rev {
		r.logf("%s: not read within 100ms (reached @%d), not checked", k, reached)
		return
	}
	deadline := time.NewTimer(2 * time.Second)
	defer deadline.Stop()
	for {
		obj, _, watch, found := r.gen.table.GetWatch(r.gen.db.ReadTxn(), itemID.Query(k))
		if !found || r.recs[i].getStatus(obj).ID() != r.recs[i].getStatus(read).ID() {
			return
		}
		c.mu.Lock()
		got, has := c.data[k]
		changed := c.changed
		c.mu.Unlock()
		if has && got == read.Value {
			return
		}
		select {
		case <-watch:
		case <-changed:
		case <-deadline.C:
			c.mu.Lock()
			c.violate("%s=%s put back after two prunes was believed %s: the target has %q (present: %v)",
				k, read.Value, r.recs[i].getStatus(read), got, has)
			c.mu.Unlock()
			return
		}
	}
}

// pruneWhileBusy holds operations on a few keys, so that with workers the
// workers are busy, writes more keys so that work is queued behind them,
// and holds a prune asked for meanwhile. While the prune is held it lets
// the operations go: the workers are free, and the queued work must still
// wait for the prune to end.
func (r *chaosRun) pruneWhileBusy() { r.whileBusy(false) }

// pauseWhileBusy is pruneWhileBusy with Pause in place of the prune, and a
// newer version of one held key parked behind its operation: once every
// Pause has returned, neither the parked version nor the queued work may
// start, however the workers come free.
func (r *chaosRun) pauseWhileBusy() { r.whileBusy(true) }

func (r *chaosRun) whileBusy(pause bool) {
	if !pause && !r.manualPrune {
		r.logf("(no Prune() in this seed)")
		return
	}
	i := r.rng.IntN(len(r.recs))
	c := r.recs[i].target
	var holds []*chaosHold
	var busy, queued []chaosChange
	chosen := map[string]bool{}
	for n := 2 + r.rng.IntN(4); n > 0; n-- {
		k := r.key()
		if chosen[k] {
			continue
		}
		chosen[k] = true
		holds = append(holds, c.hold(k))
		busy = append(busy, chaosChange{key: k, value: r.value()})
	}
	rev := r.write(busy...)
	r.logf("@%d %soperations held on %s", rev, r.recs[i].label(), describeChanges(busy))
	for _, h := range holds {
		r.waitStarted(h, 10*time.Millisecond)
	}
	for n := 1 + r.rng.IntN(3); n > 0; n-- {
		queued = append(queued, chaosChange{key: r.key(), value: r.value()})
	}
	if pause {
		queued = append(queued, chaosChange{key: busy[0].key, value: r.value()})
	}
	rev = r.write(queued...)
	r.logf("@%d %s, queued behind them", rev, describeChanges(queued))
	if pause {
		if !r.gen.paused {
			r.setPaused(true)
		}
		// A start sooner than startGrace after Pause returned is not
		// told from one that passed the gate before it.
		<-time.After(startGrace)
		for _, h := range holds {
			c.release(h)
		}
		r.waitCalls(c, len(queued), 20*time.Millisecond)
		r.logf("%soperations released while paused", r.recs[i].label())
		return
	}
	ph := c.hold(pruneHoldKey)
	r.gen.recs[i].Prune()
	if r.waitStarted(ph, 20*time.Millisecond) {
		// A start sooner than startGrace after the prune began is not
		// told from one that passed the gate before it.
		<-time.After(startGrace)
		r.logf("%sprune held", r.recs[i].label())
	}
	for _, h := range holds {
		c.release(h)
	}
	r.waitCalls(c, len(queued), 20*time.Millisecond)
	c.release(ph)
	r.logf("%sprune and operations released", r.recs[i].label())
}

func describeChanges(changes []chaosChange) string {
	words := make([]string, len(changes))
	for i, ch := range changes {
		words[i] = ch.key + "=" + ch.value
	}
	return strings.Join(words, " ")
}

// setPaused pauses or resumes every reconciler.
func (r *chaosRun) setPaused(paused bool) {
	if !paused {
		r.markPaused(false) // before Resume: starts are allowed from now on
	}
	for _, rc := range r.gen.recs {
		if paused {
			rc.Pause()
		} else {
			rc.Resume()
		}
	}
	if paused {
		r.markPaused(true) // every Pause has returned: no start from now on
	}
	r.gen.paused = paused
	r.logf("paused: %v", paused)
}

// pauseFromAnOperation pauses every reconciler from inside an operation,
// in the middle of a round, after asking for a prune: the round must not
// start anything more, its due prune included.
func (r *chaosRun) pauseFromAnOperation() {
	k := r.key()
	i := r.rng.IntN(len(r.recs))
	c := r.recs[i].target
	recs := slices.Clone(r.gen.recs)
	// An operation on another key held first keeps a loop without
	// workers in its round while the prune is asked for and k written, so
	// that the next round may be the prune's and also run k's operation.
	var first *chaosHold
	if j := r.key(); j != k {
		first = c.hold(j)
		v := r.value()
		rev := r.write(chaosChange{key: j, value: v})
		r.logf("@%d set %s=%s, %soperation held", rev, j, v, r.recs[i].label())
		r.waitStarted(first, 20*time.Millisecond)
	}
	h := c.hold(k)
	h.done = make(chan struct{})
	h.inside = func() {
		for _, rc := range recs {
			rc.Pause()
		}
		if r.cfg.workers <= 1 {
			c.pausedInRound.Store(true)
		}
		r.markPaused(true)
	}
	if r.manualPrune {
		for _, rc := range recs {
			rc.Prune()
		}
	}
	v := r.value()
	rev := r.write(chaosChange{key: k, value: v})
	r.logf("@%d set %s=%s, %soperation to pause every reconciler", rev, k, v, r.recs[i].label())
	if first != nil {
		c.release(first)
	}
	timer := time.NewTimer(20 * time.Millisecond)
	defer timer.Stop()
	select {
	case <-h.started:
	case <-timer.C:
		c.mu.Lock()
		taken := h.taken
		if !taken {
			delete(c.holds, k)
		}
		c.mu.Unlock()
		if !taken {
			r.logf("%s: operation did not start; paused from the test", k)
			r.setPaused(true)
			return
		}
		<-h.started
	}
	c.release(h)
	timer.Reset(10 * time.Second)
	select {
	case <-h.done:
		r.gen.paused = true
		r.logf("paused: true, from the operation on %s", k)
	case <-timer.C: // cut short (a timeout): pause from here
		r.logf("%s: operation cut short; paused from the test", k)
		r.setPaused(true)
	}
}

// waitStarted waits up to d for an operation to block on h.
func (r *chaosRun) waitStarted(h *chaosHold, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-h.started:
		return true
	case <-timer.C:
		return false
	}
}

// markPaused tells the targets whether every reconciler is paused, so
// that they flag an operation that starts meanwhile.
func (r *chaosRun) markPaused(paused bool) {
	for _, rec := range r.recs {
		if paused {
			rec.target.pausedAt.Store(time.Now().UnixNano())
		} else {
			rec.target.pausedAt.Store(0)
			rec.target.pausedInRound.Store(false)
		}
	}
}

// waitCalls waits for n more calls on the target, or for the timeout.
func (r *chaosRun) waitCalls(c *chaosTarget, n int, timeout time.Duration) {
	c.mu.Lock()
	until := c.calls + n
	c.mu.Unlock()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		calls, changed := c.calls, c.changed
		c.mu.Unlock()
		if calls >= until {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			return
		}
	}
}

// putBackOverAHeldDelete puts an object back, with the Done statuses it
// had before its delete, while one reconciler's delete of it is held in
// flight, and writes it once more as it is (a new revision with the same
// statuses, as another reconciler's status write makes one): the put-back
// waits behind the delete, and the write after it must not make
// WaitUntilReconciled pass the put-back before it is applied. Then it lets
// the delete go and waits for that reconciler (checkDoneApplied).
func (r *chaosRun) putBackOverAHeldDelete() {
	k, i := r.key(), r.rng.IntN(len(r.recs))
	rec := r.recs[i]
	v := r.value()
	rev := r.write(chaosChange{key: k, value: v})
	r.logf("@%d set %s=%s, for a put-back over %sheld delete", rev, k, v, rec.label())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, _, err := r.gen.recs[i].WaitUntilReconciled(ctx, rev)
	cancel()
	obj, _, found := r.gen.table.Get(r.gen.db.ReadTxn(), itemID.Query(k))
	if err != nil || !found || rec.getStatus(obj).Kind != status.KindDone {
		r.logf("%s: not Done in time; no put-back", k)
		return
	}
	h := rec.target.hold(k)
	defer rec.target.release(h)
	rev = r.write(chaosChange{key: k})
	r.logf("@%d delete %s, %soperation held", rev, k, rec.label())
	if !r.waitStarted(h, 20*time.Millisecond) {
		r.logf("%s: the delete did not start in time", k)
	}
	rev = r.write(chaosChange{key: k, obj: obj})
	r.logf("@%d put %s=%s back as it was before its delete (%s)", rev, k, obj.Value, r.statuses(obj))
	if rev, _, ok := r.reinsertAsIs(k); ok {
		r.logf("@%d re-insert %s as it is", rev, k)
	}
	rec.target.release(h)
	rev = r.gen.table.Revision(r.gen.db.ReadTxn())
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	reached, low, err := r.gen.recs[i].WaitUntilReconciled(ctx, rev)
	cancel()
	r.logf("%swait for @%d: reached @%d, retry low @%d, err=%v", rec.label(), rev, reached, low, err)
	if err == nil && reached >= rev && low == 0 {
		r.checkDoneApplied(i, rev)
	}
}

// putBackAfterARestart writes a few keys (the first sometimes held in
// flight over the stop, or failing once), stops the hive while their work
// is queued, in flight or waiting for a retry, deletes them while it is
// stopped, starts it again with the reconcilers paused, puts each key back
// as it was before its delete (statuses included) and resumes. Deletes
// made while the hive is stopped are found when it starts; the work
// carried over the stop may apply an object put back before such a delete
// is read, which must not undo it.
func (r *chaosRun) putBackAfterARestart() {
	if r.restarts >= chaosMaxRestarts {
		r.logf("(no restart: limit reached)")
		return
	}
	r.restarts++
	keys := []string{r.key()}
	for n := r.rng.IntN(3); n > 0; n-- {
		if k := r.key(); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	c := r.recs[r.rng.IntN(len(r.recs))].target
	var h *chaosHold
	switch r.rng.IntN(3) {
	case 0:
		h = c.hold(keys[0])
		defer c.release(h)
	case 1:
		c.mu.Lock()
		c.failNext[keys[0]] = 1
		c.mu.Unlock()
	}
	for _, k := range keys {
		v := r.value()
		rev := r.write(chaosChange{key: k, value: v})
		r.logf("@%d set %s=%s, to be deleted while the hive is stopped and put back after it starts", rev, k, v)
	}
	if h != nil && r.waitStarted(h, 20*time.Millisecond) {
		r.logf("%s: operation held over the stop", keys[0])
	} else if n := r.rng.IntN(3); n > 0 {
		r.waitCalls(c, n, 10*time.Millisecond)
	}
	r.stopInPlace()
	taken := map[string]*item{}
	for _, k := range keys {
		if obj, _, found := r.gen.table.Get(r.gen.db.ReadTxn(), itemID.Query(k)); found {
			taken[k] = obj
			rev := r.write(chaosChange{key: k})
			r.logf("@%d delete %s=%s (%s)", rev, k, obj.Value, r.statuses(obj))
		}
	}
	for n := r.rng.IntN(4); n > 0; n-- {
		r.keyMove(r.key(), 0) // more deletes to find at the start
	}
	wasPaused := r.gen.paused
	if !wasPaused {
		r.setPaused(true)
	}
	r.startInPlace()
	for _, k := range keys {
		if obj := taken[k]; obj != nil {
			rev := r.write(chaosChange{key: k, obj: obj})
			r.logf("@%d put %s=%s back as it was before its delete (%s)", rev, k, obj.Value, r.statuses(obj))
		}
	}
	if !wasPaused {
		r.setPaused(false)
	}
}

package reconciler_test

// The chaos test's generator: each step draws a move from the run's seeded
// RNG (chaosRun.step); only the test goroutine draws from it, so a seed
// keeps its schedule.

import (
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

func (r *chaosRun) get(key string) (*item, bool) {
	obj, _, found := r.gen.table.Get(r.gen.db.ReadTxn(), itemID.Query(key))
	return obj, found
}

// set, del and put write one change and log it; put writes obj as it is.
func (r *chaosRun) set(key, value, why string) {
	r.logf("@%d set %s=%s%s", r.write(chaosChange{key: key, value: value}), key, value, why)
}

func (r *chaosRun) del(key, why string) {
	r.logf("@%d delete %s%s", r.write(chaosChange{key: key}), key, why)
}

func (r *chaosRun) put(key string, obj *item, what string) {
	r.logf("@%d %s %s=%s (%s)", r.write(chaosChange{key: key, obj: obj}), what, key, obj.Value, r.statuses(obj))
}

// setMany writes each key a new value in one transaction.
func (r *chaosRun) setMany(keys []string, why string) {
	changes, words := make([]chaosChange, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		changes[i] = chaosChange{key: k, value: r.value()}
		words[i] = k + "=" + changes[i].value
	}
	r.logf("@%d set %s%s", r.write(changes...), strings.Join(words, " "), why)
}

func (r *chaosRun) step() {
	switch p := r.rng.IntN(109); {
	case p < 28: // insert or update; sometimes the same value, a new Pending
		k, v := r.key(), r.value()
		if old, ok := r.model[k]; ok && r.rng.IntN(8) == 0 {
			v = old
		}
		r.set(k, v, "")
	case p < 38:
		r.keyMove(r.key(), 0)
	case p < 46: // a transaction of several changes, possibly of one key
		changes := make([]chaosChange, 2+r.rng.IntN(7))
		words := make([]string, len(changes))
		for i := range changes {
			ch := &changes[i]
			ch.key = r.key()
			if r.rng.IntN(4) == 1 {
				ch.obj = r.earlier(ch.key)
			}
			if ch.obj == nil && r.rng.IntN(3) > 0 {
				ch.value = r.value()
			}
			words[i] = ch.key + "=" + ch.value
			if ch.obj != nil {
				words[i] = ch.key + "=" + ch.obj.Value + " (revert)"
			}
		}
		r.logf("@%d txn %s", r.write(changes...), strings.Join(words, " "))
	case p < 51: // delete, then a new value or a revert
		k := r.key()
		r.keyMove(k, 0)
		r.keyMove(k, 1+r.rng.IntN(2))
	case p < 56:
		r.keyMove(r.key(), 2+r.rng.IntN(3))
	case p < 64:
		[]func(){r.writeBackAfterPrune, func() { r.putBackDone(false) }, r.putBackAfterARestart, r.scenario}[r.rng.IntN(4)]()
	case p < 68:
		switch r.rng.IntN(4) {
		case 0:
			r.whileBusy(false)
		case 1:
			r.putBackDone(true)
		default:
			if !r.manualPrune {
				r.logf("(no Prune() in this seed)")
				return
			}
			i := r.rng.IntN(len(r.recs))
			r.gen.recs[i].Prune()
			r.logf("%sPrune()", r.recs[i].label())
		}
	case p < 82: // let a reconciler catch up, or not
		r.reconciled(r.rng.IntN(len(r.recs)), time.Duration(1+r.rng.IntN(20))*time.Millisecond)
	case p < 95:
		i, n := r.rng.IntN(len(r.recs)), 1+r.rng.IntN(10)
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
	case p < 104: // pause (three ways), or resume
		switch {
		case r.gen.paused || r.rng.IntN(2) == 0:
			r.setPaused(!r.gen.paused)
		case r.rng.IntN(2) == 0:
			r.whileBusy(true)
		default:
			r.pauseFromAnOperation()
		}
	default:
		if r.restarts >= chaosMaxRestarts {
			r.logf("(no restart: limit reached)")
			return
		}
		r.restarts++
		r.checkTable()
		if r.rng.IntN(2) == 0 {
			r.restartInPlace(nil)
			return
		}
		desired := maps.Clone(r.model)
		r.stopGen()
		r.startGen(desired)
		r.logf("restart as generation %d with %s", r.gens, describe(desired))
	}
}

// earlier returns an object the test inserted for key in this generation,
// as inserted (status identity included), or nil.
func (r *chaosRun) earlier(key string) *item {
	if objs := r.written[key]; len(objs) > 0 {
		return objs[r.rng.IntN(len(objs))]
	}
	return nil
}

// keyMove makes one change to key: 0 a delete, 1 a new value, 2 a revert
// to an earlier value, 3 a re-insert of the object as it is or as read
// earlier, 4 a delete and the object put back as it was.
func (r *chaosRun) keyMove(key string, move int) {
	obj, found := r.get(key)
	switch {
	case move == 0:
		r.del(key, "")
		return
	case move == 2 && r.written[key] != nil:
		r.put(key, r.earlier(key), "revert")
		return
	case move == 3 && found:
		// A read-modify-write across transactions writes back statuses
		// that reconcilers replaced since; not a Done one, which no
		// reconciler can tell from a true one.
		if old := r.read[key]; old != nil && !r.anyDone(old) && r.rng.IntN(2) == 0 {
			r.read[key] = obj
			r.put(key, old, "re-insert as read earlier")
			return
		}
		if obj, ok := r.reinsertAsIs(key); ok {
			r.read[key] = obj
			return
		}
	case move == 4 && found:
		r.putBackAfterDelete(key, obj)
		return
	}
	r.set(key, r.value(), "")
}

// putBackAfterDelete deletes key and writes obj back as it was, Done
// statuses too, sometimes once a reconciler read the delete: a reconciler
// that read the delete must apply obj again.
func (r *chaosRun) putBackAfterDelete(key string, obj *item) {
	r.del(key, "")
	if r.rng.IntN(2) == 0 {
		r.reconciled(r.rng.IntN(len(r.recs)), time.Duration(1+r.rng.IntN(10))*time.Millisecond)
	}
	r.put(key, obj, "put back")
}

// reinsertAsIs writes key's object back as it is, in the transaction that
// reads it: an identical re-insert, which leaves marks in place.
func (r *chaosRun) reinsertAsIs(key string) (*item, bool) {
	g := r.gen
	wtxn := g.db.WriteTxn(g.table)
	defer wtxn.Abort()
	obj, _, found := g.table.Get(wtxn, itemID.Query(key))
	if !found {
		return nil, false
	}
	_, _, err := g.table.Insert(wtxn, obj.clone())
	require.NoError(r.t, err)
	r.reinserted(obj)
	rev := g.table.Revision(wtxn)
	wtxn.Commit()
	r.logf("@%d re-insert %s=%s as it is (%s)", rev, key, obj.Value, r.statuses(obj))
	return obj, true
}

func (r *chaosRun) anyDone(obj *item) bool {
	return slices.ContainsFunc(r.recs, func(rec *chaosRec) bool { return rec.getStatus(obj).Kind == status.KindDone })
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
// flight, held with a newer version parked behind it, or waits for a retry,
// changes the key a few times, often back to the value being applied.
func (r *chaosRun) scenario() {
	k, i := r.key(), r.rng.IntN(len(r.recs))
	c := r.recs[i].target
	mode := r.rng.IntN(3)
	var h *chaosHold
	if mode == 2 {
		c.failNextN(k, 1+r.rng.IntN(2))
	} else {
		h = c.hold(k, false)
	}
	r.set(k, r.value(), fmt.Sprintf(", %soperation to be %s", r.recs[i].label(), []string{"held in flight", "parked behind", "waiting for a retry"}[mode]))
	first := r.written[k][len(r.written[k])-1]
	// The operation may not start (the key may be deleted, or busy).
	if h == nil {
		r.waitCalls(c, 1, 10*time.Millisecond)
	} else if closedWithin(h.started, 20*time.Millisecond) {
		r.logf("%s: operation held", k)
	}
	if mode == 1 {
		r.keyMove(k, 1)
	}
	// Held in flight: deleted, a new value, and the object in flight again,
	// status identity included (after a delete it is new work); sometimes
	// with the update let go and the delete held in turn.
	if sub := r.rng.IntN(3); mode == 0 && sub < 2 {
		r.keyMove(k, 0)
		if sub == 1 {
			next := c.hold(k, false)
			c.release(h)
			if h = next; closedWithin(h.started, 20*time.Millisecond) {
				r.logf("%s: update released, delete held", k)
			}
		}
		r.keyMove(k, 1)
		r.put(k, first, "after a delete, revert to the value in flight")
	}
	for n := r.rng.IntN(3); n > 0; n-- {
		r.keyMove(k, r.rng.IntN(5))
	}
	if r.rng.IntN(2) == 0 {
		r.put(k, first, "revert to the scenario's value")
	}
	if h != nil {
		c.release(h)
		r.logf("%s: released", k)
	}
}

// writeBackAfterPrune holds k's update (sometimes its retry) on one target,
// before or after it applied its object, deletes k, has that reconciler
// prune, and lets the update go with k written back as read before the
// delete, status identity included: while the update is held, over a stop
// during which it reports success, or from inside it as it returns (so
// between a round's read and its commit). The write-back is new work.
func (r *chaosRun) writeBackAfterPrune() {
	k, i := r.key(), r.rng.IntN(len(r.recs))
	c := r.recs[i].target
	retry, applyFirst := r.rng.IntN(3) == 0, r.rng.IntN(2) == 0
	var h *chaosHold
	if retry {
		c.failNextN(k, 1)
	} else {
		h = c.hold(k, applyFirst)
	}
	r.set(k, r.value(), fmt.Sprintf(", %supdate held for a write-back after a prune (retry: %v, held after applying: %v)", r.recs[i].label(), retry, applyFirst))
	if retry {
		r.waitCalls(c, 1, 20*time.Millisecond)
		h = c.hold(k, applyFirst)
	}
	read, found := r.get(k)
	if !closedWithin(h.started, 20*time.Millisecond) || !found || r.anyDone(read) {
		c.release(h)
		r.logf("%s: released, nothing to write back", k)
		return
	}
	r.del(k, "")
	if r.manualPrune {
		r.logf("%sPrune() while %s is held: ran %v", r.recs[i].label(), k, r.pruneAndWait(i, 20*time.Millisecond))
	}
	yields := r.rng.IntN(4)
	heldStop := applyFirst && r.heldStops < chaosMaxHeldStops && r.rng.IntN(3) == 0
	restart := !heldStop && r.restarts < chaosMaxRestarts && r.rng.IntN(4) == 0
	if stop := restart && r.rng.IntN(2) == 0; heldStop || stop || r.rng.IntN(3) == 0 {
		r.put(k, read, "while its update is held, write-back")
		switch {
		case heldStop: // the update applied before the prune removed it
			r.heldStops++
			c.with(func() { h.succeedAtStop = true })
			<-time.After(20 * time.Millisecond) // for a loop with workers to read the write-back
			r.logf("%s: the hive stops while the update is held; it reports success", k)
			r.restartInPlace(nil)
		case !stop:
			<-time.After(5 * time.Millisecond) // any order is a valid schedule
		}
		c.release(h)
	} else {
		written := make(chan statedb.Revision, 1)
		c.with(func() {
			h.done = make(chan struct{})
			h.inside = func() {
				go func() {
					for range yields {
						runtime.Gosched()
					}
					written <- r.write(chaosChange{key: k, obj: read}) // the test goroutine waits for it
				}()
			}
		})
		c.release(h)
		select {
		case rev := <-written:
			r.logf("@%d write-back %s=%s (%s) from inside its update", rev, k, read.Value, r.statuses(read))
		case <-h.cut: // cut short (a timeout), it woke no writer
			r.put(k, read, "the update was cut short; write-back")
		}
	}
	if restart {
		r.restarts++
		r.restartInPlace(nil)
	}
}

// pruneAndWait asks reconciler i for a prune and waits up to d for one to
// end (paused, or while an operation holds a loop without workers, it
// waits).
func (r *chaosRun) pruneAndWait(i int, d time.Duration) bool {
	c, ops := r.recs[i].target, r.gen.ops[i]
	var before int
	c.with(func() { before = ops.prunes })
	r.gen.recs[i].Prune()
	return c.waitUntil(d, func() bool { return ops.prunes > before })
}

// heldMany holds the next operation of each key on reconciler i's target
// and writes the keys new values in one transaction.
func (r *chaosRun) heldMany(i int, keys []string, why string) []*chaosHold {
	holds := make([]*chaosHold, len(keys))
	for j, k := range keys {
		holds[j] = r.recs[i].target.hold(k, false)
	}
	r.setMany(keys, fmt.Sprintf(", %soperations held%s", r.recs[i].label(), why))
	return holds
}

// putBackDone deletes a Done object and puts it back, statuses included:
// while one reconciler's delete is held in flight, then written once more
// as it is (a new revision, the same statuses); or (saturate) while
// operations on more keys than its executor takes are held, so that its
// loop reads no change, with a prune before and after the put-back. The
// put-back is new work: the target must come to hold it (or its status
// change), and WaitUntilReconciled must not pass it before.
func (r *chaosRun) putBackDone(saturate bool) {
	slots := max(r.roundSize, 2*r.cfg.workers) // the executor's limit
	if saturate && (!r.manualPrune || r.cfg.workers == 1 || slots >= chaosKeys-6) {
		r.logf("(no two prunes while saturated in this seed)")
		return
	}
	k, i := r.key(), r.rng.IntN(len(r.recs))
	rec, c := r.recs[i], r.recs[i].target
	if !saturate {
		r.set(k, r.value(), fmt.Sprintf(", for a put-back over %sheld delete", rec.label()))
		r.reconciled(i, 50*time.Millisecond)
	}
	read, found := r.get(k)
	if !found || rec.getStatus(read).Kind != status.KindDone {
		r.logf("%s: not Done, no put-back", k)
		return
	}
	holds := []*chaosHold{c.hold(k, false)}
	if saturate {
		c.release(holds...)
		var keys []string // a few more than the slots: a parked or queued key takes none
		for _, n := range r.rng.Perm(chaosKeys) {
			if other := fmt.Sprintf("k%02d", n); other != k && len(keys) < slots+6 {
				keys = append(keys, other)
			}
		}
		holds = r.heldMany(i, keys, ", to take every slot")
		started := 0
		for _, h := range holds {
			if started < r.cfg.workers && closedWithin(h.started, 5*time.Millisecond) {
				started++
			}
		}
		<-time.After(2 * time.Millisecond) // for the loop to fill its queue; any order is a valid schedule
	}
	r.del(k, "")
	if saturate {
		r.logf("%sPrune() while saturated: ran %v", rec.label(), r.pruneAndWait(i, 20*time.Millisecond))
	} else if !closedWithin(holds[0].started, 20*time.Millisecond) {
		r.logf("%s: the delete did not start in time", k)
	}
	r.put(k, read, "put back")
	if saturate {
		r.logf("%sPrune() again: ran %v", rec.label(), r.pruneAndWait(i, 20*time.Millisecond))
	} else {
		r.reinsertAsIs(k)
	}
	c.release(holds...)
	if !r.reconciled(i, 100*time.Millisecond) { // a retry may still be on its way
		return
	}
	if problem := r.until(2*time.Second, func() string {
		obj, found := r.get(k)
		if !found || rec.getStatus(obj).ID() != rec.getStatus(read).ID() {
			return ""
		}
		var got string
		var has bool
		if c.with(func() { got, has = c.data[k] }); has && got == read.Value {
			return ""
		}
		return fmt.Sprintf("%s=%s put back was believed %s: the target has %q (present: %v)", k, read.Value, rec.getStatus(read), got, has)
	}); problem != "" {
		c.with(func() { c.violate("%s", problem) })
	}
}

// whileBusy holds operations on a few keys of one target (its workers
// busy), queues work behind them, and then lets the operations go while a
// prune is held, or (pause) once every reconciler is paused, with a newer
// version of a held key parked: the queued work must wait for the prune's
// end, or for Resume.
func (r *chaosRun) whileBusy(pause bool) {
	if !pause && !r.manualPrune {
		r.logf("(no Prune() in this seed)")
		return
	}
	i := r.rng.IntN(len(r.recs))
	c := r.recs[i].target
	var keys, queued []string
	for n := 2 + r.rng.IntN(4); n > 0; n-- {
		if k := r.key(); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	holds := r.heldMany(i, keys, "")
	for _, h := range holds {
		closedWithin(h.started, 10*time.Millisecond)
	}
	for n := 1 + r.rng.IntN(3); n > 0; n-- {
		queued = append(queued, r.key())
	}
	if pause {
		queued = append(queued, keys[0])
	}
	r.setMany(queued, ", queued behind them")
	// A start sooner than startGrace after Pause returned (or the prune
	// began) is not told from one that passed the gate before.
	var ph *chaosHold
	if pause && !r.gen.paused {
		r.setPaused(true)
	} else if !pause {
		ph = c.hold(pruneHoldKey, false)
		r.gen.recs[i].Prune()
	}
	if pause || closedWithin(ph.started, 20*time.Millisecond) {
		<-time.After(startGrace)
	}
	c.release(holds...)
	r.waitCalls(c, len(queued), 20*time.Millisecond)
	c.release(ph)
	r.logf("%soperations released (paused: %v)", r.recs[i].label(), pause)
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
		r.markPaused(true) // every Pause returned: no start from now on
	}
	r.gen.paused = paused
	r.logf("paused: %v", paused)
}

// markPaused tells the targets whether every reconciler is paused.
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

// pauseFromAnOperation pauses every reconciler from inside an operation,
// in the middle of a round, after asking for a prune: the round must start
// nothing more, its due prune included. An operation on another key held
// first keeps a loop without workers in its round meanwhile, so that the
// next round may be the prune's and run k's operation too.
func (r *chaosRun) pauseFromAnOperation() {
	k, i := r.key(), r.rng.IntN(len(r.recs))
	c, recs := r.recs[i].target, slices.Clone(r.gen.recs)
	var first *chaosHold
	if j := r.key(); j != k {
		first = r.heldMany(i, []string{j}, "")[0]
		closedWithin(first.started, 20*time.Millisecond)
	}
	h := c.hold(k, false)
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
	r.set(k, r.value(), fmt.Sprintf(", %soperation to pause every reconciler", r.recs[i].label()))
	if first != nil {
		c.release(first)
	}
	if !closedWithin(h.started, 20*time.Millisecond) {
		taken := false
		if c.with(func() { taken = h.taken; c.open(h) }); !taken {
			r.logf("%s: operation did not start; paused from the test", k)
			r.setPaused(true)
			return
		}
	}
	c.release(h)
	select {
	case <-h.done:
		r.gen.paused = true
		r.logf("paused: true, from the operation on %s", k)
	case <-h.cut:
	case <-time.After(10 * time.Second):
	}
	if !r.gen.paused { // cut short (a timeout)
		r.logf("%s: operation cut short; paused from the test", k)
		r.setPaused(true)
	}
}

func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ch:
		return true
	case <-timer.C:
		return false
	}
}

// waitCalls waits up to d for n more calls on the target.
func (r *chaosRun) waitCalls(c *chaosTarget, n int, d time.Duration) {
	until := -1
	c.waitUntil(d, func() bool {
		if until < 0 {
			until = c.calls + n
		}
		return c.calls >= until
	})
}

// putBackAfterARestart writes a few keys (the first sometimes held in
// flight over the stop, or failing once), stops the hive, deletes them,
// starts it paused, puts each back as it was (statuses included) and
// resumes: work carried over the stop may apply a put-back before the
// deletes found at the start are read, which must not undo it.
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
		h = c.hold(keys[0], false)
		defer c.release(h)
	case 1:
		c.failNextN(keys[0], 1)
	}
	for _, k := range keys {
		r.set(k, r.value(), ", to be deleted while the hive is stopped and put back after it starts")
	}
	if h != nil && closedWithin(h.started, 20*time.Millisecond) {
		r.logf("%s: operation held over the stop", keys[0])
	} else if n := r.rng.IntN(3); n > 0 {
		r.waitCalls(c, n, 10*time.Millisecond)
	}
	taken, wasPaused := map[string]*item{}, r.gen.paused
	r.restartInPlace(func() {
		for _, k := range keys {
			if obj, found := r.get(k); found {
				taken[k] = obj
				r.del(k, fmt.Sprintf(" (was %s, %s)", obj.Value, r.statuses(obj)))
			}
		}
		for n := r.rng.IntN(4); n > 0; n-- {
			r.keyMove(r.key(), 0) // more deletes to find at the start
		}
		if !wasPaused {
			r.setPaused(true)
		}
	})
	for _, k := range keys {
		if obj := taken[k]; obj != nil {
			r.put(k, obj, "put back")
		}
	}
	if !wasPaused {
		r.setPaused(false)
	}
}

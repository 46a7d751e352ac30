package reconciler_test

// The chaos test's generator: each step draws a move from the run's seeded
// RNG (chaosRun.step); only the test goroutine draws from it, so a seed
// keeps its schedule.

import (
	"cmp"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

func (r *chaosRun) key() string { return fmt.Sprintf("k%02d", r.rng.IntN(chaosKeys)) }

// keys returns the distinct keys of n draws.
func (r *chaosRun) keys(n int) (keys []string) {
	for ; n > 0; n-- {
		if k := r.key(); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

func (r *chaosRun) value() string {
	r.values++
	prefix := map[int]string{0: "poison-", 1: "poison-", 2: "poison-", 3: "poison-", 4: "later-"}[r.rng.IntN(40)]
	return fmt.Sprintf("%s%d.%d", cmp.Or(prefix, "v"), r.gens, r.values)
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
	defer r.checkHistory()
	if rng, ok := r.configureDraw(); ok {
		r.configure(rng) // settings changed mid-run: see chaos_configure_test.go
		return
	}
	r.setsMove()                  // chaos_sets_wait_test.go: besides the step, which it draws nothing of
	r.quietMove()                 // chaos_sets_quiet_test.go: likewise
	r.overMove()                  // chaos_sets_over_test.go: likewise
	r.lateAskOnTheNextCall()      // chaos_recheck_test.go: likewise
	r.retryAmidAStream()          // chaos_stream_test.go: likewise
	r.raiseBackoffWhileRetrying() // chaos_configure_test.go: likewise
	r.dropFailingLimiter()        // chaos_configure_test.go: likewise
	r.putBackPoisonThenMark()     // chaos_drift_test.go: likewise
	switch p := r.rng.IntN(116); {
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
			if ch.key = r.key(); r.rng.IntN(4) == 1 {
				ch.obj = r.earlier(ch.key)
			}
			if words[i] = ch.key + "="; ch.obj != nil {
				words[i] += ch.obj.Value + " (revert)"
			} else if r.rng.IntN(3) > 0 {
				ch.value = r.value()
				words[i] += ch.value
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
		[]func(){r.writeBackAfterPrune, func() { r.putBackDone(false) }, r.putBackAfterARestart, r.scenario, r.markThenWrite, r.recheckThenDelete, r.failingStreak, r.driftThenRefresh}[r.rng.IntN(8)]()
	case p < 68: // aimed at classes issue 46 left unfound
		[]func(){r.backToTheVersionInFlight, func() { r.putBackDone(true) }, r.massPrune}[r.rng.IntN(3)]()
	case p < 72:
		switch i := r.rng.IntN(4); {
		case i == 0:
			r.whileBusy(false)
		case i == 1:
			r.putBackDone(true)
		case i == 3 && r.initIn < 0:
			r.refill()
		case r.manualPrune:
			i := r.rng.IntN(len(r.recs))
			r.gen.recs[i].Prune()
			r.logf("%sPrune()", r.recs[i].label())
		}
	case p < 83: // let a reconciler catch up, or not
		r.reconciled(r.rng.IntN(len(r.recs)), time.Duration(1+r.rng.IntN(20))*time.Millisecond)
	case p < 86: // wait for an earlier write of the test
		if len(r.marks) > 0 {
			r.reconciledTo(r.rng.IntN(len(r.recs)), r.marks[max(0, len(r.marks)-1-r.rng.IntN(20))], time.Duration(1+r.rng.IntN(20))*time.Millisecond)
		}
	case p < 99:
		i, n := r.rng.IntN(len(r.recs)), 1+r.rng.IntN(10)
		r.waitCalls(r.recs[i].target, n, 10*time.Millisecond)
		r.logf("%swait for %d calls", r.recs[i].label(), n)
	case p < 105: // change what objects depend on ("" deletes the dependency)
		d, v := fmt.Sprintf("d%d", r.rng.IntN(chaosDeps)), ""
		wtxn := r.gen.db.WriteTxn(r.gen.deps)
		var err error
		if r.rng.IntN(4) == 0 {
			_, _, err = r.gen.deps.Delete(wtxn, &chaosDep{ID: d})
		} else {
			v = r.value()
			_, _, err = r.gen.deps.Insert(wtxn, &chaosDep{ID: d, Value: v})
		}
		for _, rec := range r.recs { // before the marks it makes can be seen
			rec.target.with(func() { rec.target.rc.depWrites[d]++ })
		}
		wtxn.Commit()
		require.NoError(r.t, err)
		r.depChangedAt[d] = len(r.steps)
		r.logf("set dependency %s=%q", d, v)
	case p < 108: // pause (three ways), or resume
		switch {
		case r.gen.paused || r.rng.IntN(2) == 0:
			r.setPaused(!r.gen.paused)
		case r.rng.IntN(2) == 0:
			r.whileBusy(true)
		default:
			r.pauseFromAnOperation()
		}
	case p < 111: // the target goes down, or comes back
		if r.breaker && r.rng.IntN(3) == 0 {
			r.partialOutage()
			return
		}
		r.outage()
	case r.restart(): // in place, or a new generation
		r.setupFailsMove()
		if r.namesRestart() { // chaos_sets_test.go
			return
		}
		if r.checkTable(); r.rng.IntN(2) == 0 {
			r.restartInPlace(r.someMoves)
			r.quietAfterStart("restart in place") // chaos_sets_quiet_test.go
			return
		}
		desired := maps.Clone(r.model)
		r.stopGen()
		r.startGen(desired)
		r.logf("restart as generation %d with %s", r.gens, describe(desired))
		r.quietAfterStart("restart as generation " + fmt.Sprint(r.gens))
	}
}

// someMoves makes a few key moves (while a hive is stopped).
func (r *chaosRun) someMoves() {
	for n := r.rng.IntN(5); n > 0; n-- {
		r.keyMove(r.key(), r.rng.IntN(5))
	}
}

// restart counts a restart and reports whether it is allowed.
func (r *chaosRun) restart() bool { r.restarts++; return r.restarts <= chaosMaxRestarts }

// earlier returns an object inserted for key in this generation, or nil.
func (r *chaosRun) earlier(key string) *item {
	if objs := r.written[key]; len(objs) > 0 {
		return objs[r.rng.IntN(len(objs))]
	}
	return nil
}

// keyMove makes one change to key: 0 delete, 1 a new value, 2 revert, 3
// re-insert as it is or as read earlier (not a Done, which no reconciler
// can tell from a true one), 4 delete and put back as it was (or as a
// restore gives it).
func (r *chaosRun) keyMove(key string, move int) {
	obj, found := r.get(key)
	switch old := r.read[key]; {
	case move == 0:
		r.del(key, "")
	case move == 2 && r.written[key] != nil:
		r.put(key, r.earlier(key), "revert")
	case move == 3 && found && old != nil && !r.anyDone(old) && r.rng.IntN(2) == 0:
		r.put(key, old, "re-insert as read earlier")
		r.read[key] = obj
	case move == 3 && found:
		r.read[key], _ = r.reinsertAsIs(key)
	case move == 4 && found:
		if r.del(key, ""); r.rng.IntN(2) == 0 {
			r.reconciled(r.rng.IntN(len(r.recs)), time.Duration(1+r.rng.IntN(10))*time.Millisecond)
		}
		if r.rng.IntN(3) == 0 {
			obj = r.restored(obj)
		}
		r.put(key, obj, "put back")
	default:
		r.set(key, r.value(), "")
	}
}

// restored returns obj as a restore from a backup gives it: encoded and
// decoded, its Done (or a status.Set's Dones and Errors) without identity,
// of no age.
func (r *chaosRun) restored(obj *item) *item {
	data, err := json.Marshal(obj)
	require.NoError(r.t, err)
	var out item
	require.NoError(r.t, json.Unmarshal(data, &out))
	for _, rec := range r.recs {
		// A decoded status.Set gives its statuses fresh identities: a
		// Refreshing one is the test's mark, not a reconciler's.
		if st := rec.getStatus(&out); st.Kind == status.KindRefreshing {
			rec.target.with(func() { rec.target.rc.testMarked[st.ID()] = true })
		}
	}
	return &out
}

// reinsertAsIs writes key's object back as it is in the transaction that
// reads it: an identical re-insert, which leaves marks in place.
func (r *chaosRun) reinsertAsIs(key string) (*item, bool) {
	wtxn := r.gen.db.WriteTxn(r.gen.table)
	defer wtxn.Abort()
	obj, _, found := r.gen.table.Get(wtxn, itemID.Query(key))
	if !found {
		return nil, false
	}
	_, _, err := r.gen.table.Insert(wtxn, obj.clone())
	require.NoError(r.t, err)
	r.reinserted(obj)
	r.setsWrote(wtxn, []chaosChange{{key: key}})
	r.logf("@%d re-insert %s=%s as it is (%s)", r.gen.table.Revision(wtxn), key, obj.Value, r.statuses(obj))
	wtxn.Commit()
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

// arm makes the next operation on key fail n times, or be held.
func arm(c *chaosTarget, key string, fail bool, n int, afterApply bool) *chaosHold {
	if fail {
		c.failNextN(key, n)
		return nil
	}
	return c.hold(key, afterApply)
}

// scenario changes a key while its operation is held in flight (then maybe
// deleted, set, and the object in flight put back, the delete held in turn),
// parked behind a newer version, or waiting for a retry.
func (r *chaosRun) scenario() {
	k, i, mode := r.key(), r.rng.IntN(len(r.recs)), r.rng.IntN(3)
	c := r.recs[i].target
	h := arm(c, k, mode == 2, 1+r.rng.IntN(2), false)
	r.set(k, r.value(), fmt.Sprintf(", %soperation to be %s", r.recs[i].label(), []string{"held in flight", "parked behind", "waiting for a retry"}[mode]))
	first := r.written[k][len(r.written[k])-1]
	if h == nil { // the operation may not start (deleted, or busy)
		r.waitCalls(c, 1, 20*time.Millisecond)
	} else if closedWithin(h.started, 20*time.Millisecond) && mode == 1 {
		r.keyMove(k, 1)
	}
	if sub := r.rng.IntN(3); mode == 0 && sub < 2 {
		if r.keyMove(k, 0); sub == 1 {
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
	c.release(h)
	r.logf("%s: released", k)
}

// settle writes a fresh value of a key other than not and waits up to d
// for reconciler i's target to hold it: the changes written before it have
// been read (with workers; a loop without them waits in a held operation).
func (r *chaosRun) settle(i int, not string, d time.Duration) bool {
	k := r.key()
	for k == not {
		k = r.key()
	}
	r.values++
	value := fmt.Sprintf("v%d.%d", r.gens, r.values)
	r.set(k, value, ", for the loop to read what came before")
	c := r.recs[i].target
	return c.waitUntil(d, func() bool { return c.data[k] == value || c.healed })
}

// backToTheVersionInFlight holds k's update in flight, deletes k (maybe
// writes a new value), waits for the loop to read that, writes back the
// version in flight (its status identity included), waits again and lets
// the update go: after the delete, the same identity is new work, and the
// target must end up with the version written back (bug 5's schedule).
func (r *chaosRun) backToTheVersionInFlight() {
	if r.cfg.workers == 1 {
		return // the loop waits in the held update: it reads nothing meanwhile
	}
	k, i := r.key(), r.rng.IntN(len(r.recs))
	c := r.recs[i].target
	h := c.hold(k, false)
	r.values++ // a value that applies
	r.set(k, fmt.Sprintf("v%d.%d", r.gens, r.values), fmt.Sprintf(", %supdate held for a write-back of the version in flight", r.recs[i].label()))
	inFlight := r.written[k][len(r.written[k])-1]
	if !closedWithin(h.started, 20*time.Millisecond) {
		c.release(h)
		r.logf("%s: not in flight, no write-back", k)
		return
	}
	r.del(k, "")
	newer := r.rng.IntN(2) == 0
	if r.settle(i, k, 50*time.Millisecond) && newer {
		r.set(k, r.value(), "")
	}
	r.put(k, inFlight, "back to the version in flight")
	r.logf("%s: written back read: %v", k, r.settle(i, k, 50*time.Millisecond))
	c.release(h)
}

// writeBackAfterPrune holds k's update (or its retry, before or after it
// applied), deletes k, prunes, and writes k back as read before the delete:
// while the update is held, over a stop (it then succeeds), or from inside.
func (r *chaosRun) writeBackAfterPrune() {
	k, i := r.key(), r.rng.IntN(len(r.recs))
	c := r.recs[i].target
	retry, applyFirst := r.rng.IntN(3) == 0, r.rng.IntN(2) == 0
	h := arm(c, k, retry, 1, applyFirst)
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
	if r.del(k, ""); r.manualPrune {
		r.logf("%sPrune() while %s is held: ran %v", r.recs[i].label(), k, r.pruneAndWait(i, 20*time.Millisecond))
	}
	yields := r.rng.IntN(4)
	heldStop := applyFirst && r.heldStops < chaosMaxHeldStops && r.rng.IntN(3) == 0
	restart := !heldStop && r.rng.IntN(4) == 0 && r.restart()
	if stop := restart && r.rng.IntN(2) == 0; heldStop || stop || r.rng.IntN(3) == 0 {
		r.put(k, read, "while its update is held, write-back")
		switch {
		case heldStop: // the update applied before the prune removed it
			r.heldStops++
			c.with(func() { h.succeedAtStop = true })
			<-time.After(20 * time.Millisecond) // for a loop with workers to read the write-back
			r.logf("%s: the hive stops while the update is held; it reports success", k)
			r.restartInPlace(r.someMoves)
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
		r.restartInPlace(r.someMoves)
	}
}

// pruneAndWait asks reconciler i for a prune and waits up to d for one.
func (r *chaosRun) pruneAndWait(i int, d time.Duration) bool {
	c, ops, before := r.recs[i].target, r.gen.ops[i], 0
	c.with(func() { before = ops.prunes })
	r.gen.recs[i].Prune()
	return c.waitUntil(d, func() bool { return ops.prunes > before })
}

// heldMany holds the next operation of each key on reconciler i's target,
// writes the keys in one transaction and waits for upTo of them to start.
func (r *chaosRun) heldMany(i int, keys []string, why string, d time.Duration, upTo int) []*chaosHold {
	holds, started := make([]*chaosHold, len(keys)), 0
	for j, k := range keys {
		holds[j] = r.recs[i].target.hold(k, false)
	}
	r.setMany(keys, fmt.Sprintf(", %soperations held%s", r.recs[i].label(), why))
	for _, h := range holds {
		if started < upTo && closedWithin(h.started, d) {
			started++
		}
	}
	return holds
}

// putBackDone deletes a Done object and puts it back as it was (or as a
// restore gives it, its Done without identity), while its delete is held
// (then re-inserts it as it is), or while a new value whose status has no
// identity is held once applied, or (saturate) while every slot is held,
// with a prune before and after: it is new work.
func (r *chaosRun) putBackDone(saturate bool) {
	slots := max(r.roundSize, 2*r.cfg.workers) // the executor's limit
	if saturate && (!r.manualPrune || r.cfg.workers == 1 || slots >= chaosKeys-6) {
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
	if r.rng.IntN(3) == 0 {
		read = r.restored(read)
	}
	var holds []*chaosHold
	if saturate { // a few more than the slots: a parked or queued key takes none
		var keys []string
		for _, n := range r.rng.Perm(chaosKeys) {
			if o := fmt.Sprintf("k%02d", n); o != k {
				keys = append(keys, o)
			}
		}
		holds = r.heldMany(i, keys[:slots+6], ", to take every slot", 5*time.Millisecond, r.cfg.workers)
		<-time.After(2 * time.Millisecond) // for the loop to fill its queue; any order is a valid schedule
		r.del(k, "")
		r.logf("%sPrune() while saturated: ran %v", rec.label(), r.pruneAndWait(i, 20*time.Millisecond))
		r.put(k, read, "put back")
		r.logf("%sPrune() again: ran %v", rec.label(), r.pruneAndWait(i, 20*time.Millisecond))
	} else if len(r.steps)%3 == 0 && !r.cfg.set {
		// Over a new value whose status has no identity (as decoded from
		// YAML), held once applied: nothing tells which status is older.
		holds = []*chaosHold{c.hold(k, true)}
		r.put(k, &item{ID: k, Value: r.value(), Status: status.Status{Kind: status.KindPending}}, "set, without status identity,")
		r.logf("%s: update held once applied: %v", k, closedWithin(holds[0].started, 20*time.Millisecond))
		r.put(k, read, "put back")
	} else {
		holds = []*chaosHold{c.hold(k, false)}
		r.del(k, "")
		r.logf("%s: delete held: %v", k, closedWithin(holds[0].started, 20*time.Millisecond))
		r.put(k, read, "put back")
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

// markThenWrite marks two or three keys Refreshing, as an application
// may, in one transaction with new values of other keys, enough to fill a
// round, whose operations are held: the round defers the last mark at
// least (a round keeps an eighth of its room for deferred changes, oldest
// first). Meanwhile the last marked key gets a new value, with a status
// without identity (but with a status.Set), whose next update fails. Once
// the holds are let go, the round that starts that write may take the
// deferred mark too, and find that very revision: no second version to
// apply, and the failure is retried.
func (r *chaosRun) markThenWrite() {
	slots := r.roundSize // the room of a round: see putBackDone
	if r.cfg.workers > 1 {
		slots = max(r.roundSize, 2*r.cfg.workers)
	}
	if slots > 12 {
		return // more keys than a run can spare
	}
	i := r.rng.IntN(len(r.recs))
	var keys []string
	for _, n := range r.rng.Perm(chaosKeys)[:2+r.rng.IntN(2)+slots] {
		keys = append(keys, fmt.Sprintf("k%02d", n))
	}
	var changes []chaosChange
	var words []string
	for _, k := range keys[:len(keys)-slots] {
		obj, found := r.get(k)
		if !found {
			continue
		}
		obj = obj.clone()
		for _, rec := range r.recs {
			obj = rec.setStatus(obj, status.Refreshing())
			rec.target.with(func() { rec.target.rc.testMarked[rec.getStatus(obj).ID()] = true })
		}
		changes = append(changes, chaosChange{key: k, obj: obj})
		words = append(words, k+"="+obj.Value+" (Refreshing)")
	}
	if len(changes) == 0 {
		return
	}
	k := changes[len(changes)-1].key
	c := r.recs[i].target
	holds := make([]*chaosHold, 0, slots)
	for _, o := range keys[len(keys)-slots:] {
		holds = append(holds, c.hold(o, false))
		changes = append(changes, chaosChange{key: o, value: r.value()})
		words = append(words, o+"="+changes[len(changes)-1].value)
	}
	r.logf("@%d mark and set %s, %soperations held", r.write(changes...), strings.Join(words, " "), r.recs[i].label())
	closedWithin(holds[0].started, 10*time.Millisecond)
	c.failNextN(k, 1)
	if r.cfg.set {
		r.set(k, r.value(), fmt.Sprintf(", its next %supdate to fail", r.recs[i].label()))
	} else {
		r.put(k, &item{ID: k, Value: r.value(), Status: status.Status{Kind: status.KindPending}}, fmt.Sprintf("set, without status identity, its next %supdate to fail,", r.recs[i].label()))
	}
	c.release(holds...)
}

// whileBusy holds a few operations, queues work behind them and lets them
// go while a prune is held or (pause) every reconciler is paused, with a
// newer version of a held key parked: the queued work must wait.
func (r *chaosRun) whileBusy(pause bool) {
	if !pause && !r.manualPrune {
		return
	}
	i := r.rng.IntN(len(r.recs))
	c, keys, queued := r.recs[i].target, r.keys(2+r.rng.IntN(4)), r.keys(1+r.rng.IntN(3))
	holds := r.heldMany(i, keys, "", 10*time.Millisecond, len(keys))
	if pause {
		queued = append(queued, keys[0])
	}
	r.setMany(queued, ", queued behind them")
	var ph *chaosHold
	if pause && !r.gen.paused {
		r.setPaused(true)
	} else if !pause {
		ph = c.hold(pruneHoldKey, false)
		r.gen.recs[i].Prune()
	}
	if pause || closedWithin(ph.started, 20*time.Millisecond) {
		<-time.After(pauseHold)
	}
	c.release(holds...)
	r.waitCalls(c, len(queued), 20*time.Millisecond)
	c.release(ph)
	r.logf("%soperations released (paused: %v)", r.recs[i].label(), pause)
}

// setPaused pauses or resumes every reconciler; markPaused tells targets.
func (r *chaosRun) setPaused(paused bool) {
	r.markPaused(false)
	for _, rc := range r.gen.recs {
		map[bool]func(){true: rc.Pause, false: rc.Resume}[paused]()
	}
	if r.gen.paused = paused; paused {
		r.markPaused(true)
	}
	r.logf("paused: %v", paused)
}

func (r *chaosRun) markPaused(paused bool) {
	for i, rec := range r.recs {
		rec.target.with(func() {
			stopped := r.gen == nil || r.gen.hive == nil || i >= len(r.gen.ops) || r.gen.ops[i].stopped
			if rec.target.pausedAt.Store(map[bool]int64{true: time.Now().UnixNano()}[paused]); !paused {
				rec.target.pausedInRound.Store(false)
				rec.target.pauseMark = nil
			} else {
				rec.target.pauseMark = rec.target.mark(stopped)
			}
		})
	}
}

// pauseFromAnOperation pauses every reconciler from inside an operation of
// a round whose prune is due; another key's operation, held first, keeps a
// loop without workers in its round meanwhile.
func (r *chaosRun) pauseFromAnOperation() {
	k, i := r.key(), r.rng.IntN(len(r.recs))
	c, recs := r.recs[i].target, slices.Clone(r.gen.recs)
	var first []*chaosHold
	if j := r.key(); j != k {
		first = r.heldMany(i, []string{j}, "", 20*time.Millisecond, 1)
	}
	h := c.hold(k, false)
	h.done = make(chan struct{})
	h.inside = func() {
		for _, rc := range recs {
			rc.Pause()
		}
		c.pausedInRound.Store(r.cfg.workers <= 1)
		r.markPaused(true)
	}
	for _, rc := range recs {
		if r.manualPrune {
			rc.Prune()
		}
	}
	r.set(k, r.value(), fmt.Sprintf(", %soperation to pause every reconciler", r.recs[i].label()))
	c.release(first...)
	taken := true
	if !closedWithin(h.started, 20*time.Millisecond) {
		c.with(func() { taken = h.taken; c.open(h) }) // if not taken, no operation takes it now
	}
	c.release(h)
	select {
	case <-h.done:
		r.gen.paused = true
		r.logf("paused: true, from the operation on %s", k)
	case <-h.cut:
	case <-time.After(map[bool]time.Duration{true: 10 * time.Second}[taken]):
	}
	if !r.gen.paused { // it did not start, or was cut short (a timeout)
		r.logf("%s: operation did not pause (started: %v); paused from the test", k, taken)
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
func (r *chaosRun) waitCalls(c *chaosTarget, n int, d time.Duration) bool {
	until := -1
	return c.waitUntil(d, func() bool {
		if until < 0 {
			until = c.calls + n
		}
		return c.calls >= until
	})
}

// putBackAfterARestart writes a few keys (the first held over the stop, or
// failing once), stops, deletes them, starts paused, puts them back, resumes.
func (r *chaosRun) putBackAfterARestart() {
	if !r.restart() {
		return
	}
	keys, c, m := r.keys(1+r.rng.IntN(3)), r.recs[r.rng.IntN(len(r.recs))].target, r.rng.IntN(3)
	var h *chaosHold
	if m < 2 {
		h = arm(c, keys[0], m == 1, 1, false)
		defer c.release(h)
	}
	for _, k := range keys {
		r.set(k, r.value(), ", to be deleted while the hive is stopped and put back after it starts")
	}
	if h == nil || !closedWithin(h.started, 20*time.Millisecond) {
		r.waitCalls(c, r.rng.IntN(3), 10*time.Millisecond)
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

// outage takes the targets down (every call fails with errChaosDown, which
// opens a circuit breaker if the run has one), or brings them back; moves
// go on meanwhile, and heal ends one.
//
// Half the outages answer RetryAfter (0, 1 or 5 ms: a 503 with
// Retry-After, a rate limit; chosen by a hash of the seed and the
// outage's number, so that the random stream is not drawn from). With a breaker, once it is open, the
// calls must come one probe at a time, at most one per probe backoff
// (checkProbes).
func (r *chaosRun) outage() {
	down := false
	r.outages++
	h := fnv.New32a()
	fmt.Fprint(h, r.seed, r.outages)
	ask := []time.Duration{-1, 0, -1, time.Millisecond, -1, 5 * time.Millisecond}[h.Sum32()%6]
	if r.retryMax >= time.Second {
		// RetryAfter still grows the backoff: many quick failures would
		// leave an object's next plain failure a backoff of days.
		ask = -1
	}
	for _, rec := range r.recs {
		rec.target.with(func() {
			rec.target.down = !rec.target.down && !rec.target.healed
			down = rec.target.down
			rec.target.downAsk = ask
		})
	}
	switch {
	case !down:
		r.logf("target up")
	case ask >= 0:
		r.logf("target down, answering RetryAfter(%s)", ask)
	default:
		r.logf("target down")
	}
	if down && r.probeMin > 0 && !r.gen.paused && !r.cfg.batch {
		r.checkProbes(r.recs[0])
	}
}

// checkProbes writes new values of a few keys for the breaker of rec to
// open on in the outage just begun, waits (up to 300ms) for it to open,
// writes a few more, then counts rec's calls over 60ms: at most the
// operations in flight when it opened, and one probe per probe backoff.
// Single operations only: every call then fails with the outage's error,
// where a batch may panic or fail as a whole with another, which closes
// the breaker as documented.
// A machine too slow to open it in time skips the check; one that is
// slow makes fewer calls, not more.
func (r *chaosRun) checkProbes(rec *chaosRec) {
	open := func() bool { return r.breakerOpen(rec) }
	n := 6
	if r.cfg.workers >= 2 && (r.outages/2)%2 == 0 { // shrinkWhileOpen's outage
		n = 24 // more than the workers take before it opens: the rest waits in the pool, behind the gate
	}
	r.setMany(r.keys(n), ", for the breaker to open on")
	deadline := time.Now().Add(300 * time.Millisecond)
	for !open() {
		if time.Now().After(deadline) {
			return
		}
		r.waitCalls(rec.target, 1, time.Millisecond)
	}
	if r.shrinkWhileOpen() {
		defer r.wakesForTheProbe()
	}
	// Work for the probes to take: with it held, each must wait its step.
	r.setMany(r.keys(8), ", the breaker open")
	c := rec.target
	var calls0, inFlight int
	c.with(func() {
		calls0 = c.calls
		for _, o := range r.gen.ops {
			if o.chaosRec == rec {
				inFlight += o.running
			}
		}
	})
	t0 := time.Now()
	window := time.NewTimer(60 * time.Millisecond)
	<-window.C // a measuring window: a slow machine makes fewer calls
	elapsed := time.Since(t0)
	var calls int
	var down bool
	c.with(func() { calls, down = c.calls-calls0, c.down })
	if !down || !open() {
		return // it closed (a classifier that panics) or the target came back
	}
	if bound := inFlight + int(elapsed/r.probeMin) + 2; calls > bound {
		c.with(func() {
			c.violate("%d calls in %s with the breaker open (%d in flight when it opened, probes every %s at most): more than one probe per backoff step",
				calls, elapsed.Round(time.Millisecond), inFlight, r.probeMin)
		})
	}
	r.logf("%d calls in %s with the breaker open", calls, elapsed.Round(time.Millisecond))
}

// shrinkWhileOpen, in every other outage checked with several workers,
// gives the reconcilers two workers and rounds of one as soon as the
// breaker opened: what the workers had not started then (checkProbes
// writes more keys than they take before it opens) moves to the new pool,
// more than it holds, and waits behind the gate; the loops must still wake
// for each probe (a5f0ffa; wakesForTheProbe checks it). It draws nothing
// from the random stream, and reports whether it acted.
func (r *chaosRun) shrinkWhileOpen() bool {
	if r.cfg.workers < 2 || (r.outages/2)%2 != 0 { // outages alternate down and up
		return false
	}
	n := 2
	opts := []reconciler.Option{reconciler.WithConcurrency(n), reconciler.WithRoundLimits(1, nil)}
	for i, rc := range r.gen.recs {
		require.NoError(r.t, rc.Configure(opts...), "%sConfigure", r.recs[i].label())
	}
	r.cfg.workers, r.roundSize = n, 1
	r.opts = append(r.opts, opts...)
	r.logf("configure workers=%d round=1 with the breaker open", n)
	return true
}

// wakesForTheProbe, after shrinkWhileOpen, brings the target back and
// writes a fresh key with nothing else going on: a loop whose pool holds
// more than its room behind the open breaker is woken by nothing but the
// probe's timer (a pause, a prune or a Configure would run a round, which
// grants a probe, whose end wakes it again), and must still get to the key
// (a5f0ffa: it never did). Nothing fails meanwhile (calm). Held operations
// would keep the loop for their own reasons: then it checks nothing.
func (r *chaosRun) wakesForTheProbe() {
	for _, rec := range r.recs {
		held := false
		rec.target.with(func() { held = len(rec.target.holds) > 0 || rec.target.downKeys != nil })
		if held {
			return
		}
	}
	for _, rec := range r.recs {
		rec.target.with(func() { rec.target.down = false })
	}
	r.logf("target up, the breaker still open")
	defer r.calm()()
	for i, rec := range r.recs {
		if !r.settle(i, "", 5*time.Second) {
			rec.target.with(func() {
				rec.target.violate("a fresh key not applied within 5s of the target coming back, the breaker open and the pool shrunk: the loop waits for no probe")
			})
		}
	}
}

// partialOutage makes four keys fail as if the target were down, which
// opens a circuit breaker of up to four failures, then writes a fresh key
// that the target takes: probing objects in turn, the breaker must get to
// it and close within a few probes (each within the retry maximum), not
// probe the failing ones for ever. Then the four recover.
func (r *chaosRun) partialOutage() {
	down := false
	for _, rec := range r.recs {
		rec.target.with(func() { down = down || rec.target.down })
	}
	if r.gen.paused || down {
		return
	}
	bad := r.keys(4)
	for _, rec := range r.recs {
		rec.target.with(func() {
			rec.target.downKeys = map[string]bool{}
			for _, k := range bad {
				rec.target.downKeys[k] = true
			}
		})
	}
	r.setMany(bad, ", failing as if the target were down")
	for _, rec := range r.recs {
		r.waitCalls(rec.target, len(bad), 50*time.Millisecond)
	}
	good := r.key()
	for slices.Contains(bad, good) {
		good = r.key()
	}
	value := fmt.Sprintf("v%d.%d", r.gens, r.values)
	r.values++
	r.set(good, value, " while they fail")
	for _, rec := range r.recs {
		c := rec.target
		if !c.waitUntil(5*time.Second, func() bool { return c.data[good] == value || c.healed }) {
			c.with(func() {
				c.violate("%s=%s, written while %v failed as if the target were down, not applied in 5s: the breaker's probes never got to it", good, value, bad)
			})
		}
	}
	for _, rec := range r.recs {
		rec.target.with(func() { rec.target.downKeys = nil })
	}
	r.logf("%v fail no more", bad)
}

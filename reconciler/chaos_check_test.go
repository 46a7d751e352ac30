package reconciler_test

// The chaos test's checks, along the way and at the end.

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/converge-go/converge/internal/ident"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// violate must be called with c.mu held, as must chaosOps.violate.
func (c *chaosTarget) violate(format string, args ...any) {
	c.violations = append(c.violations, fmt.Sprintf(format, args...))
}

func (o *chaosOps) violate(format string, args ...any) {
	o.target.violate("gen %d: %s%s", o.gen, o.label(), fmt.Sprintf(format, args...))
}

// gateSeen is what an operation saw first thing.
type gateSeen struct{ paused, pruning, pausedInRound bool }

// startGrace is how long after Pause returned (or a prune began) a call
// that passes the marks below may still start: a backstop for a worker
// woken long after, not the check itself, so it is far above how long a
// busy machine deschedules a goroutine.
const startGrace = 200 * time.Millisecond

// pauseHold is how long a pause move keeps operations held, for starts
// that should not happen to show.
const pauseHold = 20 * time.Millisecond

// A startMark is what may still start once every Pause returned, or once
// a prune began: a call whose start was decided before, which is at most
// one per goroutine, and none on a goroutine that was inside a call then
// (it passes the gate again when that call returns) or in a run started
// after the mark. It needs no time: a worker descheduled between the gate
// and its call is let through however late it runs. The zero value of
// *startMark (nil) lets everything through.
type startMark struct {
	none    bool           // made before the run began: no start was decided
	running map[int64]bool // goroutines inside a call when marked
	late    map[int64]bool // goroutines that started a call since
}

// mark returns a startMark of the calls now running; mu must be held.
func (c *chaosTarget) mark(none bool) *startMark {
	m := &startMark{none: none, running: map[int64]bool{}, late: map[int64]bool{}}
	for g, n := range c.inCall {
		if n > 0 {
			m.running[g] = true
		}
	}
	return m
}

// admits reports whether goroutine g may start a call after m, and counts
// the start.
func (m *startMark) admits(g int64) bool {
	if m == nil {
		return true
	}
	ok := !m.none && !m.running[g] && !m.late[g]
	m.late[g] = true
	return ok
}

// goid returns the calling goroutine's ID, as its stack trace shows it.
func goid() int64 {
	var buf [64]byte
	b := bytes.TrimPrefix(buf[:runtime.Stack(buf[:], false)], []byte("goroutine "))
	id, _ := strconv.ParseInt(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

// gate is the first thing a call does: it checks what it may start
// against the marks and counts the goroutine inside a call until callEnd.
func (o *chaosOps) gate() gateSeen {
	now, g := time.Now().UnixNano(), goid()
	late := func(at int64) bool { return at != 0 && now-at > int64(startGrace) }
	var seen gateSeen
	o.target.with(func() {
		c := o.target
		c.inCall[g]++
		c.gated[g]++
		seen = gateSeen{
			paused:        !c.pauseMark.admits(g) || late(c.pausedAt.Load()),
			pruning:       !o.pruneMark.admits(g) || late(o.pruningAt.Load()),
			pausedInRound: c.pausedInRound.Load(),
		}
	})
	return seen
}

// callEnd ends the call gate began.
func (o *chaosOps) callEnd() {
	g := goid()
	o.target.with(func() { o.target.inCall[g]-- })
}

// begin counts a call and checks what it saw at the gate; mu must be held.
func (o *chaosOps) begin(g gateSeen, what string) {
	o.target.calls++
	o.target.notify()
	for why, bad := range map[string]bool{"after Stop returned": o.stopped, "while paused": g.paused, "while a prune ran": g.pruning,
		"after an operation of the round paused the reconciler": g.pausedInRound,
		"before the table was initialized":                      what == "prune" && !o.initialized,
		"before setup succeeded in this run":                    !o.setupDone} {
		if bad {
			o.violate("%s started %s", what, why)
		}
	}
}

func (o *chaosOps) enter(g gateSeen, del bool, key string, rev statedb.Revision) {
	o.target.mu.Lock()
	defer o.target.mu.Unlock()
	op := fmt.Sprintf("%s %s@%d", map[bool]string{false: "update", true: "delete"}[del], key, rev)
	o.begin(g, op)
	o.inFlight[key]++
	o.running++
	if o.inFlight[key] > 1 {
		o.violate("%s while another operation on %s is in flight", op, key)
	}
	if last := o.lastRev[key]; rev < last {
		o.violate("%s after an operation on revision %d", op, last)
	}
	o.lastRev[key] = rev
}

func (o *chaosOps) leave(key string) { o.target.with(func() { o.inFlight[key]--; o.running-- }) }

// tableProblem reports how the table differs from the model, or "".
func (r *chaosRun) tableProblem() string {
	inTable := map[string]string{}
	for obj := range r.gen.table.All(r.gen.db.ReadTxn()) {
		inTable[obj.ID] = obj.Value
	}
	if maps.Equal(inTable, r.model) {
		return ""
	}
	return fmt.Sprintf("the table holds %s, the test wrote %s", describe(inTable), describe(r.model))
}

func (r *chaosRun) checkTable() {
	if problem := r.tableProblem(); problem != "" {
		r.t.Fatalf("seed %d: %s", r.seed, problem)
	}
}

// writeBackUndoesMark reports whether writing back obj may undo the mark a
// change of key's dependency made since obj's statuses were written (see
// WithDependency): unless the test wrote them after that change.
func (r *chaosRun) writeBackUndoesMark(key string, obj *item) bool {
	changed, ok := r.depChangedAt[depOf(key)]
	if !ok {
		return false
	}
	at, ok := r.writtenAt[obj]
	return !ok || at <= changed
}

// violations returns what the targets recorded against the guarantees.
func (r *chaosRun) violations() string {
	var all []string
	for _, rec := range r.recs {
		rec.target.with(func() { all = append(all, rec.target.violations...) })
	}
	return map[bool]string{true: fmt.Sprintf("%d violation(s):\n  %s", len(all), strings.Join(all, "\n  "))}[len(all) > 0]
}

func (r *chaosRun) checkViolations() {
	if v := r.violations(); v != "" {
		r.t.Fatalf("seed %d: %s", r.seed, v)
	}
}

// until re-checks cond on every change of a target or the table, and every
// few milliseconds (health), until it returns "" or timeout passes.
func (r *chaosRun) until(timeout time.Duration, cond func() string) string {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var changed [2]<-chan struct{}
		for i, rec := range r.recs[:min(len(r.recs), len(changed))] { // the others: the tick
			rec.target.with(func() { changed[i] = rec.target.changed })
		}
		_, tableWatch := r.gen.table.AllWatch(r.gen.db.ReadTxn())
		problem := cond()
		if problem == "" {
			return ""
		}
		select {
		case <-changed[0]:
		case <-changed[1]:
		case <-tableWatch:
		case <-tick.C:
		case <-deadline.C:
			return problem
		}
	}
}

// waitFor fails the test unless cond comes to return "" within timeout.
func (r *chaosRun) waitFor(what string, timeout time.Duration, cond func() string) {
	if problem := r.until(timeout, cond); problem != "" {
		if os.Getenv("CONVERGE_CHAOS_STACKS") == "1" {
			// What each loop was doing: the goroutines, the calls and prunes.
			buf := make([]byte, 1<<22)
			var b strings.Builder
			fmt.Fprintf(&b, "rev %d", r.gen.table.Revision(r.gen.db.ReadTxn()))
			for i, rec := range r.recs {
				ops := r.gen.ops[i]
				rec.target.with(func() { fmt.Fprintf(&b, "; %s calls %d prunes %d", rec.name, rec.target.calls, ops.prunes) })
			}
			r.t.Logf("at the failure: %s; goroutines:\n%s", b.String(), buf[:runtime.Stack(buf, true)])
		}
		r.t.Fatalf("seed %d: %s: not reached within %s: %s\n%s", r.seed, what, timeout, problem, r.violations())
	}
}

// reconciled waits up to d for reconciler i to reach the last change, and
// checks what that promises.
func (r *chaosRun) reconciled(i int, d time.Duration) bool {
	rev, cut := r.gen.table.Revision(r.gen.db.ReadTxn()), ident.Last()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	reached, low, err := r.gen.recs[i].WaitUntilReconciled(ctx, rev)
	cancel()
	r.logf("%swait for @%d: reached @%d, retry low @%d, err=%v", r.recs[i].label(), rev, reached, low, err)
	r.checkTable()
	if err == nil && reached >= rev {
		r.checkNonePending(i, rev, cut)
	}
	if err == nil && reached >= rev && low == 0 {
		r.checkDoneApplied(i, rev)
	}
	return err == nil && reached >= rev
}

// reconciledTo waits up to d for reconciler i to reach m, an earlier write
// of the test, and checks that no object is Pending for it with a status
// made by then and left as the test wrote it by then.
func (r *chaosRun) reconciledTo(i int, m chaosMark, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	reached, low, err := r.gen.recs[i].WaitUntilReconciled(ctx, m.rev)
	cancel()
	r.logf("%swait for the write @%d: reached @%d, retry low @%d, err=%v", r.recs[i].label(), m.rev, reached, low, err)
	if err != nil || reached < m.rev {
		return
	}
	rec := r.recs[i]
	var pending []string
	for obj, objRev := range r.gen.table.All(r.gen.db.ReadTxn()) {
		st := rec.getStatus(obj)
		if st.Kind != status.KindPending || st.ID() > m.cut || r.lastWrite[obj.ID] > m.rev {
			continue
		}
		if objRev > m.rev && st.ID() != 0 && !r.wrote(rec, obj.ID, st.ID()) {
			// A dependency's mark after m (see checkNonePending): the
			// dependencies a new generation carries mark their objects
			// once the tracker reads them, which may be after the
			// objects' write and before m's cut was taken.
			continue
		}
		pending = append(pending, fmt.Sprintf("%s=%s@%d (written @%d, status id %d)", obj.ID, obj.Value, objRev, r.lastWrite[obj.ID], st.ID()))
	}
	if len(pending) > 0 {
		r.t.Fatalf("seed %d: %sWaitUntilReconciled(@%d) returned, yet objects written by then are Pending: %s\n%s",
			r.seed, rec.label(), m.rev, strings.Join(pending, ", "), r.violations())
	}
}

// checkNonePending checks WaitUntilReconciled's promise once it returned
// for rev, the table's revision when the wait began: no object is Pending
// for reconciler i with a status made before then (cut: the generator
// writes nothing meanwhile, but a dependency may mark an object Pending
// anew).
func (r *chaosRun) checkNonePending(i int, rev statedb.Revision, cut uint64) {
	rec := r.recs[i]
	var pending []string
	for obj, objRev := range r.gen.table.All(r.gen.db.ReadTxn()) {
		st := rec.getStatus(obj)
		if st.Kind != status.KindPending || st.ID() > cut || (st.ID() == 0 && r.lastWrite[obj.ID] > rev) {
			continue
		}
		if objRev > rev && st.ID() != 0 && !r.wrote(rec, obj.ID, st.ID()) {
			// Written after rev with a Pending the test did not write: a
			// dependency's mark of a Pending object (a new status of the
			// same time), made between the test's write and the wait. A
			// new version: the wait for rev does not owe it.
			continue
		}
		pending = append(pending, fmt.Sprintf("%s=%s@%d", obj.ID, obj.Value, objRev))
	}
	if len(pending) > 0 {
		r.t.Fatalf("seed %d: %sWaitUntilReconciled(@%d) returned, yet objects are Pending: %s\n%s",
			r.seed, rec.label(), rev, strings.Join(pending, ", "), r.violations())
	}
}

// wrote reports whether an object the test inserted for key in this
// generation carries, for rec, the status identity id.
func (r *chaosRun) wrote(rec *chaosRec, key string, id uint64) bool {
	return slices.ContainsFunc(r.written[key], func(obj *item) bool { return rec.getStatus(obj).ID() == id })
}

// checkDoneApplied checks WaitUntilReconciled's promise once it returned for
// rev with no retry left: every object Done for reconciler i is applied (an
// object put back with a Done from before its delete or a prune included).
func (r *chaosRun) checkDoneApplied(i int, rev statedb.Revision) {
	rec := r.recs[i]
	rec.target.mu.Lock()
	defer rec.target.mu.Unlock()
	var wrong []string
	for obj := range r.gen.table.All(r.gen.db.ReadTxn()) {
		st := rec.getStatus(obj)
		if r.driftLeftLocked(i, obj, rec.target.data[obj.ID]) {
			continue // reported and left (WithDriftReportOnly)
		}
		if got, ok := rec.target.data[obj.ID]; st.Kind == status.KindDone && (!ok || got != obj.Value) {
			wrong = append(wrong, fmt.Sprintf("%s=%s (status id %d; the target holds %q)", obj.ID, obj.Value, st.ID(), got))
		}
	}
	if len(wrong) > 0 {
		r.t.Fatalf("seed %d: %sWaitUntilReconciled(@%d) returned, yet objects marked Done are not applied: %s",
			r.seed, rec.label(), rev, strings.Join(wrong, ", "))
	}
}

// healAndCheck turns the faults off, replaces later values, and checks the
// initial prune and convergence, again once the retry queues are empty.
func (r *chaosRun) healAndCheck(settings string) {
	for _, rec := range r.recs {
		rec.target.heal()
	}
	if r.logf("heal"); r.gen.paused {
		r.setPaused(false)
	}
	if r.initIn >= 0 {
		r.markInitialized()
	}
	g := r.gen
	for _, k := range slices.Sorted(maps.Keys(r.model)) {
		if isLater(r.model[k]) {
			r.values++
			r.set(k, fmt.Sprintf("v%d.%d", r.gens, r.values), " in place of a later value")
		}
	}
	for i, rec := range r.recs {
		ops, pruned := g.ops[i], false
		r.waitFor(rec.label()+"the initial prune", chaosHealTimeout, r.confirming(func() (problem string) {
			rec.target.with(func() {
				if pruned = ops.lastPruneOK; ops.prunes == 0 || ops.pruneRunning {
					problem = fmt.Sprintf("%d prune(s) done, one running: %v", ops.prunes, ops.pruneRunning)
				}
			})
			return problem
		}))
		if !pruned { // faults were on: another, checked by converged
			g.recs[i].Prune()
		}
	}
	r.waitFor("convergence", chaosHealTimeout, r.confirming(r.converged))
	ctx, cancel := context.WithTimeout(context.Background(), chaosHealTimeout)
	defer cancel()
	rev, calls := g.table.Revision(g.db.ReadTxn()), 0
	for i, rec := range r.recs {
		require.NoError(r.t, reconciler.WaitForReconciliation(ctx, g.db, g.table, g.indexes[i]), "seed %d: %sWaitForReconciliation", r.seed, rec.label())
	}
	r.setsWait(ctx)
	r.waitFor("retry queues to drain", chaosHealTimeout, func() string {
		for i, rec := range r.recs {
			if reached, low, err := g.recs[i].WaitUntilReconciled(ctx, rev); err != nil || reached < rev || low != 0 {
				return fmt.Sprintf("%sreached @%d of @%d, lowest retry @%d, err=%v", rec.label(), reached, rev, low, err)
			}
		}
		return ""
	})
	r.waitFor("convergence after the retries", chaosHealTimeout, r.confirming(r.converged))
	for _, rec := range r.recs {
		rec.target.with(func() { calls += rec.target.calls })
	}
	r.checkViolations()
	r.t.Logf("seed %d (%s): %d steps, %d generation(s), %d calls, converged on %d objects",
		r.seed, settings, len(r.steps), r.gens, calls, g.table.NumObjects(g.db.ReadTxn()))
}

// converged returns what differs from every target holding the table, with
// current dependencies, every object settled and health OK.
func (r *chaosRun) converged() string {
	g := r.gen
	var problems []string
	if problem := r.tableProblem(); problem != "" {
		problems = append(problems, problem)
	}
	problems = append(problems, r.driftProblems()...)
	problems = append(problems, r.setsProblems()...)
	for i, rec := range r.recs {
		rec.target.mu.Lock()
		data, depSeen, prunedOK := maps.Clone(rec.target.data), maps.Clone(rec.target.depSeen), g.ops[i].lastPruneOK
		rec.target.mu.Unlock()
		add := func(format string, args ...any) {
			problems = append(problems, rec.label()+fmt.Sprintf(format, args...))
		}
		txn := g.db.ReadTxn()
		for obj := range g.table.All(txn) {
			got, has := data[obj.ID]
			delete(data, obj.ID)
			st := rec.getStatus(obj)
			if isPoison(obj.Value) {
				if st.Kind != status.KindError || !st.Terminal || !strings.Contains(st.Error, "poison value") {
					add("%s=%s is %s, want a terminal Error", obj.ID, obj.Value, st)
				}
				if has && got == obj.Value {
					add("target holds poison %s=%s", obj.ID, got)
				}
				continue
			}
			if st.Kind != status.KindDone && !(r.refresh && st.Kind == status.KindRefreshing) {
				add("%s=%s is %s", obj.ID, obj.Value, st)
			}
			if r.driftLeft(i, obj, got) {
				continue // reported and left (WithDriftReportOnly): see driftProblems
			}
			if !has || got != obj.Value {
				add("target has %s=%q (present: %v), table %q", obj.ID, got, has, obj.Value)
			}
			want := ""
			if d, _, found := g.deps.Get(txn, chaosDepID.Query(depOf(obj.ID))); found {
				want = d.Value
			}
			if seen := depSeen[obj.ID]; has && seen != want && !r.depStale[obj.ID] {
				add("%s was last applied with dependency %s=%q, it is %q now", obj.ID, depOf(obj.ID), seen, want)
			}
		}
		for k, v := range data {
			add("deleted %s=%s still in the target", k, v)
		}
		if !prunedOK {
			add("the last prune failed")
		}
		if h := g.health.GetChild(rec.healthName()); h == nil {
			add("no health for %s", rec.healthName())
		} else {
			h.Lock()
			if h.Level != cell.StatusOK {
				add("%s health %s: %s: %v", rec.healthName(), h.Level, h.Status, h.Error)
			}
			h.Unlock()
		}
	}
	return strings.Join(problems, "; ")
}

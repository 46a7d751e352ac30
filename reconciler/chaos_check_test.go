package reconciler_test

// The chaos test's checks: what the operations see as they start (one
// operation per key, revision order, nothing while paused, pruning or
// stopped), the table against the model, and convergence once the faults
// are healed.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

func (c *chaosTarget) violate(format string, args ...any) {
	c.violations = append(c.violations, fmt.Sprintf(format, args...))
}

func (o *chaosOps) violate(format string, args ...any) {
	o.c.violate("gen %d%s: %s", o.gen, o.label(), fmt.Sprintf(format, args...))
}

func (o *chaosOps) label() string {
	if o.name == "" {
		return ""
	}
	return " reconciler " + o.name
}

// gateSeen is what an operation saw first thing: whether every reconciler
// was paused, and whether its reconciler's prune ran.
type gateSeen struct{ paused, pruning, pausedInRound bool }

// startGrace is how long after Pause returned (or a prune began) an
// operation may still show its first line. The reconciler decides at the
// gate, just before it calls the operation; the operation's first line
// comes a few instructions later, but the goroutine may be descheduled in
// between. A start later than this after Pause returned is the
// reconciler's, not the scheduler's; the bugs this checks for start much
// later (after a commit, a round, a release by the test).
const startGrace = 20 * time.Millisecond

func (o *chaosOps) gate() gateSeen {
	now := time.Now().UnixNano()
	late := func(at int64) bool { return at != 0 && now-at > int64(startGrace) }
	return gateSeen{late(o.c.pausedAt.Load()), late(o.pruningAt.Load()), o.c.pausedInRound.Load()}
}

func (o *chaosOps) enter(g gateSeen, op, key string, rev statedb.Revision) {
	c := o.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	c.notify()
	if o.stopped {
		o.violate("%s %s@%d started after Stop returned", op, key, rev)
	}
	if g.paused {
		o.violate("%s %s@%d started while paused", op, key, rev)
	}
	if g.pausedInRound {
		o.violate("%s %s@%d started after an operation of the round paused the reconciler", op, key, rev)
	}
	if g.pruning {
		o.violate("%s %s@%d started while a prune ran", op, key, rev)
	}
	o.inFlight[key]++
	o.running++
	if o.inFlight[key] > 1 {
		o.violate("%s %s@%d while another operation on %s is in flight", op, key, rev, key)
	}
	if last := o.lastRev[key]; rev < last {
		o.violate("%s %s@%d after an operation on revision %d", op, key, rev, last)
	}
	o.lastRev[key] = rev
}

func (o *chaosOps) leave(key string) {
	o.c.mu.Lock()
	o.inFlight[key]--
	o.running--
	o.c.mu.Unlock()
}

// tableProblem reports how the table's key→value pairs differ from the
// model, or "".
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

// writeBackUndoesMark reports whether writing back obj, an object written
// or read earlier, may undo the mark that a change of key's dependency made
// since obj's statuses were written: then an update of key that ran with
// the dependency's old value for one of those statuses stands, as it must
// for a write-back that says "this version" (see WithDependency). Only
// statuses the test wrote itself, after the last change of the
// dependency, are known not to.
func (r *chaosRun) writeBackUndoesMark(key string, obj *item) bool {
	changed, ok := r.depChangedAt[depOf(key)]
	if !ok {
		return false
	}
	at, ok := r.writtenAt[obj]
	return !ok || at <= changed
}

func (r *chaosRun) checkViolations() {
	if all := r.violations(); len(all) > 0 {
		r.t.Fatalf("seed %d: %d violation(s):\n  %s", r.seed, len(all), strings.Join(all, "\n  "))
	}
}

// violations returns what the targets recorded against the guarantees.
func (r *chaosRun) violations() []string {
	var all []string
	for _, rec := range r.recs {
		rec.target.mu.Lock()
		all = append(all, rec.target.violations...)
		rec.target.mu.Unlock()
	}
	return all
}

// waitFor polls cond whenever a target or the table changes (and every few
// milliseconds, for health) until it holds or the deadline passes.
func (r *chaosRun) waitFor(what string, timeout time.Duration, cond func() string) {
	g := r.gen
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var changed []<-chan struct{}
		for _, rec := range r.recs {
			rec.target.mu.Lock()
			changed = append(changed, rec.target.changed)
			rec.target.mu.Unlock()
		}
		_, tableWatch := g.table.AllWatch(g.db.ReadTxn())
		problem := cond()
		if problem == "" {
			return
		}
		var second <-chan struct{}
		if len(changed) > 1 {
			second = changed[1]
		}
		select {
		case <-changed[0]:
		case <-second:
		case <-tableWatch:
		case <-tick.C:
		case <-deadline.C:
			// Both: a violation may explain the problem, or not.
			msg := fmt.Sprintf("seed %d: %s: not reached within %s: %s", r.seed, what, timeout, problem)
			if all := r.violations(); len(all) > 0 {
				msg += fmt.Sprintf("\nand %d violation(s):\n  %s", len(all), strings.Join(all, "\n  "))
			}
			r.t.Fatal(msg)
		}
	}
}

// healAndCheck turns the faults off and checks that the system converges.
func (r *chaosRun) healAndCheck(settings string) {
	for _, rec := range r.recs {
		rec.target.heal()
	}
	r.logf("heal")
	if r.gen.paused {
		r.setPaused(false)
	}
	if r.initIn >= 0 {
		r.markInitialized()
	}
	g := r.gen
	// Values retried only in a century are replaced, as a user fixes
	// them: the new version must not wait behind that retry.
	for _, k := range slices.Sorted(maps.Keys(r.model)) {
		if isLater(r.model[k]) {
			r.values++
			v := fmt.Sprintf("v%d.%d", r.gens, r.values)
			rev := r.write(chaosChange{key: k, value: v})
			r.logf("@%d set %s=%s in place of a later value", rev, k, v)
		}
	}

	for i, rec := range r.recs {
		// The first prune after initialization must happen by itself. If
		// the last one failed (faults were on), ask for another.
		c, ops := rec.target, g.ops[i]
		r.waitFor(rec.label()+"the initial prune", chaosHealTimeout, func() string {
			c.mu.Lock()
			defer c.mu.Unlock()
			if ops.prunes == 0 || ops.pruneRunning {
				return fmt.Sprintf("%d prune(s) done, one running: %v", ops.prunes, ops.pruneRunning)
			}
			return ""
		})
		c.mu.Lock()
		pruned := ops.lastPruneOK
		c.mu.Unlock()
		if !pruned {
			g.recs[i].Prune()
			r.waitFor(rec.label()+"a prune after healing", chaosHealTimeout, func() string {
				c.mu.Lock()
				defer c.mu.Unlock()
				if !ops.lastPruneOK {
					return "the last prune failed"
				}
				return ""
			})
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), chaosHealTimeout)
	defer cancel()
	for i, rec := range r.recs {
		if err := reconciler.WaitForReconciliation(ctx, g.db, g.table, g.indexes[i]); err != nil {
			var stuck []string
			for obj, rev := range g.table.All(g.db.ReadTxn()) {
				if st := rec.getStatus(obj); st.IsPendingOrRefreshing() {
					stuck = append(stuck, fmt.Sprintf("%s=%s@%d %s (id %d)", obj.ID, obj.Value, rev, st, st.ID()))
				}
			}
			r.t.Fatalf("seed %d: %sobjects still to reconcile: %v: %s", r.seed, rec.label(), err, strings.Join(stuck, ", "))
		}
	}
	r.waitFor("convergence", chaosHealTimeout, r.converged)

	// An operation that started before the heal phase may still fail after
	// the state above was observed (a delete applied and then failed leaves
	// nothing to see in the table or the target), so wait for the retry
	// queues to drain, then check the state again.
	rev := g.table.Revision(g.db.ReadTxn())
	r.waitFor("retry queues to drain", chaosHealTimeout, func() string {
		for i, rec := range r.recs {
			reached, low, err := g.recs[i].WaitUntilReconciled(ctx, rev)
			switch {
			case err != nil:
				return err.Error()
			case reached < rev:
				return fmt.Sprintf("%sreached revision %d of %d", rec.label(), reached, rev)
			case low != 0:
				return fmt.Sprintf("%sobjects still queued for retry (lowest revision %d)", rec.label(), low)
			}
		}
		return ""
	})
	r.waitFor("convergence after the retries", chaosHealTimeout, r.converged)
	calls := 0
	for _, rec := range r.recs {
		rec.target.mu.Lock()
		calls += rec.target.calls
		rec.target.mu.Unlock()
	}
	r.checkViolations()
	r.t.Logf("seed %d (%s): %d steps, %d generation(s), %d calls, converged on %d objects",
		r.seed, settings, len(r.steps), r.gens, calls, g.table.NumObjects(g.db.ReadTxn()))
}

// converged returns "" if every target matches the table exactly, every
// object is settled and health is OK; otherwise what is wrong.
func (r *chaosRun) converged() string {
	g := r.gen
	var problems []string
	if problem := r.tableProblem(); problem != "" {
		problems = append(problems, problem)
	}
	for _, rec := range r.recs {
		data, _ := rec.target.snapshot()
		rec.target.mu.Lock()
		depSeen := maps.Clone(rec.target.depSeen)
		rec.target.mu.Unlock()
		inTable := map[string]bool{}
		for obj := range g.table.All(g.db.ReadTxn()) {
			inTable[obj.ID] = true
			got, has := data[obj.ID]
			st := rec.getStatus(obj)
			if isPoison(obj.Value) {
				if st.Kind != status.KindError || !st.Terminal || !strings.Contains(st.Error, "poison value") {
					problems = append(problems, fmt.Sprintf("%s%s=%s is %s, want a terminal Error", rec.label(), obj.ID, obj.Value, st))
				}
				if has && got == obj.Value {
					problems = append(problems, fmt.Sprintf("%starget holds poison %s=%s", rec.label(), obj.ID, got))
				}
				continue
			}
			if st.Kind != status.KindDone && !(r.refresh && st.Kind == status.KindRefreshing) {
				problems = append(problems, fmt.Sprintf("%s%s=%s is %s", rec.label(), obj.ID, obj.Value, st))
			}
			if !has || got != obj.Value {
				problems = append(problems, fmt.Sprintf("%starget has %s=%q (present: %v), table %q", rec.label(), obj.ID, got, has, obj.Value))
			}
			want := ""
			if d, _, found := g.deps.Get(g.db.ReadTxn(), chaosDepID.Query(depOf(obj.ID))); found {
				want = d.Value
			}
			if seen := depSeen[obj.ID]; has && seen != want && !r.depStale[obj.ID] {
				problems = append(problems, fmt.Sprintf("%s%s was last applied with dependency %s=%q, it is %q now", rec.label(), obj.ID, depOf(obj.ID), seen, want))
			}
		}
		for k, v := range data {
			if !inTable[k] {
				problems = append(problems, fmt.Sprintf("%sdeleted %s=%s still in the target", rec.label(), k, v))
			}
		}
		if h := g.health.GetChild(rec.healthName()); h == nil {
			problems = append(problems, "no health for "+rec.healthName())
		} else {
			h.Lock()
			if h.Level != cell.StatusOK {
				problems = append(problems, fmt.Sprintf("%s health %s: %s: %v", rec.healthName(), h.Level, h.Status, h.Error))
			}
			h.Unlock()
		}
	}
	return strings.Join(problems, "; ")
}

// checkDoneApplied checks what WaitUntilReconciled promised when it
// returned for rev with no object waiting for a retry: every change up to
// rev, the last the test made, is applied, so every object whose status of
// reconciler i says Done is in its target with its value. An object put
// back with a Done status from before its delete or a prune is new work
// (see lifecycles.stale) and must have been applied too.
func (r *chaosRun) checkDoneApplied(i int, rev statedb.Revision) {
	rec := r.recs[i]
	rec.target.mu.Lock()
	defer rec.target.mu.Unlock()
	var wrong []string
	for obj := range r.gen.table.All(r.gen.db.ReadTxn()) {
		st := rec.getStatus(obj)
		if got, ok := rec.target.data[obj.ID]; st.Kind == status.KindDone && (!ok || got != obj.Value) {
			wrong = append(wrong, fmt.Sprintf("%s=%s (status id %d; the target holds %q)", obj.ID, obj.Value, st.ID(), got))
		}
	}
	if len(wrong) > 0 {
		r.t.Fatalf("seed %d: %sWaitUntilReconciled(@%d) returned, yet objects marked Done are not applied: %s",
			r.seed, rec.label(), rev, strings.Join(wrong, ", "))
	}
}

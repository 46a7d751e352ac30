package reconciler_test

// The chaos test's drift check (WithDriftCheck): a seed runs without it,
// with it repairing, or with it only reporting (WithDriftReportOnly),
// drawn from an RNG of its own so that the schedule stays the seed's. The
// check compares the object with the target's content (its value and the
// dependency its last update saw) and fails now and then, as an Update
// does. The move driftThenRefresh changes a target entry behind the
// reconciler's back and marks the object Refreshing; the model checks that
// no Update follows a check that found its object in sync (or, report-only,
// drifted), and after convergence that the drift was repaired, or reported
// and left.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// chaosDriftMode is a chaos run's drift check setting.
type chaosDriftMode uint8

const (
	driftOff chaosDriftMode = iota
	driftRepair
	driftReport
)

func (m chaosDriftMode) String() string { return [...]string{"off", "repair", "report"}[m] }

// chaosDriftModeOf draws the drift check setting of seed from an RNG of its
// own: off for a third of the seeds, repairing or report-only for the rest.
func chaosDriftModeOf(seed uint64) chaosDriftMode {
	return chaosDriftMode(rand.New(rand.NewPCG(seed, 0xd71f7)).IntN(3))
}

// driftBook is what one target knows of the drift checks: per key, the
// last verdict and the status it was for. Guarded by the target's mu.
type driftBook struct {
	mode    chaosDriftMode
	verdict map[string]driftSeen
}

type driftSeen struct {
	statusID     uint64
	inSync       bool
	value, held  string // the object's value, and what the target held for it
	dep, depSeen string // the dependency's value, and the one the target's entry saw
}

// chaosDrift is a drift made by driftThenRefresh: the target's value put in
// reconciler i's target, and the revision of the Refreshing mark that
// followed (the test's last write of the key, while the drift stands).
type chaosDrift struct {
	i     int
	value string
	rev   statedb.Revision
	step  int // len(r.steps) when it was made
}

// driftOptions returns the options of the run's drift mode for ops.
func (o *chaosOps) driftOptions() []reconciler.Option {
	c := o.target
	var mode chaosDriftMode
	c.with(func() {
		if c.drift != nil {
			mode = c.drift.mode
		}
	})
	switch mode {
	case driftRepair:
		return []reconciler.Option{reconciler.WithDriftCheck(o.driftCheck)}
	case driftReport:
		return []reconciler.Option{reconciler.WithDriftCheck(o.driftCheck), reconciler.WithDriftReportOnly()}
	}
	return nil
}

// driftCheck is the check: in sync when the target holds it.Value, updated
// with the dependency it has now. It fails in an outage, and now and then
// until the faults heal.
func (o *chaosOps) driftCheck(ctx context.Context, txn statedb.ReadTxn, _ statedb.Revision, it *item) (inSync bool, err error) {
	defer o.noteCheck(it.ID, &inSync, &err)
	c := o.target
	dep := ""
	if d, _, found := o.deps.Get(txn, chaosDepID.Query(depOf(it.ID))); found {
		dep = d.Value
	}
	c.with(func() {
		c.given(it.ID, o.getStatus(it)) // a re-check's marking the check settles must be explained as one Update gets
		switch {
		case c.down || c.downKeys[it.ID]:
			err = fmt.Errorf("check %s: %w", it.ID, errChaosDown)
		case !c.healed && !c.rc.spared(it.ID) && c.rng.Float64() < c.failProb/2:
			err = fmt.Errorf("check %s: %w", it.ID, errChaos)
		default:
			got, ok := c.data[it.ID]
			inSync = ok && got == it.Value && c.depSeen[it.ID] == dep
			c.drift.verdict[it.ID] = driftSeen{statusID: o.getStatus(it).ID(), inSync: inSync, value: it.Value, held: got, dep: dep, depSeen: c.depSeen[it.ID]}
		}
	})
	if err == nil {
		err = ctx.Err()
	}
	return inSync, err
}

// checkDriftVerdict checks, as Update starts for it (c.mu held), that the
// last check of it, if it was for this status, asked for a repair.
func (c *chaosTarget) checkDriftVerdict(it *item, st status.Status) {
	if c.drift == nil || c.drift.mode == driftOff || st.ID() == 0 {
		return
	}
	v, ok := c.drift.verdict[it.ID]
	if !ok || v.statusID != st.ID() {
		return
	}
	delete(c.drift.verdict, it.ID) // one Update per check
	if v.inSync {
		c.violations = append(c.violations, fmt.Sprintf("update %s=%s (status %d) after its check found it in sync", it.ID, it.Value, st.ID()))
	}
	// Report-only repairs what its check found drifted only if the key's
	// last update failed: the reconciler knows that, the model does not.
}

// driftLeft reports whether reconciler i's target holding got for obj is
// drift reported and left: the run only reports, the last check of the
// key found obj's value drifted and the target's entry is as it saw it.
func (r *chaosRun) driftLeft(i int, obj *item, got string) bool {
	if r.driftMode != driftReport {
		return false
	}
	c, left := r.recs[i].target, false
	c.with(func() {
		v, ok := c.drift.verdict[obj.ID]
		left = ok && !v.inSync && v.value == obj.Value && v.held == got && c.depSeen[obj.ID] == v.depSeen
	})
	return left
}

// setDriftMode gives every target of the run its drift book.
func (r *chaosRun) setDriftMode(mode chaosDriftMode) {
	r.driftMode = mode
	for _, rec := range r.recs {
		rec.target.with(func() { rec.target.drift = &driftBook{mode: mode, verdict: map[string]driftSeen{}} })
	}
}

// driftThenRefresh lets every reconciler catch up, then changes one
// target's entry of a settled key behind its reconciler's back and marks
// the object Refreshing, as the refresh sweep would.
func (r *chaosRun) driftThenRefresh() {
	if r.driftMode == driftOff {
		return
	}
	for i := range r.recs {
		if !r.reconciled(i, 50*time.Millisecond) {
			r.logf("drift: not settled, none made")
			return
		}
	}
	i, k := r.rng.IntN(len(r.recs)), r.key()
	rec := r.recs[i]
	obj, found := r.get(k)
	if !found || isPoison(obj.Value) || isLater(obj.Value) || rec.getStatus(obj).Kind != status.KindDone {
		return
	}
	held := false
	rec.target.with(func() { held = rec.target.data[k] == obj.Value })
	if !held {
		return
	}
	r.values++
	drift := fmt.Sprintf("drift%d.%d", r.gens, r.values)
	rec.target.with(func() { rec.target.data[k] = drift; rec.target.notify() })
	obj = obj.clone()
	for _, rc := range r.recs {
		obj = rc.setStatus(obj, status.Refreshing())
		rc.target.with(func() { rc.target.rc.testMarked[rc.getStatus(obj).ID()] = true })
	}
	rev := r.write(chaosChange{key: k, obj: obj})
	r.drifts[k] = chaosDrift{i: i, value: drift, rev: rev, step: len(r.steps)}
	r.logf("@%d %sdrift %s: the target holds %s; marked Refreshing (%s)", rev, rec.label(), k, drift, r.driftMode)
}

// driftStands returns the drift left in reconciler i's target for key, if
// it stands: the run only reports drift, and the test has not written the
// key since, nor its dependency: a check that failed leaves the object in
// Error, which a dependency marks Pending, to be applied again (the
// reconciler cannot tell that Error from one of an update that failed).
func (r *chaosRun) driftStands(i int, key string) (string, bool) {
	d, ok := r.drifts[key]
	if !ok || r.driftMode != driftReport || d.i != i || r.lastWrite[key] != d.rev {
		return "", false
	}
	if at, ok := r.depChangedAt[depOf(key)]; ok && at >= d.step {
		return "", false
	}
	return d.value, true
}

// driftProblems returns what breaks the drift check's promise once the
// run converged: a drift still standing in report-only mode was left in
// the target (and its object is Done), one in repair mode was repaired
// (converged checks that the target holds the table).
func (r *chaosRun) driftProblems() (problems []string) {
	for key := range r.drifts {
		for i, rec := range r.recs {
			want, ok := r.driftStands(i, key)
			if !ok {
				continue
			}
			var got string
			rec.target.with(func() { got = rec.target.data[key] })
			if got != want {
				problems = append(problems, fmt.Sprintf("%sdrift of %s reported only, yet the target holds %q, not %q", rec.label(), key, got, want))
			}
		}
	}
	return problems
}

// driftLeftLocked is driftLeft with the target's mu held.
func (r *chaosRun) driftLeftLocked(i int, obj *item, got string) bool {
	if r.driftMode != driftReport {
		return false
	}
	c := r.recs[i].target
	v, ok := c.drift.verdict[obj.ID]
	return ok && !v.inSync && v.value == obj.Value && v.held == got && c.depSeen[obj.ID] == v.depSeen
}

// chaosPoisonOdds: one step in chaosPoisonOdds of a report-only run makes
// putBackPoisonThenMark.
const chaosPoisonOdds = 12

// putBackPoisonThenMark (b080606): in a report-only run, a poison value
// fails for good, is deleted (the delete applied), and is put back with
// its terminal Error while the reconcilers are paused; its dependency is
// then written, and once the mark is in the table they resume. Its version
// never reached the target: it must fail again, not be checked, found
// missing and left Done (a mark of Refreshing was taken for a version
// applied). It draws from raiseRNG, and leaves the "-set" runs alone,
// whose writes draw from the schedule.
func (r *chaosRun) putBackPoisonThenMark() {
	if r.driftMode != driftReport || r.cfg.set || r.raiseRNG.IntN(chaosPoisonOdds) != 0 {
		return
	}
	if why := r.unquiet(); why != "" {
		return
	}
	x := fmt.Sprintf("k%02d", r.raiseRNG.IntN(chaosKeys))
	r.values++
	vx := fmt.Sprintf("poison-%d.%d", r.gens, r.values)
	rev := r.write(chaosChange{key: x, value: vx})
	terminal := func() string {
		obj, found := r.get(x)
		if !found || obj.Value != vx {
			return "gone"
		}
		for _, rec := range r.recs {
			if st := rec.getStatus(obj); st.Kind != status.KindError || !st.Terminal {
				return rec.label() + "not a terminal Error: " + st.String()
			}
		}
		return ""
	}
	if problem := r.until(time.Second, terminal); problem != "" {
		r.logf("@%d set %s=%s: %s within 1s; left", rev, x, vx, problem)
		return
	}
	saved, _ := r.get(x)
	saved = saved.clone()
	r.del(x, ", failed for good")
	for i := range r.recs {
		if !r.reconciled(i, time.Second) {
			r.logf("%s: the delete not reached; left", x)
			return
		}
	}
	r.setPaused(true)
	r.put(x, saved, "put back while paused")
	d := depOf(x)
	wtxn := r.gen.db.WriteTxn(r.gen.deps)
	r.values++
	_, _, err := r.gen.deps.Insert(wtxn, &chaosDep{ID: d, Value: fmt.Sprintf("v%d.%d", r.gens, r.values)})
	for _, rec := range r.recs {
		rec.target.with(func() { rec.target.rc.depWrites[d]++ })
	}
	wtxn.Commit()
	require.NoError(r.t, err)
	r.depChangedAt[d] = len(r.steps)
	marked := r.until(time.Second, func() string {
		obj, found := r.get(x)
		for _, rec := range r.recs {
			if !found || rec.getStatus(obj).ID() == rec.getStatus(saved).ID() {
				return "not marked"
			}
		}
		return ""
	})
	r.setPaused(false)
	if marked != "" {
		r.logf("%s: its dependency %s written: %s within 1s", x, d, marked)
		return
	}
	if problem := r.until(2*time.Second, terminal); problem != "" {
		for _, rec := range r.recs {
			rec.target.with(func() {
				rec.target.violate("%s=%s, put back in its terminal Error after its delete and marked by its dependency: %s 2s on; its version never reached the target", x, vx, problem)
			})
		}
		return
	}
	r.logf("%s: its dependency %s marked it; it failed again", x, d)
}

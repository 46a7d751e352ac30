package reconciler_test

// The chaos test's prune guard (WithPruneGuard): a setting per seed, the
// chaos target's plan, the move that makes mass prunes, and the check that
// no Prune call removes more than the bound unless confirmed.

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler"
)

// chaosGuardSetting is a WithPruneGuard setting of a chaos run; the zero
// value is off.
type chaosGuardSetting struct {
	maxRemove int
	maxShare  float64
}

func (s chaosGuardSetting) on() bool { return s.maxRemove > 0 || s.maxShare > 0 }

func (s chaosGuardSetting) over(remove, held int) bool {
	return (s.maxRemove > 0 && remove > s.maxRemove) || (s.maxShare > 0 && float64(remove) > s.maxShare*float64(held))
}

func (s chaosGuardSetting) String() string {
	if !s.on() {
		return "off"
	}
	return fmt.Sprintf("%d/%.2f", s.maxRemove, s.maxShare)
}

// chaosGuard draws the guard of seed from an RNG of its own, so that the
// schedule of a seed is the same with or without it: off for one seed in
// four, else bounds at the edges (a count of 1, shares of 0.5 and 1) or
// between, one or both set.
func chaosGuard(seed uint64) chaosGuardSetting {
	if seed%4 == 3 {
		return chaosGuardSetting{}
	}
	rng := rand.New(rand.NewPCG(seed, 0x9a2d))
	s := chaosGuardSetting{
		maxRemove: []int{0, 0, 1, 1, 2, 5}[rng.IntN(6)],
		maxShare:  []float64{0, 0, 0.5, 1, 0.25, rng.Float64()}[rng.IntN(6)],
	}
	if !s.on() {
		s.maxRemove = 1
	}
	return s
}

// chaosGuardState is what the model keeps of the guard of one reconciler
// in one generation; guarded by the target's mu.
type chaosGuardState struct {
	chaosGuardSetting
	granted bool // the test called ConfirmPrune since the last Prune call
	// At the last plan: operations running, calls begun and entries the
	// test added behind the reconciler's back so far. An operation
	// running then or begun since, and an entry added since, may change
	// what Prune removes by one each.
	running, calls, added int
	strays                int // entries the test added (massPrune)
}

// guardOptions returns the WithPruneGuard option of the run's setting for
// o, with o's plan, or none.
func (r *chaosRun) guardOptions(o *chaosOps) []reconciler.Option {
	s := chaosGuard(r.seed)
	if !s.on() {
		return nil
	}
	o.guard = &chaosGuardState{chaosGuardSetting: s}
	r.logf("%sprune guard %s", o.label(), s)
	return []reconciler.Option{reconciler.WithPruneGuard(s.maxRemove, s.maxShare, o.planPrune)}
}

// planPrune is the chaos target's dry run of Prune: what it would remove
// of what it holds. In an outage it fails, as Prune would.
func (o *chaosOps) planPrune(_ context.Context, _ statedb.ReadTxn, objs iter.Seq2[*item, statedb.Revision]) (remove, held int, err error) {
	want := map[string]bool{}
	for it := range objs {
		want[it.ID] = true
	}
	c := o.target
	c.with(func() {
		if c.down && !c.healed {
			err = fmt.Errorf("plan: target down: %w", errChaos)
			return
		}
		for k := range c.data {
			if !want[k] {
				remove++
			}
		}
		held = len(c.data)
		o.guard.running, o.guard.calls, o.guard.added = o.running, c.calls, o.guard.strays
	})
	return remove, held, err
}

// guardCheck checks, as Prune is about to remove what want lacks, that
// it removes no more than the guard's bound unless the test confirmed; mu
// must be held. The operations that may have changed the target since
// the plan are given the benefit of the doubt.
func (o *chaosOps) guardCheck(want map[string]bool) {
	g := o.guard
	if g == nil {
		return
	}
	c := o.target
	remove := 0
	for k := range c.data {
		if !want[k] {
			remove++
		}
	}
	slack := g.running + c.calls - g.calls - 1 + g.strays - g.added // the prune's own call is not one
	granted := g.granted
	g.granted = false
	if !granted && g.over(remove-slack, len(c.data)+slack) {
		o.violate("Prune removes %d of %d entries, over the guard's bound %s (slack %d), and the test confirmed nothing", remove, len(c.data), g, slack)
	}
}

// confirmPrune confirms a held prune of reconciler i, granting the model
// one Prune call over the bound.
func (r *chaosRun) confirmPrune(i int) {
	if o := r.gen.ops[i]; o.guard != nil {
		o.target.with(func() { o.guard.granted = true })
	}
	r.gen.recs[i].ConfirmPrune()
}

// confirming returns cond, confirming a held prune of every reconciler
// first: once healed, every prune is to converge.
func (r *chaosRun) confirming(cond func() string) func() string {
	return func() string {
		for i := range r.recs {
			r.confirmPrune(i)
		}
		return cond()
	}
}

// massPrune deletes many keys in one transaction, leaves entries in the
// target of a reconciler for keys the table lacks (what an earlier run applied and the
// table lost: cilium/cilium#45989), asks a reconciler for a prune, and
// then confirms it, lets the desired set grow back, or leaves it.
func (r *chaosRun) massPrune() {
	present := slices.Sorted(maps.Keys(r.model))
	r.rng.Shuffle(len(present), func(i, j int) { present[i], present[j] = present[j], present[i] })
	if n := len(present) / 2; n > 0 {
		n += r.rng.IntN(len(present) - n + 1)
		changes := make([]chaosChange, n)
		for i, k := range present[:n] {
			changes[i] = chaosChange{key: k}
		}
		r.logf("@%d delete %s (a mass delete)", r.write(changes...), strings.Join(present[:n], " "))
	}
	var strays []string
	for n := range chaosKeys {
		if k := fmt.Sprintf("k%02d", n); !hasKey(r.model, k) && r.rng.IntN(2) == 0 {
			strays = append(strays, k)
		}
	}
	i := r.rng.IntN(len(r.recs))
	c, o := r.recs[i].target, r.gen.ops[i] // the one asked to prune
	c.with(func() {
		for _, k := range strays {
			if _, has := c.data[k]; !has {
				c.data[k] = "stray"
				if o.guard != nil {
					o.guard.strays++ // perhaps as a prune planned runs
				}
			}
		}
		c.notify()
	})
	r.logf("leftovers %s in the target; %sPrune(): ran %v", strings.Join(strays, " "), r.recs[i].label(), r.pruneAndWait(i, 10*time.Millisecond))
	switch r.rng.IntN(4) {
	case 0:
		r.confirmPrune(i)
		r.logf("%sConfirmPrune(): ran %v", r.recs[i].label(), r.pruneAndWait(i, 10*time.Millisecond))
	case 1: // the desired set grows back
		for _, k := range strays[:len(strays)/2+r.rng.IntN(len(strays)/2+1)] {
			r.set(k, r.value(), " (grows back)")
		}
	}
}

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

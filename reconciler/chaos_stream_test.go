package reconciler_test

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/status"
)

// chaosStreamOdds: one step in chaosStreamOdds makes retryAmidAStream,
// where its rounds are small.
const chaosStreamOdds = 10

// chaosStreamFor bounds retryAmidAStream's stream: a retry due within the
// retry maximum (10ms, or saturated: see below) and taken within a few
// rounds is in long before.
const chaosStreamFor = 2 * time.Second

// retryAmidAStream (7ffa037): with rounds of fewer than eight objects, an
// update fails once, and the test then writes other keys one transaction
// at a time, faster than the reconciler reads them, until the update is
// Done for every reconciler. A retry keeps a share of rounds (an eighth)
// however small they are; with none, it waits behind every fresh change,
// and the stream holds it off for as long as it lasts. Nothing else fails
// meanwhile (calm). It draws from its own stream, not the schedule's, and
// leaves the "-set" runs alone, whose writes draw from the schedule.
func (r *chaosRun) retryAmidAStream() {
	slots := r.roundSize // the room of a round
	if r.cfg.workers > 1 {
		slots = max(r.roundSize, 2*r.cfg.workers)
	}
	if slots >= 8 || r.cfg.set || r.retryMax > time.Minute || r.streamRNG.IntN(chaosStreamOdds) != 0 {
		return // an eighth of a round is room enough; a saturated retry maximum waits for ever
	}
	if why := r.unquiet(); why != "" {
		return
	}
	defer r.calm()()
	x, vx, rev := r.failingOnce(r.streamRNG)
	done := func() bool {
		obj, found := r.get(x)
		if !found || obj.Value != vx {
			return false
		}
		for _, rec := range r.recs {
			if rec.getStatus(obj).Kind != status.KindDone {
				return false
			}
		}
		return true
	}
	writes, deadline := 0, time.Now().Add(chaosStreamFor)
	for !done() && time.Now().Before(deadline) {
		k := x
		for k == x {
			k = fmt.Sprintf("k%02d", r.streamRNG.IntN(chaosKeys))
		}
		r.values++
		r.write(chaosChange{key: k, value: fmt.Sprintf("v%d.%d", r.gens, r.values)})
		writes++
	}
	if !done() {
		for _, rec := range r.recs {
			rec.target.with(func() {
				rec.target.violate("%s=%s (@%d) failed once and was not Done after %d writes of other keys in %s, in rounds of %d: its retry waited behind the fresh changes",
					x, vx, rev, writes, chaosStreamFor, slots)
			})
		}
	}
	r.logf("@%d set %s=%s, failing once, then %d writes of other keys until it was Done (rounds of %d)", rev, x, vx, writes, slots)
}

// failingOnce writes a new value of a key drawn from rng whose next update
// fails, for every reconciler, once; it returns the key, the value and the
// revision written.
func (r *chaosRun) failingOnce(rng *rand.Rand) (key, value string, rev statedb.Revision) {
	key = fmt.Sprintf("k%02d", rng.IntN(chaosKeys))
	for _, rec := range r.recs {
		rec.target.failNextN(key, 1)
	}
	r.values++
	value = fmt.Sprintf("v%d.%d", r.gens, r.values)
	return key, value, r.write(chaosChange{key: key, value: value})
}

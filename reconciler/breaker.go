package reconciler

import (
	"fmt"
	"sync"
	"time"
)

// breaker is the circuit breaker of WithCircuitBreaker. Closed, it counts
// the distinct keys whose operations failed in a row with an error about
// the target; at the threshold it opens, which closes the gate to every
// operation but a probe, granted one at a time on its own backoff. A
// probe that succeeds (or that the target answers with an error about the
// object) closes it. While open, a failure about the target is no outcome
// for its object: record says so, and commit queues the object again as
// if its operation had never started, so no attempt count or backoff
// grows. One that asked for its next attempt's time (RetryAfter) keeps
// that time but counts no attempt either, and the time delays the next
// probe.
//
// A nil *breaker is a breaker that never opens. Its methods are safe for
// concurrent use: workers record outcomes while the loop asks for probes.
type breaker struct {
	threshold  int
	isTarget   func(error) bool // nil: every error but a terminal one
	probeMin   time.Duration
	probeMax   time.Duration
	gate       *gate
	onTransits func(open, startup bool, err error) // logs an opening and a closing

	mu       sync.Mutex
	streak   map[string]struct{} // closed: keys failing in a row since a success
	open     bool
	since    time.Time // open: when it opened
	err      error     // open: "target failing since ...: <the error that opened it>"
	failed   int       // open: probes failed since it opened
	due      time.Time // open: when the next probe may be granted
	probing  bool      // open: a probe was granted and has not reported
	answered bool      // the target answered an operation since the run started
	startup  bool      // open, and opened before the target ever answered
	openings uint64
}

func newBreaker(threshold int, isTarget func(error) bool, probeMin, probeMax time.Duration, g *gate, onTransits func(open, startup bool, err error)) *breaker {
	return &breaker{
		threshold:  threshold,
		isTarget:   isTarget,
		probeMin:   probeMin,
		probeMax:   max(probeMin, probeMax),
		gate:       g,
		onTransits: onTransits,
		streak:     map[string]struct{}{},
	}
}

// aboutTarget reports whether err says the target fails as a whole.
func (b *breaker) aboutTarget(err error) bool {
	return err != nil && !IsTerminal(err) && (b.isTarget == nil || b.isTarget(err))
}

// verdict is what the breaker makes of a failure.
type verdict uint8

const (
	// counted: an outcome of the object's own, as without a breaker.
	counted verdict = iota
	// held: the breaker is open, so the failure is no outcome: the object
	// goes back to the queue as if its operation never started.
	held
	// spared: the breaker is open and the failure asked for its next
	// attempt's time (RetryAfter): the object keeps that time, as
	// RetryAfter promises, but the failure counts no attempt.
	spared
)

// record takes the outcome err of an operation on key (key is read only
// for a failure), which was the probe if probe is set, and returns what
// the failure is for its object. A failure again (its object's attempt
// before failed with the same error) is no news of the target while
// closed: many objects failing on and on for one cause of their own (a
// fan-out) must not open it, and a target that fails anew shows in
// objects that did not already fail so. While open, a failure about the target
// delays the next probe: by the backoff if it was the probe, and to the
// time it asked for with RetryAfter, up to the probes' maximum backoff
// (a RetryAfter about the target is its own word on when to ask again;
// the cap keeps one object that asks for a day from stopping the probes).
// The failure that opens the breaker is counted.
func (b *breaker) record(key func() string, err error, again, probe bool, now time.Time) verdict {
	if b == nil {
		return counted
	}
	// An entry a batch operation lost or overwrote has no outcome: it is
	// the implementation's fault, and says nothing of the target.
	lost := err == errBatchEntryLost
	target := !lost && b.aboutTarget(err)
	b.mu.Lock()
	defer b.mu.Unlock()
	wasProbe := probe && b.probing
	if wasProbe {
		b.probing = false
	}
	if !target && !lost {
		b.answered = true // a success, or a verdict on the object
	}
	switch {
	case lost:
		if b.open && wasProbe {
			// No answer: the next probe waits its step, as after a failure.
			b.failed++
			b.due = later(b.due, now.Add(backoff(b.failed+1, b.probeMin, b.probeMax, 0, 0)))
		}
		return counted
	case err == nil || (wasProbe && !target):
		// The target answered: a success, or a probe refused for a
		// reason of its object's own.
		clear(b.streak)
		if b.open {
			b.setOpen(false, now, nil)
		}
		return counted
	case !target:
		return counted // about the object: neither breaks nor mends the streak
	case !b.open && again:
		return counted // no news: neither breaks nor mends it either
	case b.open:
		if wasProbe {
			b.failed++
			b.due = later(b.due, now.Add(backoff(b.failed+1, b.probeMin, b.probeMax, 0, 0)))
		}
		if wait, asked := retryAfter(err); asked {
			b.due = later(b.due, now.Add(min(wait, b.probeMax)))
			return spared
		}
		return held
	}
	b.streak[key()] = struct{}{}
	if len(b.streak) >= b.threshold {
		b.setOpen(true, now, err)
	}
	return counted
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// setOpen opens or closes the breaker and the gate with it. b.mu is held.
// An opening before the target ever answered since the run started (a
// target still coming up) holds operations like any other, and is logged
// as such.
func (b *breaker) setOpen(open bool, now time.Time, err error) {
	b.open, b.probing, b.failed = open, false, 0
	b.startup = open && !b.answered
	clear(b.streak)
	if open {
		b.openings++
		b.since, b.due = now, now.Add(b.probeMin)
		if wait, asked := retryAfter(err); asked {
			b.due = later(b.due, now.Add(min(wait, b.probeMax)))
		}
		b.err = fmt.Errorf("target failing since %s: %w", now.UTC().Format(time.RFC3339), err)
	} else {
		b.since, b.due, b.err = time.Time{}, time.Time{}, nil
	}
	b.gate.setBroken(open)
	if b.onTransits != nil {
		b.onTransits(open, b.startup, err)
	}
}

// limit returns how many operations a round may collect while the breaker
// is open (limited): one when a probe is granted and not yet taken,
// granting it if due at now; else none.
func (b *breaker) limit(now time.Time) (room int, limited bool) {
	if b == nil {
		return 0, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return 0, false
	}
	switch {
	case b.probing && b.gate.probeLeft():
		return 1, true // granted, and nothing took it yet
	case b.probing || now.Before(b.due):
		return 0, true
	}
	b.probing = true
	b.gate.grantProbe()
	return 1, true
}

// nextProbe returns, while the breaker is open, when the next probe is due
// (zero while one is granted).
func (b *breaker) nextProbe() (due time.Time, open bool) {
	if b == nil {
		return time.Time{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open || b.probing {
		return time.Time{}, b.open
	}
	return b.due, true
}

// setProbeMax makes maximum the probes' maximum backoff, as Configure's
// WithRetry changes the retry maximum it is (see WithCircuitBreaker), for
// probes that fail from now on and for the one timed: it comes no later
// than maximum after now.
func (b *breaker) setProbeMax(maximum time.Duration, now time.Time) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probeMax = max(b.probeMin, maximum)
	if b.open && !b.probing {
		if latest := now.Add(b.probeMax); b.due.After(latest) {
			b.due = latest
		}
	}
}

// breakerState is what the breaker reports.
type breakerState struct {
	open     bool
	since    time.Time
	err      error // while open; the same value until it closes
	openings uint64
}

func (b *breaker) state() breakerState {
	if b == nil {
		return breakerState{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return breakerState{open: b.open, since: b.since, err: b.err, openings: b.openings}
}

// reset closes the breaker: a run of the loop starts (or ends) with the
// target presumed working, but not yet heard from.
func (b *breaker) reset(now time.Time) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open {
		notify := b.onTransits
		b.onTransits = nil // not the target's doing: nothing to log
		b.setOpen(false, now, nil)
		b.onTransits = notify
	}
	clear(b.streak)
	b.probing, b.answered = false, false
}

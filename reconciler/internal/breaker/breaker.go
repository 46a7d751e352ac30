// Package breaker is the reconciler's circuit breaker (WithCircuitBreaker):
// a state machine that decides, from the outcomes of operations, whether
// the target fails as a whole, and then admits one probe at a time on a
// backoff of its own. It reads no clock (the time is passed in), starts no
// goroutine and knows nothing of StateDB; what it closes while open is a
// [Gate] its owner gives it.
package breaker

import (
	"fmt"
	"sync"
	"time"
)

// Gate is what the breaker closes while open: the question every operation
// asks before it starts. SetBroken closes (true) or opens it, withdrawing a
// probe granted and not started when it opens; GrantProbe lets one
// operation start while closed; ProbeLeft reports whether a probe granted
// has not started yet.
type Gate interface {
	SetBroken(open bool)
	GrantProbe()
	ProbeLeft() bool
}

// Config is what New needs. Threshold, AboutTarget, RetryAfter and Gate
// are required; ProbeMax below ProbeMin is taken as ProbeMin; OnTransit
// may be nil.
type Config struct {
	// Threshold is how many distinct keys must fail in a row, with an
	// error about the target, to open the breaker.
	Threshold int
	// AboutTarget reports whether a non-nil err says the target fails as
	// a whole (not the object, and not for good). It must not panic.
	AboutTarget func(err error) bool
	// RetryAfter returns the wait an error asked for, if it asked.
	RetryAfter func(err error) (time.Duration, bool)
	// ProbeMin is the wait before the first probe; each failed probe
	// doubles it, up to ProbeMax.
	ProbeMin, ProbeMax time.Duration
	Gate               Gate
	// OnTransit is called, with the breaker's lock held, when it opens
	// (err is the failure that opened it; startup is set if the target
	// never answered since the last Reset) or closes for an answer.
	OnTransit func(open, startup bool, err error)
}

// Breaker is a circuit breaker. Closed, it counts the distinct keys whose
// operations failed in a row with an error about the target; at the
// threshold it opens, which closes the gate to every operation but a
// probe, granted one at a time on its own backoff (see Limit). A probe
// that succeeds, or that the target answers with an error about the
// object, closes it. While open, a failure about the target is no outcome
// for its object: Record returns Held, and the owner queues the object
// again as if its operation never started. One that asked for its next
// attempt's time (RetryAfter) is Spared: it keeps that time but counts no
// attempt, and the time delays the next probe.
//
// Make one with New. A nil *Breaker is a breaker that never opens: every
// method may be called on it. A Breaker is safe for concurrent use:
// workers record outcomes while the loop asks for probes.
type Breaker struct {
	c Config

	mu       sync.Mutex
	streak   map[string]struct{} // closed: keys failing in a row since a success
	open     bool
	since    time.Time // open: when it opened
	err      error     // open: "target failing since ...: <the error that opened it>"
	failed   int       // open: probes failed since it opened
	due      time.Time // open: when the next probe may be granted
	probing  bool      // open: a probe was granted and has not reported
	answered bool      // the target answered an operation since the last Reset
	startup  bool      // open, and opened before the target ever answered
	openings uint64
}

// New returns a closed breaker.
func New(c Config) *Breaker {
	c.ProbeMax = max(c.ProbeMin, c.ProbeMax)
	return &Breaker{c: c, streak: map[string]struct{}{}}
}

// Verdict is what the breaker makes of an outcome.
type Verdict uint8

const (
	// Counted is an outcome of the object's own, as without a breaker.
	Counted Verdict = iota
	// Held is a failure while the breaker is open: no outcome, the object
	// goes back to the queue as if its operation never started.
	Held
	// Spared is a failure while open that asked for its next attempt's
	// time (RetryAfter): the object keeps that time, as RetryAfter
	// promises, but the failure counts no attempt.
	Spared
)

// Outcome is one operation's outcome, for Record.
type Outcome struct {
	Err error
	// Lost is set for an entry a batch operation lost or overwrote: the
	// implementation's fault, which says nothing of the target.
	Lost bool
	// Again is set when the key's attempt before failed with the same
	// error: no news of the target while closed (many objects failing on
	// and on for a cause of their own must not open it).
	Again bool
	// Probe is set when the operation was the probe granted.
	Probe bool
}

// Record takes the outcome o of an operation on key (called only for a
// failure that counts toward opening) and returns what it is for its
// object. While open, a failure about the target delays the next probe: by
// the backoff if it was the probe, and to the time it asked for with
// RetryAfter, up to ProbeMax (a RetryAfter about the target is its own word
// on when to ask again; the cap keeps one object that asks for a day from
// stopping the probes). The failure that opens the breaker is Counted.
func (b *Breaker) Record(key func() string, o Outcome, now time.Time) Verdict {
	if b == nil {
		return Counted
	}
	target := !o.Lost && o.Err != nil && b.c.AboutTarget(o.Err)
	b.mu.Lock()
	defer b.mu.Unlock()
	wasProbe := o.Probe && b.probing
	if wasProbe {
		b.probing = false
	}
	if !target && !o.Lost {
		b.answered = true // a success, or a verdict on the object
	}
	switch {
	case o.Lost:
		if b.open && wasProbe {
			b.probeFailed(now) // no answer: the next probe waits its step
		}
		return Counted
	case o.Err == nil || (wasProbe && !target):
		// The target answered: a success, or a probe refused for a
		// reason of its object's own.
		clear(b.streak)
		if b.open {
			b.setOpen(false, now, nil)
		}
		return Counted
	case !target:
		return Counted // about the object: neither breaks nor mends the streak
	case !b.open && o.Again:
		return Counted // no news: neither breaks nor mends it either
	case b.open:
		if wasProbe {
			b.probeFailed(now)
		}
		if wait, asked := b.c.RetryAfter(o.Err); asked {
			b.due = later(b.due, now.Add(min(wait, b.c.ProbeMax)))
			return Spared
		}
		return Held
	}
	b.streak[key()] = struct{}{}
	if len(b.streak) >= b.c.Threshold {
		b.setOpen(true, now, o.Err)
	}
	return Counted
}

// probeFailed moves the next probe a backoff step on. b.mu is held.
func (b *Breaker) probeFailed(now time.Time) {
	b.failed++
	b.due = later(b.due, now.Add(b.step(b.failed+1)))
}

// step returns the wait before probe n (from 1): ProbeMin doubled per
// probe after the first, capped at ProbeMax.
func (b *Breaker) step(n int) time.Duration {
	d := b.c.ProbeMin
	for i := 1; i < n && d > 0 && d < b.c.ProbeMax; i++ {
		if d > b.c.ProbeMax/2 {
			return b.c.ProbeMax // no overflow on the way
		}
		d *= 2
	}
	return min(d, b.c.ProbeMax)
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// setOpen opens or closes the breaker and the gate with it. b.mu is held.
// An opening before the target ever answered since the last Reset (a
// target still coming up) holds operations like any other, and is
// reported as such.
func (b *Breaker) setOpen(open bool, now time.Time, err error) {
	b.open, b.probing, b.failed = open, false, 0
	b.startup = open && !b.answered
	clear(b.streak)
	if open {
		b.openings++
		b.since, b.due = now, now.Add(b.c.ProbeMin)
		if wait, asked := b.c.RetryAfter(err); asked {
			b.due = later(b.due, now.Add(min(wait, b.c.ProbeMax)))
		}
		b.err = fmt.Errorf("target failing since %s: %w", now.UTC().Format(time.RFC3339), err)
	} else {
		b.since, b.due, b.err = time.Time{}, time.Time{}, nil
	}
	b.c.Gate.SetBroken(open)
	if b.c.OnTransit != nil {
		b.c.OnTransit(open, b.startup, err)
	}
}

// Limit returns how many operations a round may take while the breaker is
// open (limited): one when a probe is granted and not yet started,
// granting it if due at now; else none.
func (b *Breaker) Limit(now time.Time) (room int, limited bool) {
	if b == nil {
		return 0, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return 0, false
	}
	switch {
	case b.probing && b.c.Gate.ProbeLeft():
		return 1, true // granted, and nothing took it yet
	case b.probing || now.Before(b.due):
		return 0, true
	}
	b.probing = true
	b.c.Gate.GrantProbe()
	return 1, true
}

// NextProbe returns, while the breaker is open, when the next probe is due
// (zero while one is granted).
func (b *Breaker) NextProbe() (due time.Time, open bool) {
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

// SetProbeMax makes maximum the probes' maximum backoff, for probes that
// fail from now on and for the one timed: it comes no later than maximum
// after now.
func (b *Breaker) SetProbeMax(maximum time.Duration, now time.Time) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.c.ProbeMax = max(b.c.ProbeMin, maximum)
	if b.open && !b.probing {
		if latest := now.Add(b.c.ProbeMax); b.due.After(latest) {
			b.due = latest
		}
	}
}

// State is what the breaker reports. Err is set while open, and is the
// same value until it closes.
type State struct {
	Open     bool
	Since    time.Time
	Err      error
	Openings uint64
}

// State returns the breaker's state; the zero State for a nil breaker.
func (b *Breaker) State() State {
	if b == nil {
		return State{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return State{Open: b.open, Since: b.since, Err: b.err, Openings: b.openings}
}

// Reset closes the breaker without calling OnTransit: a run of the loop
// starts (or ends) with the target presumed working, but not yet heard
// from.
func (b *Breaker) Reset(now time.Time) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open {
		notify := b.c.OnTransit
		b.c.OnTransit = nil // not the target's doing: nothing to report
		b.setOpen(false, now, nil)
		b.c.OnTransit = notify
	}
	clear(b.streak)
	b.probing, b.answered = false, false
}

package reconcilertest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// ErrInjected is wrapped by every error a [FaultyOps] injects.
var ErrInjected = errors.New("injected fault")

// Mode is what an injected fault does to an operation.
type Mode int

const (
	// ModeError makes the operation fail with an error wrapping ErrInjected.
	ModeError Mode = iota + 1
	// ModeTerminal fails it with reconciler.TerminalError.
	ModeTerminal
	// ModeRetryAfter fails it with reconciler.RetryAfter(Fault.Duration).
	ModeRetryAfter
	// ModePanic makes it panic. In a batch, the entries before the
	// panicking one are applied first, so the batch panics part way
	// through.
	ModePanic
	// ModeDelay delays it by Fault.Duration before it goes ahead, or until
	// the fault is cleared if Duration is zero. If the operation's context
	// ends first, it returns the context's error without going ahead.
	ModeDelay
	// ModeRecheck lets the operation go ahead and, if it succeeds, asks for
	// its object to be reconciled again after Duration: an Update calls
	// reconciler.RecheckAfter, an UpdateBatch sets the entry's
	// RecheckAfter. It fires after the operation (as if After were set).
	ModeRecheck
)

var modeNames = [...]string{ModeError: "error", ModeTerminal: "terminal", ModeRetryAfter: "retry-after", ModePanic: "panic", ModeDelay: "delay", ModeRecheck: "recheck"}

// String returns the mode's name as ParseMode accepts it.
func (m Mode) String() string {
	if m > 0 && int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode parses "error", "terminal", "retry-after", "panic", "delay" or
// "recheck".
func ParseMode(s string) (Mode, error) {
	for m, name := range modeNames {
		if name != "" && name == s {
			return Mode(m), nil
		}
	}
	return 0, fmt.Errorf("unknown fault mode %q: want one of %s", s, strings.Join(modeNames[1:], ", "))
}

// Fault describes faults to inject into matching calls. The zero values
// of the selectors match everything.
type Fault struct {
	Mode Mode   // required
	Key  string // only calls for this object key; "" for every call, prunes included
	Op   Op     // only this operation; "" for all

	// Next, if positive, limits the fault to the next Next matching calls
	// it fires on; zero keeps it until cleared.
	Next int

	// Probability, if in (0, 1), makes the fault fire on each matching call
	// with that probability, drawn from a generator seeded with Seed, so a
	// given sequence of matching calls gets the same faults on every run.
	// Zero (or one) fires on every matching call.
	Probability float64
	Seed        uint64

	// Duration is the delay of ModeDelay (zero: until cleared) and the
	// delay asked for by ModeRetryAfter.
	Duration time.Duration

	// After makes the fault fire on calls that the wrapped operation has
	// carried out without error, once it returned, as when a change reaches
	// the target and its answer is lost: ModeError, ModeTerminal and
	// ModeRetryAfter replace the success with their error, and ModeDelay
	// holds the call with its change applied (returning the context's
	// error if it ends first). It cannot be used with ModePanic. Faults
	// without After fire before the wrapped operation, which they skip.
	After bool
}

// validate reports a Fault's bad fields.
func (f Fault) validate() error {
	switch {
	case f.Mode < ModeError || f.Mode > ModeRecheck:
		return fmt.Errorf("invalid fault mode %d", f.Mode)
	case f.Op != "" && f.Op != OpUpdate && f.Op != OpDelete && f.Op != OpPrune:
		return fmt.Errorf("invalid operation %q: want update, delete or prune", f.Op)
	case f.Op == OpPrune && f.Key != "":
		return fmt.Errorf("a prune has no key: a fault on key %q never matches it", f.Key)
	case f.Next < 0:
		return fmt.Errorf("next must not be negative, got %d", f.Next)
	case !(f.Probability >= 0 && f.Probability <= 1):
		return fmt.Errorf("probability must be in [0, 1], got %v", f.Probability)
	case f.Duration < 0:
		return fmt.Errorf("duration must not be negative, got %s", f.Duration)
	case f.After && f.Mode == ModePanic:
		return fmt.Errorf("a panic cannot be injected after the operation")
	case f.Mode == ModeRecheck && (f.Duration <= 0 || f.Op == OpDelete || f.Op == OpPrune):
		return fmt.Errorf("a re-check needs a positive duration and is for updates only")
	}
	return nil
}

// String describes the fault in the syntax of the reconciler/fault command.
func (f Fault) String() string {
	var b strings.Builder
	if f.Key != "" {
		fmt.Fprintf(&b, "--key=%s ", f.Key)
	}
	if f.Op != "" {
		fmt.Fprintf(&b, "--op=%s ", f.Op)
	}
	if f.Next > 0 {
		fmt.Fprintf(&b, "--next=%d ", f.Next)
	}
	if f.Probability > 0 && f.Probability < 1 {
		fmt.Fprintf(&b, "--prob=%v --seed=%d ", f.Probability, f.Seed)
	}
	if f.Duration > 0 {
		fmt.Fprintf(&b, "--duration=%s ", f.Duration)
	}
	if f.After {
		b.WriteString("--after ")
	}
	b.WriteString(f.Mode.String())
	return b.String()
}

// rule is an injected Fault with its state.
type rule struct {
	Fault
	left    int           // calls left with Next > 0
	rng     *rand.Rand    // nil unless Probability is in (0, 1)
	release chan struct{} // closed when cleared; ends delays without a duration
}

// faultSet holds the rules of a FaultyOps. Its methods are safe for
// concurrent use.
type faultSet struct {
	mu    sync.Mutex
	rules []*rule // newest last
	spent []*rule // used up, but delays may still wait on their release
}

func (s *faultSet) add(f Fault) error {
	if err := f.validate(); err != nil {
		return err
	}
	if f.Mode == ModeRecheck {
		f.After, f.Op = true, OpUpdate
	}
	r := &rule{Fault: f, left: f.Next, release: make(chan struct{})}
	if f.Probability > 0 && f.Probability < 1 {
		r.rng = rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = append(s.rules, r)
	return nil
}

// clear removes the rules for key, or all if key is "", releases their
// delays, and returns how many were active.
func (s *faultSet) clear(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	keep := func(list []*rule, count bool) []*rule {
		kept := list[:0]
		for _, r := range list {
			if key != "" && r.Key != key {
				kept = append(kept, r)
				continue
			}
			close(r.release)
			if count {
				n++
			}
		}
		clear(list[len(kept):])
		return kept
	}
	s.rules = keep(s.rules, true)
	s.spent = keep(s.spent, false)
	return n
}

func (s *faultSet) list() []Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Fault, len(s.rules))
	for i, r := range s.rules {
		out[i] = r.Fault
		if r.Next > 0 {
			out[i].Next = r.left
		}
	}
	return out
}

// decide returns the rule that fires for a call, before the wrapped
// operation or, if after, once it succeeded; or nil. The newest matching
// rule decides; one that does not fire (by its probability) leaves the
// decision to older ones.
func (s *faultSet) decide(op Op, key string, after bool) *rule {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.rules) - 1; i >= 0; i-- {
		r := s.rules[i]
		if (r.Op != "" && r.Op != op) || (r.Key != "" && r.Key != key) || r.After != after {
			continue
		}
		if r.rng != nil && r.rng.Float64() >= r.Probability {
			continue
		}
		if r.Next > 0 {
			r.left--
			if r.left == 0 {
				s.rules = append(s.rules[:i], s.rules[i+1:]...)
				if r.Mode == ModeDelay && r.Duration == 0 {
					s.spent = append(s.spent, r)
				}
			}
		}
		return r
	}
	return nil
}

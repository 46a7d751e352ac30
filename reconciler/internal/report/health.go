// Package report holds the parts of the reconciler's report stage that
// keep state of their own: the health it last reported, the rate limit of
// its failure logs, the progress WaitUntilReconciled waits on, and the
// figures of a commit and their totals over a run. None of them reads a
// clock or starts a goroutine; the reconciler feeds them what it found.
package report

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/hive/cell"

	"github.com/converge-go/converge/tables"
)

// MaxHealthErrors caps how many object errors a Degraded health report
// lists; the rest are summarised by count.
const MaxHealthErrors = 10

// Health reports the reconcile job's health to a cell.Health, only when
// it changes. Make one with NewHealth for each run; it is not safe for
// concurrent use.
type Health struct {
	health cell.Health
	sent   bool
	ok     bool
	last   HealthState
}

// NewHealth returns a Health that reports to health.
func NewHealth(health cell.Health) Health { return Health{health: health} }

// OK and Degraded report msg (and err) as they are, whatever was reported
// before, and leave what Update compares with as it was: for the states
// before the first round (waiting for tables, setting up).
func (h *Health) OK(msg string) { h.health.OK(msg) }

// Degraded: see OK.
func (h *Health) Degraded(msg string, err error) { h.health.Degraded(msg, err) }

// HealthState is what health is made of after a round.
type HealthState struct {
	Paused       bool
	Objects      int    // objects in the table; filled in by Update
	Failing      int    // objects failing, waiting for a retry or retried now
	RetryVersion uint64 // changes whenever the failing objects do
	PruneErr     error  // the last prune's error
	LimiterErr   error  // the round limiter's error
	GateErr      error  // started before its tables were initialized
	BreakerErr   error  // the circuit breaker is open: the target fails
	PruneHeld    error  // WithPruneGuard holds a prune
}

// Update reports s, the state after a round, if it changed: "Paused", "OK,
// N object(s)", or Degraded with "N error(s)" (the StateDB reconciler's
// wording; N is the failing objects plus a failed prune, round limiter or
// start gate) and up to MaxHealthErrors errors. objects and retryErrors are
// called only when needed. It returns the state for the reconcilers table.
func (h *Health) Update(s HealthState, objects func() int, retryErrors func(limit int) []error) tables.State {
	if s.Paused {
		// Paused on purpose: OK, but saying so.
		if !h.sent || !h.last.Paused {
			h.sent, h.ok, h.last = true, false, s
			h.health.OK("Paused")
		}
		return tables.StatePaused
	}
	if s.Failing == 0 && s.PruneErr == nil && s.LimiterErr == nil && s.GateErr == nil && s.BreakerErr == nil && s.PruneHeld == nil {
		s.Objects = objects()
		if h.sent && h.ok && s.Objects == h.last.Objects {
			return tables.StateRunning
		}
		h.sent, h.ok, h.last = true, true, s
		h.health.OK(fmt.Sprintf("OK, %d object(s)", s.Objects))
		return tables.StateRunning
	}
	if h.sent && !h.ok && s == h.last {
		return tables.StateDegraded
	}
	h.sent, h.ok, h.last = true, false, s

	errs := make([]error, 0, MaxHealthErrors+3)
	var what []string
	if s.BreakerErr != nil {
		what = append(what, "target failing")
		errs = append(errs, s.BreakerErr)
	}
	if s.Failing > 0 {
		what = append(what, fmt.Sprintf("%d object(s) failing", s.Failing))
	}
	if s.PruneErr != nil {
		what = append(what, "prune failed")
		errs = append(errs, s.PruneErr)
	}
	if s.PruneHeld != nil {
		what = append(what, "prune held")
		errs = append(errs, s.PruneHeld)
	}
	if s.LimiterErr != nil {
		what = append(what, "round limiter failing")
		errs = append(errs, s.LimiterErr)
	}
	if s.GateErr != nil {
		what = append(what, "tables not initialized")
		errs = append(errs, s.GateErr)
	}
	// N error(s) counts the failing objects and the failures that are no
	// object's (prune, round limiter, start gate). The breaker's error is
	// one of the objects' failures: counted with them, or as one if none
	// is left failing.
	count := s.Failing + len(errs)
	if s.BreakerErr != nil && s.Failing > 0 {
		count--
	}
	errs = append(errs, retryErrors(MaxHealthErrors)...)
	if omitted := s.Failing - MaxHealthErrors; omitted > 0 {
		errs = append(errs, fmt.Errorf("%d more error(s) omitted", omitted))
	}
	h.health.Degraded(fmt.Sprintf("%d error(s): %s", count, strings.Join(what, ", ")), errors.Join(errs...))
	return tables.StateDegraded
}

package reconciler

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/hive/cell"

	"github.com/converge-go/converge/tables"
)

// maxHealthErrors caps how many object errors a Degraded health report
// lists; the rest are summarised by count.
const maxHealthErrors = 10

// healthReporter reports the reconcile job's health, only when it changes.
type healthReporter struct {
	health cell.Health
	sent   bool
	ok     bool
	last   healthState
}

// healthState is what health is made of after a round. Its functions are
// called only if the report has to be remade.
type healthState struct {
	paused       bool
	objects      int    // objects in the table; filled in by update
	failing      int    // objects failing, waiting for a retry or retried now
	retryVersion uint64 // changes whenever the failing objects do
	pruneErr     error  // the last prune's error
	limiterErr   error  // the round limiter's error
	gateErr      error  // started before its tables were initialized
	breakerErr   error  // the circuit breaker is open: the target fails
	pruneHeld    error  // WithPruneGuard holds a prune
}

// update reports s, the state after a round, if it changed: "Paused", "OK,
// N object(s)", or Degraded with "N error(s)" (the StateDB reconciler's
// wording; N is the failing objects plus a failed prune, round limiter or
// start gate) and up to maxHealthErrors errors. objects and retryErrors are
// called only when needed. It returns the state for the reconcilers table.
func (h *healthReporter) update(s healthState, objects func() int, retryErrors func(limit int) []error) tables.State {
	if s.paused {
		// Paused on purpose: OK, but saying so.
		if !h.sent || !h.last.paused {
			h.sent, h.ok, h.last = true, false, s
			h.health.OK("Paused")
		}
		return tables.StatePaused
	}
	if s.failing == 0 && s.pruneErr == nil && s.limiterErr == nil && s.gateErr == nil && s.breakerErr == nil && s.pruneHeld == nil {
		s.objects = objects()
		if h.sent && h.ok && s.objects == h.last.objects {
			return tables.StateRunning
		}
		h.sent, h.ok, h.last = true, true, s
		h.health.OK(fmt.Sprintf("OK, %d object(s)", s.objects))
		return tables.StateRunning
	}
	if h.sent && !h.ok && s == h.last {
		return tables.StateDegraded
	}
	h.sent, h.ok, h.last = true, false, s

	errs := make([]error, 0, maxHealthErrors+3)
	var what []string
	if s.breakerErr != nil {
		what = append(what, "target failing")
		errs = append(errs, s.breakerErr)
	}
	if s.failing > 0 {
		what = append(what, fmt.Sprintf("%d object(s) failing", s.failing))
	}
	if s.pruneErr != nil {
		what = append(what, "prune failed")
		errs = append(errs, s.pruneErr)
	}
	if s.pruneHeld != nil {
		what = append(what, "prune held")
		errs = append(errs, s.pruneHeld)
	}
	if s.limiterErr != nil {
		what = append(what, "round limiter failing")
		errs = append(errs, s.limiterErr)
	}
	if s.gateErr != nil {
		what = append(what, "tables not initialized")
		errs = append(errs, s.gateErr)
	}
	// N error(s) counts the failing objects and the failures that are no
	// object's (prune, round limiter, start gate). The breaker's error is
	// one of the objects' failures: counted with them, or as one if none
	// is left failing.
	count := s.failing + len(errs)
	if s.breakerErr != nil && s.failing > 0 {
		count--
	}
	errs = append(errs, retryErrors(maxHealthErrors)...)
	if omitted := s.failing - maxHealthErrors; omitted > 0 {
		errs = append(errs, fmt.Errorf("%d more error(s) omitted", omitted))
	}
	h.health.Degraded(fmt.Sprintf("%d error(s): %s", count, strings.Join(what, ", ")), errors.Join(errs...))
	return tables.StateDegraded
}

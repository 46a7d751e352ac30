package main

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/hive/cell"
)

// health is the hive's cell.Health: a tree of scopes (one per module, and
// below it one per job, such as "files.job-reconcile") whose reports can be
// listed, which hive's cell.SimpleHealth does not offer. The module
// decorator in newApp gives each module its own scope; jobs add theirs and
// the reconciler reports OK or Degraded on its job's scope.
type health struct {
	root  *healthRoot
	scope string
}

type healthRoot struct {
	mu      sync.Mutex
	reports map[string]healthReport
}

// healthReport is the last report of one scope, as served by /health.
type healthReport struct {
	Scope     string     `json:"scope"`
	Level     cell.Level `json:"level"`
	Message   string     `json:"message"`
	Error     string     `json:"error,omitempty"`
	UpdatedAt time.Time  `json:"updated-at"`
}

var _ cell.Health = (*health)(nil)

func newHealth() (cell.Health, *health) {
	h := &health{root: &healthRoot{reports: map[string]healthReport{}}}
	return h, h
}

func (h *health) set(level cell.Level, message string, err error) {
	r := healthReport{Scope: h.scope, Level: level, Message: message, UpdatedAt: time.Now()}
	if err != nil {
		r.Error = err.Error()
	}
	h.root.mu.Lock()
	defer h.root.mu.Unlock()
	h.root.reports[h.scope] = r
}

// OK implements cell.Health.
func (h *health) OK(message string) { h.set(cell.StatusOK, message, nil) }

// Degraded implements cell.Health.
func (h *health) Degraded(reason string, err error) { h.set(cell.StatusDegraded, reason, err) }

// Stopped implements cell.Health.
func (h *health) Stopped(reason string) { h.set(cell.StatusStopped, reason, nil) }

// NewScope implements cell.Health.
func (h *health) NewScope(name string) cell.Health {
	if h.scope != "" {
		name = h.scope + "." + name
	}
	return &health{root: h.root, scope: name}
}

// Close implements cell.Health: the scope's report disappears.
func (h *health) Close() {
	h.root.mu.Lock()
	defer h.root.mu.Unlock()
	delete(h.root.reports, h.scope)
}

// Report returns the overall level and every scope's report, sorted by
// scope. The level is Degraded if any scope is, else OK if any scope
// reported OK, else Unknown.
func (h *health) Report() (cell.Level, []healthReport) {
	h.root.mu.Lock()
	reports := make([]healthReport, 0, len(h.root.reports))
	for _, r := range h.root.reports {
		reports = append(reports, r)
	}
	h.root.mu.Unlock()
	slices.SortFunc(reports, func(a, b healthReport) int { return strings.Compare(a.Scope, b.Scope) })
	level := cell.StatusUnknown
	for _, r := range reports {
		switch r.Level {
		case cell.StatusDegraded:
			return cell.StatusDegraded, reports
		case cell.StatusOK:
			level = cell.StatusOK
		}
	}
	return level, reports
}

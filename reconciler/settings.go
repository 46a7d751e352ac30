package reconciler

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/converge-go/converge/reconciler/internal/refresh"
)

// configurable lists, in the order its errors name them, the options
// Configure accepts: those setting what the reconcile job and the refresh
// job read between rounds (see applySettings).
var configurable = []string{"WithConcurrency", "WithRoundLimits", "WithRefreshing", "WithPruning", "WithRetry", "WithRetryJitter"}

// settings is what Configure changes: the options as Register took them
// with every accepted Configure applied (latest), those the reconcile job
// has yet to take (pending), and what the refresh job reads. Configure
// writes it from any goroutine; the reconcile job takes pending at its
// start and at the top of a round once it was posted (see hasPending),
// the refresh job reads refresh. Safe
// for concurrent use; the zero value is not usable (see newSettings), and
// a nil *settings accepts nothing and has nothing pending.
type settings struct {
	mu      sync.Mutex
	latest  options
	pending *options      // accepted and not yet taken; nil if none
	posted  chan struct{} // signalled when pending is set: wakes the reconcile job
	// hasPending is whether pending is set: a round reads it without the
	// lock, and takes pending only then.
	hasPending atomic.Bool

	refresh   refresh.Settings
	refreshed chan struct{} // signalled when refresh changes: wakes the refresh job
}

func newSettings(o options) *settings {
	return &settings{
		latest:    o,
		posted:    make(chan struct{}, 1),
		refresh:   o.refreshSettings(),
		refreshed: make(chan struct{}, 1),
	}
}

// configure applies opts to the latest options and, if every option is one
// Configure accepts and the result validates as Register validates it,
// posts them; otherwise it changes nothing and returns an error wrapping
// ErrInvalidConfig.
func (s *settings) configure(canPrune bool, opts []Option) error {
	if s == nil {
		return fmt.Errorf("reconciler.Configure: not a registered reconciler: %w", ErrInvalidConfig)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.latest
	for i, opt := range opts {
		if err := checkConfigurable(opt); err != nil {
			return fmt.Errorf("reconciler.Configure: option %d: %w", i, err)
		}
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return fmt.Errorf("reconciler.Configure: %w", err)
	}
	if !canPrune && o.pruneInterval > 0 {
		return fmt.Errorf("reconciler.Configure: %w: WithPruning(%s): nothing to prune with (see Register)", ErrInvalidConfig, o.pruneInterval)
	}
	s.latest = o
	p := o
	s.pending = &p
	s.hasPending.Store(true)
	notify(s.posted)
	if rs := o.refreshSettings(); rs != s.refresh {
		s.refresh = rs
		notify(s.refreshed)
	}
	return nil
}

// refreshSettings is what the refresh job reads of o.
func (o *options) refreshSettings() refresh.Settings {
	return refresh.Settings{Interval: o.refreshInterval, Limiter: o.refreshLimiter, RetryMax: o.retryMax}
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// take returns the options accepted since the last take, if any.
func (s *settings) take() (options, bool) {
	if s == nil {
		return options{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pending
	s.pending = nil
	s.hasPending.Store(false)
	if p == nil {
		return options{}, false
	}
	return *p, true
}

// postedC is the channel signalled when options are posted; nil for a nil
// *settings.
func (s *settings) postedC() <-chan struct{} {
	if s == nil {
		return nil
	}
	return s.posted
}

// refreshing returns the refresh job's settings and a channel signalled
// when they change.
func (s *settings) refreshing() (refresh.Settings, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refresh, s.refreshed
}

// checkConfigurable returns an error naming opt if it is nil or made by a
// constructor Configure does not accept.
func checkConfigurable(opt Option) error {
	if opt == nil {
		return fmt.Errorf("nil Option: %w", ErrInvalidConfig)
	}
	var o options
	opt(&o)
	if slices.Contains(configurable, o.by) {
		return nil
	}
	return fmt.Errorf("%s cannot be changed on a registered reconciler; Configure takes %s: %w",
		o.by, strings.Join(configurable, ", "), ErrInvalidConfig)
}

// Package setup runs a reconcile job's setup step (WithSetup) before its
// first round: the user's function, tried until it returns nil, each
// attempt starting only when the gate lets an operation start, a failed
// one tried again after the retry backoff (or the delay the error asks
// for). The step owns its attempts and its last error; the reconciler
// gives it the gate, the call and the backoff, and reports what the step
// says. It reads no clock; it waits on timers only between attempts.
package setup

import (
	"context"
	"log/slog"
	"time"
)

// Gate is what the step asks of the reconciler's gate: whether it is
// paused (and a channel closed when that changes), and a start.
type Gate interface {
	State() (paused bool, changed <-chan struct{})
	Enter() bool
}

// Config is how one run's step calls setup and tells of it.
type Config struct {
	Gate Gate
	// Attempt calls the setup function once, the gate entered; it ends
	// the start (the gate's Entered) as an operation does.
	Attempt func(ctx context.Context) error
	// Backoff is the wait after the given number of failed attempts.
	Backoff func(attempts int) time.Duration
	// RetryAfter returns the delay an error asks for, if any.
	RetryAfter func(err error) (time.Duration, bool)
	// Report says what the step is at: setting up, failing, or paused.
	Report func(s Step, paused bool)
	Log    *slog.Logger
}

// Step is one run's setup step: how many times the run called the setup
// function and the last call's error. The zero value is a step not yet
// tried. It is not safe for concurrent use.
type Step struct {
	Attempts int
	Err      error // the last attempt's error; nil before the first ends
}

// Run runs the step until an attempt returns nil: until then no operation
// or prune starts, as the loop has not begun. Pause holds the next
// attempt until Resume, as it holds operations. It returns false if ctx
// ended first.
func (s *Step) Run(ctx context.Context, c Config) bool {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	var due <-chan time.Time // nil: an attempt now
	for {
		paused, changed := c.Gate.State()
		c.Report(*s, paused)
		if !paused && due == nil {
			if !c.Gate.Enter() { // paused meanwhile: look again
				continue
			}
			err := c.Attempt(ctx)
			s.Attempts++
			if ctx.Err() != nil {
				return false
			}
			if err == nil {
				if s.Err != nil {
					c.Log.Info("Reconciler setup succeeded", "attempts", s.Attempts)
				}
				s.Err = nil
				return true
			}
			if s.Err == nil {
				c.Log.Warn("Reconciler setup failed; operations wait until it succeeds", "error", err)
			}
			s.Err = err
			delay, ok := c.RetryAfter(err)
			if !ok {
				delay = c.Backoff(s.Attempts)
			}
			retry.Reset(delay)
			due = retry.C
			c.Report(*s, paused)
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		case <-due:
			due = nil
		}
	}
}

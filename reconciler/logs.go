package reconciler

import (
	"context"
	"log/slog"
	"time"
)

// failed records a failed op, its attempt-th: the last error and the
// count of failures since a success; and logs it.
func (l *loop[Obj]) failed(o *op[Obj], attempt int, now time.Time) {
	l.totals.sinceSuccess++
	l.totals.lastErr = o.err.Error()
	l.totals.lastErrAt = now
	l.logFailure(o, attempt, now)
}

// Failure logs are rate limited per reconciler, so that a storm of failures
// cannot flood the log: an object's first failure is logged at Warn level
// if the reconciler has logged fewer than failLogBurst failures in the last
// failLogInterval; otherwise it is counted, and the count is added
// ("suppressed") to the first Warn line once the window has passed: the
// next first failure, or, if the next failure is a later failure of an
// object that keeps failing, a Warn line for it. Later failures of an
// object that keeps failing are otherwise logged at Debug level only.
const (
	failLogBurst    = 10
	failLogInterval = 10 * time.Second
)

// failLog is the state of the rate limiter of failure logs. The loop owns
// it.
type failLog struct {
	windowStart time.Time
	inWindow    int
	suppressed  int
}

// logFailure logs the failure of o at now, as the rules above allow.
func (l *loop[Obj]) logFailure(o *op[Obj], attempt int, now time.Time) {
	r, f := l.r, &l.failLog
	what := "update"
	if o.delete {
		what = "delete"
	}
	if now.Sub(f.windowStart) >= failLogInterval {
		f.windowStart, f.inWindow = now, 0
	}
	if attempt > 1 {
		if f.suppressed > 0 && f.inWindow < failLogBurst {
			// A storm's objects may only fail again, never for the first
			// time: report what was suppressed with this failure.
			f.inWindow++
			r.log.Warn("Reconciler operation failed again; earlier failure logs were suppressed",
				"operation", what, "key", l.key(o), "attempt", attempt, "error", o.err, "suppressed", f.suppressed)
			f.suppressed = 0
			return
		}
		if r.log.Enabled(context.Background(), slog.LevelDebug) {
			r.log.Debug("Reconciler operation failed again", "operation", what, "key", l.key(o), "attempt", attempt, "error", o.err)
		}
		return
	}
	if f.inWindow >= failLogBurst {
		f.suppressed++
		return
	}
	f.inWindow++
	msg := "Reconciler operation failed; retrying with backoff"
	if IsTerminal(o.err) && !o.delete {
		msg = "Reconciler operation failed terminally; not retrying until the object changes"
	}
	args := []any{"operation", what, "key", l.key(o), "attempt", attempt, "error", o.err}
	if f.suppressed > 0 {
		args = append(args, "suppressed", f.suppressed)
		f.suppressed = 0
	}
	r.log.Warn(msg, args...)
}

// key returns o's primary key for messages.
func (l *loop[Obj]) key(o *op[Obj]) string {
	if o.key != "" {
		return displayKey(o.key)
	}
	key, _ := l.r.keyOf(o.obj)
	return displayKey(key)
}

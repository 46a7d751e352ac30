package report

import (
	"context"
	"log/slog"
	"time"
)

// Failure logs are rate limited per reconciler: at most FailLogBurst first
// failures per FailLogInterval are logged at Warn, the rest counted and
// the count ("suppressed") added to the next Warn line. Later failures of
// an object that keeps failing are logged at Debug.
const (
	FailLogBurst    = 10
	FailLogInterval = 10 * time.Second
)

// FailLog is the state of the rate limiter of failure logs. The zero value
// has logged nothing; it is not safe for concurrent use.
type FailLog struct {
	windowStart time.Time
	inWindow    int
	suppressed  int
}

// Record logs to log, as the rules above allow, the attempt-th failure at
// now of an update (or a delete) of key, with err; terminal says the error
// is terminal (see reconciler.IsTerminal).
func (f *FailLog) Record(log *slog.Logger, isDelete bool, key string, attempt int, err error, terminal bool, now time.Time) {
	what := "update"
	if isDelete {
		what = "delete"
	}
	if now.Sub(f.windowStart) >= FailLogInterval {
		f.windowStart, f.inWindow = now, 0
	}
	if attempt > 1 {
		if f.suppressed > 0 && f.inWindow < FailLogBurst {
			// A storm's objects may only fail again, never for the first
			// time: report what was suppressed with this failure.
			f.inWindow++
			log.Warn("Reconciler operation failed again; earlier failure logs were suppressed",
				"operation", what, "key", key, "attempt", attempt, "error", err, "suppressed", f.suppressed)
			f.suppressed = 0
			return
		}
		if log.Enabled(context.Background(), slog.LevelDebug) {
			log.Debug("Reconciler operation failed again", "operation", what, "key", key, "attempt", attempt, "error", err)
		}
		return
	}
	if f.inWindow >= FailLogBurst {
		f.suppressed++
		return
	}
	f.inWindow++
	msg := "Reconciler operation failed; retrying with backoff"
	if terminal && !isDelete {
		msg = "Reconciler operation failed terminally; not retrying until the object changes"
	}
	args := []any{"operation", what, "key", key, "attempt", attempt, "error", err}
	if f.suppressed > 0 {
		args = append(args, "suppressed", f.suppressed)
		f.suppressed = 0
	}
	log.Warn(msg, args...)
}

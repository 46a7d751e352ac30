package main

import (
	"log/slog"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Refused requests are logged at a bounded rate: a client without the
// token, or a web page, can send them as fast as the machine allows, and
// each would otherwise cost a line of log (one user wrote 120 MB of log
// in 6 s). refusalBurst lines may come at once, then one per
// refusalEvery; each line counts the refusals since the start and those
// not logged since the line before.
const (
	refusalBurst = 10
	refusalEvery = 10 * time.Second
	// maxLoggedValue bounds each value a refusal's line quotes from the
	// request, such as its Host or Origin (headers may hold 64 KiB).
	maxLoggedValue = 200
)

// refusalLog counts the requests refused for their Host or Origin, and
// logs them at a bounded rate. Its methods are safe for concurrent use.
type refusalLog struct {
	log *slog.Logger
	msg string // what the log says

	mu       sync.Mutex
	now      func() time.Time // the clock, replaced in tests
	limiter  *rate.Limiter
	total    uint64 // refusals since the start
	unlogged uint64 // refusals not logged since the last line
}

func newRefusalLog(log *slog.Logger) *refusalLog {
	return &refusalLog{log: log, msg: "Refused a request from outside", now: time.Now, limiter: rate.NewLimiter(rate.Every(refusalEvery), refusalBurst)}
}

// setClock replaces the clock, in tests.
func (l *refusalLog) setClock(now func() time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.now = now
}

// refused counts a refused request, and logs it unless the rate is spent.
func (l *refusalLog) refused(method, path string, reason error) {
	l.mu.Lock()
	l.total++
	if !l.limiter.AllowN(l.now(), 1) {
		l.unlogged++
		l.mu.Unlock()
		return
	}
	total, unlogged := l.total, l.unlogged
	l.unlogged = 0
	l.mu.Unlock()
	l.log.Warn(l.msg, "method", clipValue(method), "path", clipValue(path), "reason", clipValue(reason.Error()),
		"refused", total, "not-logged", unlogged)
}

// count returns the refusals since the start.
func (l *refusalLog) count() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// clipValue returns s cut to at most maxLoggedValue bytes, on a rune
// boundary, and marked as cut.
func clipValue(s string) string {
	if len(s) <= maxLoggedValue {
		return s
	}
	i := maxLoggedValue
	for i > 0 && s[i]&0xc0 == 0x80 { // not inside a rune
		i--
	}
	return s[:i] + "...(cut)"
}

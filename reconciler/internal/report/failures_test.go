package report

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recordHandler keeps every log record, at every level.
type recordHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

// take returns the records so far and forgets them.
func (h *recordHandler) take() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.records
	h.records = nil
	return r
}

func recordAttrs(r slog.Record) map[string]any {
	m := map[string]any{}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.Any(); return true })
	return m
}

// The rate limiter of failure logs, driven with its own clock: a storm of
// first failures logs FailLogBurst lines per FailLogInterval, the lines
// suppressed are counted on the next line logged, even when that is a later
// failure of an object already failing, and later failures are at Debug.
func TestFailureLogRateLimit(t *testing.T) {
	h := &recordHandler{}
	var f FailLog
	log := slog.New(h)
	t0 := time.Unix(1000, 0)
	fail := func(key string, attempts int, at time.Time) {
		f.Record(log, false, key, attempts+1, fmt.Errorf("boom %s", key), false, at)
	}

	// A storm: 100 objects fail for the first time within the window.
	for i := range 100 {
		fail(fmt.Sprintf("k%03d", i), 0, t0.Add(time.Duration(i)*time.Millisecond))
	}
	recs := h.take()
	require.Len(t, recs, FailLogBurst, "a storm of 100 first failures logs at most %d lines", FailLogBurst)
	for i, r := range recs {
		a := recordAttrs(r)
		assert.Equal(t, slog.LevelWarn, r.Level)
		assert.Equal(t, fmt.Sprintf("k%03d", i), a["key"])
		assert.EqualValues(t, 1, a["attempt"])
		assert.EqualError(t, a["error"].(error), fmt.Sprintf("boom k%03d", i))
		assert.NotContains(t, a, "suppressed")
	}

	// Retries of the same objects, still within the window: Debug only.
	fail("k000", 1, t0.Add(time.Second))
	recs = h.take()
	require.Len(t, recs, 1)
	assert.Equal(t, slog.LevelDebug, recs[0].Level)
	assert.EqualValues(t, 2, recordAttrs(recs[0])["attempt"])

	// After the window, the next failure, even a retry, reports the 90
	// lines suppressed, once.
	fail("k000", 2, t0.Add(FailLogInterval+time.Second))
	fail("k001", 2, t0.Add(FailLogInterval+2*time.Second))
	var suppressed []any
	for _, r := range h.take() {
		if v, ok := recordAttrs(r)["suppressed"]; ok {
			assert.Equal(t, slog.LevelWarn, r.Level)
			suppressed = append(suppressed, v)
		}
	}
	assert.Equal(t, []any{int64(90)}, suppressed, "the suppressed lines are counted once, on the first line after the window")

	// A new first failure in the new window is logged again, at Warn.
	fail("new", 0, t0.Add(FailLogInterval+3*time.Second))
	recs = h.take()
	require.Len(t, recs, 1)
	assert.Equal(t, slog.LevelWarn, recs[0].Level)
	assert.Equal(t, "new", recordAttrs(recs[0])["key"])
	assert.NotContains(t, recordAttrs(recs[0]), "suppressed")

	// A terminal failure says it is not retried.
	f.Record(log, false, "term", 1, errors.New("bad"), true, t0.Add(FailLogInterval+4*time.Second))
	recs = h.take()
	require.Len(t, recs, 1)
	assert.Contains(t, recs[0].Message, "terminally")
}

package reconciler_test

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
)

// captureHandler keeps the records of the reconciler's failure logs.
type captureHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *captureHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *captureHandler) WithGroup(string) slog.Handler      { return h }

func (h *captureHandler) failures() (warn, debug []map[string]any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.records {
		attrs := map[string]any{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.Any(); return true })
		if _, ok := attrs["attempt"]; !ok {
			continue
		}
		switch r.Level {
		case slog.LevelWarn:
			warn = append(warn, attrs)
		case slog.LevelDebug:
			debug = append(debug, attrs)
		}
	}
	return warn, debug
}

// A storm of 100 objects failing at once logs at most ten Warn lines,
// each with the object's key, its attempt and the error; later failures of
// the same objects go to Debug.
func TestFailureLogsRateLimitedInAStorm(t *testing.T) {
	const n = 100
	fo := reconcilertest.NewFaultyOps(itemKey, newTarget(), nil)
	for i := range n { // two failures each
		require.NoError(t, fo.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Key: strconv.Itoa(i), Next: 2}))
	}
	h := &captureHandler{}
	f := startFixture(t, fo, &with{tables: true, log: slog.New(h)}, reconciler.WithPruning(0), reconciler.WithRetry(time.Millisecond, 2*time.Millisecond))
	objs := make([]*item, n)
	for i := range objs {
		objs[i] = &item{ID: strconv.Itoa(i), Value: "v"}
	}
	f.upsert(objs...)
	f.waitInfo("all reconciled", func(i *reconciler.Info) bool { return i.Succeeded == n && i.Retrying == 0 })

	warn, debug := h.failures()
	require.NotEmpty(t, warn)
	assert.LessOrEqual(t, len(warn), 10, "a storm logs at most ten Warn lines: %v", warn)
	for _, a := range warn {
		assert.EqualValues(t, 1, a["attempt"])
		key, _ := a["key"].(string)
		assert.NotEmpty(t, key)
		if err, ok := a["error"].(error); assert.True(t, ok, "error attribute in %v", a) {
			assert.Equal(t, "injected fault: update "+key, err.Error())
		}
	}
	assert.Len(t, debug, n, "every object's second failure, at Debug")
	for _, a := range debug {
		assert.EqualValues(t, 2, a["attempt"])
	}
}

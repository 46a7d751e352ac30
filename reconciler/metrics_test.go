package reconciler_test

// What the reconciler reports, where the scripts cannot produce it: an
// operation's own deadline, drift reported by Update, failure logs in a
// storm, and health. (Outcomes, latency, queue depth, oldest pending,
// prunes, refresh sweeps and the rows as objects fail and recover:
// testdata/observe_*.txtar; how the rows render: package tables.)

import (
	"context"
	"expvar"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// ev returns the expvar figure named variable/key as a string ("" if none).
func ev(m *metrics.ExpVar, variable, key string) string {
	if inner, ok := m.Map().Get(variable).(*expvar.Map); ok && inner.Get(key) != nil {
		return inner.Get(key).String()
	}
	return ""
}

// An error with a deadline of its own (a remote call's shorter timeout),
// returned before WithOperationTimeout ends the operation, is counted as an
// error, not a timeout, single and batch.
func TestOwnDeadlineIsAnErrorNotATimeout(t *testing.T) {
	forVariants(t, []variant{{1, false}, {1, true}}, func(t *testing.T, v variant) {
		tg := newTarget()
		var once atomic.Bool
		tg.update = func(context.Context, *item) error {
			if once.CompareAndSwap(false, true) {
				return fmt.Errorf("remote: %w", context.DeadlineExceeded)
			}
			return nil
		}
		m := metrics.NewUnpublishedExpVar()
		f := v.start(t, tg, nil, reconciler.WithMetrics(m), reconciler.WithRetry(time.Millisecond, time.Millisecond),
			reconciler.WithOperationTimeout(time.Hour))
		f.upsert(&item{ID: "a", Value: "1"})
		f.waitKind("a", status.KindDone)
		require.Eventually(t, func() bool { return ev(m, "reconciliation_outcomes", "test/update/success") == "1" }, timeout, time.Millisecond)
		assert.Equal(t, "1", ev(m, "reconciliation_outcomes", "test/update/error"))
		assert.Equal(t, "0", ev(m, "reconciliation_outcomes", "test/update/timeout"))
	})
}

// Drift that Update reports with ReportRepaired counts as refresh drift,
// in the metric and the reconcilers row, only for an object marked
// Refreshing: an Update of a new desired state (Pending) applies a change.
func TestRefreshDriftCountsOnlyRefreshingUpdates(t *testing.T) {
	tg := newTarget()
	tg.update = func(ctx context.Context, _ *item) error {
		reconciler.ReportRepaired(ctx, 1)
		return nil
	}
	m := metrics.NewUnpublishedExpVar()
	f := startFixture(t, tg, &with{tables: true}, reconciler.WithMetrics(m), reconciler.WithPruning(0))
	f.upsert(&item{ID: "a", Value: "1"})
	f.waitReconciled()
	info := f.waitInfo("a reconciled", func(i *tables.Info) bool { return i.Succeeded == 1 })
	assert.Zero(t, info.DriftRepaired)
	assert.Equal(t, "", ev(m, "drift_repaired", "test/refresh"))

	a, _ := f.get("a")
	f.insertAs(a.clone().setStatus(status.Refreshing()))
	f.waitInfo("refresh drift", func(i *tables.Info) bool { return i.DriftRepaired == 1 })
	require.Eventually(t, func() bool { return ev(m, "drift_repaired", "test/refresh") == "1" }, timeout, time.Millisecond)
}

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
	f.waitInfo("all reconciled", func(i *tables.Info) bool { return i.Succeeded == n && i.Retrying == 0 })
	assert.Zero(t, f.tables.Retries().NumObjects(f.db.ReadTxn()), "no retry rows left")

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

// The reconcile job's health. (Failing objects listed earliest retry
// first: testdata/health_order.txtar.)

// A round limiter that turns unusable while the reconciler runs (its owner
// set the burst to zero) neither stops the loop nor goes unnoticed: work
// goes on and health says why.
func TestRoundLimiterBrokenAtRunTimeDegradesHealth(t *testing.T) {
	lim := rate.NewLimiter(rate.Inf, 1)
	f := startFixture(t, newTarget(), nil, reconciler.WithRoundLimits(10, lim))
	f.upsert(&item{ID: "a"})
	f.waitKind("a", status.KindDone)

	lim.SetLimit(100)
	lim.SetBurst(0)
	f.upsert(&item{ID: "b"})
	f.waitKind("b", status.KindDone)
	f.waitHealth(func(level cell.Level, msg string) bool {
		return level == cell.StatusDegraded && strings.Contains(msg, "limiter")
	})
	f.remove("a")
	f.upsert(&item{ID: "c"})
	f.waitKind("c", status.KindDone)
}

// The health tree has the children the StateDB reconciler's has, named
// after the reconciler, refreshing off included, and one per dependency.
func TestHealthChildrenAreNamedLikeTheStateDBReconciler(t *testing.T) {
	for _, name := range []string{"", "foo"} {
		for _, refresh := range []bool{false, true} {
			t.Run(fmt.Sprintf("name=%q,refresh=%v", name, refresh), func(t *testing.T) {
				opts := []reconciler.Option{reconciler.WithName(name)}
				if name == "" {
					opts = nil
				}
				if refresh {
					opts = append(opts, reconciler.WithRefreshing(time.Hour, nil))
				}
				f := startFixture(t, newTarget(), withDeps(t, new(statedb.RWTable[*item]), sameID), opts...)
				f.upsert(&item{ID: "a", Value: "1"})
				f.caughtUp()
				suffix := ""
				if name != "" {
					suffix = "-" + name
				}
				for _, child := range []string{"job-reconcile" + suffix, "job-refresh" + suffix, "job-dependency-deps" + suffix} {
					f.waitHealth(func(cell.Level, string) bool { return true }, child)
				}
			})
		}
	}
}

package reconciler_test

import (
	"context"
	"errors"
	"expvar"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
)

// eventually waits until cond holds, checking every few milliseconds, for
// figures without a change notification (expvar, Prometheus).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, timeout, 2*time.Millisecond, what)
}

// ev returns the expvar figure named variable/key as a string ("" if none).
func ev(m *metrics.ExpVar, variable, key string) string {
	inner, ok := m.Map().Get(variable).(*expvar.Map)
	if !ok {
		return ""
	}
	if v := inner.Get(key); v != nil {
		return v.String()
	}
	return ""
}

func evFloat(m *metrics.ExpVar, variable, key string) float64 {
	f, _ := strconv.ParseFloat(ev(m, variable, key), 64)
	return f
}

// histCount returns the "count" of the expvar histogram variable/key.
func histCount(m *metrics.ExpVar, variable, key string) string {
	inner, ok := m.Map().Get(variable).(*expvar.Map)
	if !ok {
		return ""
	}
	h, ok := inner.Get(key).(*expvar.Map)
	if !ok {
		return ""
	}
	return h.Get("count").String()
}

// Each operation is counted once by how it ended, single and batch: a
// success, an error, a terminal error, a panic, a timeout of
// WithOperationTimeout, and an error with a deadline of its own (a remote
// call's shorter timeout) before the operation timeout, which is an error,
// not a timeout.
func TestOutcomesCountedByResult(t *testing.T) {
	keys := []string{"ok", "err", "term", "panic", "slow", "own-deadline"}
	want := map[string]string{"success": "5", "error": "2", "terminal": "1", "panic": "1", "timeout": "1"}
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			// Each key fails on its first attempt only; "slow" until the
			// operation timeout ends it.
			tg := newTarget()
			var ownDeadline atomic.Bool
			tg.update = func(_ context.Context, it *item) error {
				if it.ID == "own-deadline" && ownDeadline.CompareAndSwap(false, true) {
					return fmt.Errorf("remote: %w", context.DeadlineExceeded)
				}
				return nil
			}
			fo := reconcilertest.NewFaultyOps(itemKey, tg, tg)
			for key, mode := range map[string]reconcilertest.Mode{"err": reconcilertest.ModeError, "term": reconcilertest.ModeTerminal,
				"panic": reconcilertest.ModePanic, "slow": reconcilertest.ModeDelay} {
				require.NoError(t, fo.Inject(reconcilertest.Fault{Mode: mode, Key: key, Next: 1}))
			}
			w := &with{}
			if batch {
				w.batch = fo
			}
			m := metrics.NewUnpublishedExpVar()
			f := startFixture(t, fo, w, reconciler.WithMetrics(m), reconciler.WithPruning(0),
				reconciler.WithRetry(time.Millisecond, time.Millisecond), reconciler.WithOperationTimeout(200*time.Millisecond))
			// One at a time, so that a batch holds one object: a panic fails
			// every object of its batch.
			for _, k := range keys {
				f.upsert(&item{ID: k, Value: "1"})
				if k == "term" {
					f.waitKind(k, status.KindError)
				} else {
					f.waitKind(k, status.KindDone)
				}
			}
			eventually(t, fmt.Sprintf("outcomes counted as %v", want), func() bool {
				for res, n := range want {
					if ev(m, "reconciliation_outcomes", "test/update/"+res) != n {
						return false
					}
				}
				return true
			})
			for res, n := range want {
				assert.Equal(t, n, ev(m, "reconciliation_outcomes", "test/update/"+res), res)
			}
		})
	}
}

// The oldest-pending age is non-zero while an object is held, by an
// operation in flight or by a retry, and zero once everything is Done; the
// reconcilers row shows the same.
func TestOldestPendingWhileHeld(t *testing.T) {
	tg := newTarget()
	held := tg.hold("held")
	fo := reconcilertest.NewFaultyOps(itemKey, tg, nil)
	require.NoError(t, fo.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Key: "failing"}))
	m := metrics.NewUnpublishedExpVar()
	f := startFixture(t, fo, &with{tables: true}, reconciler.WithMetrics(m), reconciler.WithConcurrency(2),
		reconciler.WithPruning(0), reconciler.WithRetry(5*time.Millisecond, 5*time.Millisecond))

	f.upsert(&item{ID: "held", Value: "1"})
	eventually(t, "oldest pending > 0 with an operation in flight", func() bool {
		return evFloat(m, "queue_oldest_pending", "test") > 0 && ev(m, "queue_in_flight", "test") == "1"
	})
	info := f.waitInfo("holding one in flight", func(i *reconciler.Info) bool { return i.InFlight == 1 })
	assert.False(t, info.OldestPending.IsZero())
	held.let()
	f.waitKind("held", status.KindDone)
	eventually(t, "oldest pending back to 0", func() bool { return evFloat(m, "queue_oldest_pending", "test") == 0 })

	f.upsert(&item{ID: "failing", Value: "1"})
	f.waitKind("failing", status.KindError)
	// Retried every 5ms, each round reports a larger age.
	eventually(t, "the age of a held retry grows", func() bool { return evFloat(m, "queue_oldest_pending", "test") > 0.02 })
	info = f.waitInfo("holding a retry", func(i *reconciler.Info) bool { return i.Retrying == 1 })
	assert.False(t, info.OldestPending.IsZero())
	fo.Clear("failing")
	f.waitKind("failing", status.KindDone)
	eventually(t, "oldest pending back to 0", func() bool { return evFloat(m, "queue_oldest_pending", "test") == 0 })
	f.waitInfo("nothing held", func(i *reconciler.Info) bool { return i.OldestPending.IsZero() && i.Retrying == 0 })
}

// The Pending-to-Done histogram counts each object reconciled exactly once,
// however many attempts it took, single and batch. (The Prometheus
// adapter's module has a test of the same name, which scrapes it.)
func TestLatencyHistogramCountsObjectsReconciled(t *testing.T) {
	const n, flaky = 200, 20
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			tg := newTarget()
			fo := reconcilertest.NewFaultyOps(itemKey, tg, tg)
			for i := range flaky { // the first attempt fails
				require.NoError(t, fo.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Key: strconv.Itoa(i), Next: 1}))
			}
			w := &with{}
			if batch {
				w.batch = fo
			}
			ex := metrics.NewUnpublishedExpVar()
			f := startFixture(t, fo, w, reconciler.WithMetrics(ex), reconciler.WithPruning(0),
				reconciler.WithRetry(time.Millisecond, 2*time.Millisecond))
			objs := make([]*item, n)
			for i := range objs {
				objs[i] = &item{ID: strconv.Itoa(i), Value: "v"}
			}
			f.upsert(objs...)
			f.waitReconciled()

			// The commit reports the histogram, then the count: wait for both.
			eventually(t, "every object counted", func() bool {
				return histCount(ex, "convergence_duration_histogram", "test") == strconv.Itoa(n) &&
					ev(ex, "convergence_count", "test") == strconv.Itoa(n)
			})
			assert.Equal(t, strconv.Itoa(n), ev(ex, "reconciliation_outcomes", "test/update/success"))
			assert.Equal(t, strconv.Itoa(flaky), ev(ex, "reconciliation_outcomes", "test/update/error"))
		})
	}
}

// Drift reported with ReportRepaired is counted by source: by Prune, and by
// Update of an object marked Refreshing; the reconcilers row sums it and
// shows the last prune, its error, and the last refresh sweep. Prunes are
// counted with their errors, and refresh sweeps with the objects marked.
func TestDriftPruneAndRefreshCounted(t *testing.T) {
	var pruneErr atomic.Bool
	tg := newTarget()
	tg.update = func(ctx context.Context, it *item) error {
		if it.Status.Kind == status.KindRefreshing {
			reconciler.ReportRepaired(ctx, 1)
		}
		return nil
	}
	tg.prune = func(ctx context.Context) error {
		if pruneErr.Load() {
			return errors.New("no")
		}
		reconciler.ReportRepaired(ctx, 3)
		return nil
	}
	m := metrics.NewUnpublishedExpVar()
	f := startFixture(t, tg, &with{tables: true}, reconciler.WithMetrics(m), reconciler.WithPruning(time.Hour),
		reconciler.WithRefreshing(30*time.Millisecond, nil), reconciler.WithRetry(time.Hour, time.Hour))

	f.upsert(&item{ID: "a", Value: "1"})
	f.waitReconciled()
	// The first prune runs once the table is initialized (it has no
	// initializers).
	info := f.waitInfo("pruned", func(i *reconciler.Info) bool { return !i.LastPrune.IsZero() })
	assert.Empty(t, info.LastPruneError)
	eventually(t, "prune drift counted", func() bool {
		return ev(m, "drift_repaired", "test/prune") == "3" && ev(m, "prune_count", "test") == "1"
	})
	assert.Equal(t, "0", ev(m, "prune_total_errors", "test"))
	assert.Equal(t, "1", ev(m, "reconciliation_outcomes", "test/prune/success"))
	assert.Positive(t, evFloat(m, "prune_duration", "test"))

	// The refresh job marks a Refreshing; its Update repairs drift.
	eventually(t, "refresh drift counted", func() bool {
		n, _ := strconv.Atoi(ev(m, "drift_repaired", "test/refresh"))
		marks, _ := strconv.Atoi(ev(m, "refresh_marks", "test"))
		return n >= 2 && marks >= n
	})
	info = f.waitInfo("refreshed, with drift", func(i *reconciler.Info) bool { return !i.LastRefresh.IsZero() && i.DriftRepaired >= 5 })
	assert.Equal(t, reconciler.StateRunning, info.State)

	// A failed prune (retried only after an hour) degrades the row.
	pruneErr.Store(true)
	f.rec.Prune()
	info = f.waitInfo("degraded by the prune", func(i *reconciler.Info) bool { return i.LastPruneError != "" })
	assert.Equal(t, reconciler.StateDegraded, info.State)
	assert.Equal(t, "prune: no", info.LastPruneError)
	assert.Contains(t, info.TableRow()[11], "ago: prune: no")
	eventually(t, "prune error counted", func() bool {
		return ev(m, "prune_total_errors", "test") == "1" && ev(m, "prune_current_errors", "test") == "1"
	})
	assert.Equal(t, "1", ev(m, "reconciliation_outcomes", "test/prune/error"))
	assert.Equal(t, "3", ev(m, "drift_repaired", "test/prune"), "a failed prune repaired nothing")

	pruneErr.Store(false)
	f.rec.Prune()
	f.waitInfo("running after a good prune", func(i *reconciler.Info) bool {
		return i.LastPruneError == "" && i.State == reconciler.StateRunning
	})
	eventually(t, "prune gauge cleared", func() bool { return ev(m, "prune_current_errors", "test") == "0" })
}

// Only Updates of objects marked Refreshing count as refresh drift: an
// Update of a new desired state (Pending) that reports what it changed is
// applying a change, not repairing drift.
func TestPendingUpdateIsNotRefreshDrift(t *testing.T) {
	tg := newTarget()
	tg.update = func(ctx context.Context, _ *item) error {
		reconciler.ReportRepaired(ctx, 1)
		return nil
	}
	m := metrics.NewUnpublishedExpVar()
	f := startFixture(t, tg, &with{tables: true}, reconciler.WithMetrics(m), reconciler.WithPruning(0))
	f.upsert(&item{ID: "a", Value: "1"})
	f.waitReconciled()
	info := f.waitInfo("a reconciled", func(i *reconciler.Info) bool { return i.Succeeded == 1 })
	assert.Zero(t, info.DriftRepaired)
	assert.Equal(t, "", ev(m, "drift_repaired", "test/refresh"))
}

// roundWatcher is unpublished expvar metrics that also keep the last
// round's figures.
type roundWatcher struct {
	metrics.Metrics
	mu      sync.Mutex
	last    metrics.RoundStats
	changed chan struct{} // closed and replaced at every round
}

func newRoundWatcher() *roundWatcher {
	return &roundWatcher{Metrics: metrics.NewUnpublishedExpVar(), changed: make(chan struct{})}
}

func (w *roundWatcher) Round(_ cell.FullModuleID, _ string, s metrics.RoundStats) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = s
	close(w.changed)
	w.changed = make(chan struct{})
}

// waitRound waits until the last round's figures satisfy ok, and returns
// them.
func (w *roundWatcher) waitRound(t *testing.T, what string, ok func(metrics.RoundStats) bool) (s metrics.RoundStats) {
	t.Helper()
	waitUntil(t, "a round "+what, func() (bool, <-chan struct{}) {
		w.mu.Lock()
		defer w.mu.Unlock()
		s = w.last
		return ok(s), w.changed
	})
	return s
}

// Versions written while an operation on their object is in flight (a
// newer one replacing the one parked before it), and deletes, wait behind
// it and count in the queue depth until they start; so do operations
// waiting for a worker.
func TestParkedVersionCountsInQueueDepth(t *testing.T) {
	tg, rounds := newTarget(), newRoundWatcher()
	held := []*hold{tg.hold("a"), tg.hold("b"), tg.hold("c")}
	f := startFixture(t, tg, nil, reconciler.WithConcurrency(3), reconciler.WithMetrics(rounds), reconciler.WithPruning(0))
	f.upsert(&item{ID: "a", Value: "v1"}, &item{ID: "b", Value: "v1"}, &item{ID: "c", Value: "v1"})
	for _, h := range held {
		h.wait(t)
	}
	f.upsert(&item{ID: "a", Value: "v2"})
	f.upsert(&item{ID: "a", Value: "v3"}, &item{ID: "b", Value: "v2"})
	f.remove("c")
	rounds.waitRound(t, "with a=v3, b=v2 and c's delete parked", func(s metrics.RoundStats) bool { return s.InFlight == 3 && s.Depth == 3 })
	f.upsert(&item{ID: "d", Value: "v1"})
	rounds.waitRound(t, "with d waiting for a worker", func(s metrics.RoundStats) bool { return s.Depth == 4 })
	for _, h := range held {
		h.let()
	}
	f.converged(tg)
	assert.Equal(t, map[string]string{"a": "v3", "b": "v2", "d": "v1", "~marker": ""}, tg.State())
	s := rounds.waitRound(t, "with nothing in flight", func(s metrics.RoundStats) bool { return s.InFlight == 0 })
	assert.Zero(t, s.Depth)
}

// reconciliation_count counts rounds that ran operations, as documented,
// not every wake-up of the loop.
func TestReconciliationCountCountsRoundsWithOperations(t *testing.T) {
	m := metrics.NewUnpublishedExpVar()
	tg := newTarget()
	f := startFixture(t, tg, nil, reconciler.WithMetrics(m))
	f.reconciledTo(f.upsert(&item{ID: "a"}))
	f.waitKind("a", status.KindDone)
	count := func() string { return m.ReconciliationCountVar.String() }
	before := count()
	for range 5 {
		tg.pruneNow(f)
	}
	f.waitReconciled()
	assert.Equal(t, before, count(), "prune wake-ups ran no operations")
}

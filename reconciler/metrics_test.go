package reconciler_test

// Figures that the scripts cannot produce: an operation's own deadline,
// and drift reported by Update. (Outcomes, latency, queue depth, oldest
// pending, prunes and refresh sweeps: testdata/observe_*.txtar.)

import (
	"context"
	"expvar"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
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
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			tg := newTarget()
			var once atomic.Bool
			tg.update = func(context.Context, *item) error {
				if once.CompareAndSwap(false, true) {
					return fmt.Errorf("remote: %w", context.DeadlineExceeded)
				}
				return nil
			}
			w := &with{}
			if batch {
				w.batch = tg
			}
			m := metrics.NewUnpublishedExpVar()
			f := startFixture(t, tg, w, reconciler.WithMetrics(m), reconciler.WithRetry(time.Millisecond, time.Millisecond),
				reconciler.WithOperationTimeout(time.Hour))
			f.upsert(&item{ID: "a", Value: "1"})
			f.waitKind("a", status.KindDone)
			require.Eventually(t, func() bool { return ev(m, "reconciliation_outcomes", "test/update/success") == "1" }, timeout, time.Millisecond)
			assert.Equal(t, "1", ev(m, "reconciliation_outcomes", "test/update/error"))
			assert.Equal(t, "0", ev(m, "reconciliation_outcomes", "test/update/timeout"))
		})
	}
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
	info := f.waitInfo("a reconciled", func(i *reconciler.Info) bool { return i.Succeeded == 1 })
	assert.Zero(t, info.DriftRepaired)
	assert.Equal(t, "", ev(m, "drift_repaired", "test/refresh"))

	a, _ := f.get("a")
	f.insertAs(a.clone().setStatus(status.Refreshing()))
	f.waitInfo("refresh drift", func(i *reconciler.Info) bool { return i.DriftRepaired == 1 })
	require.Eventually(t, func() bool { return ev(m, "drift_repaired", "test/refresh") == "1" }, timeout, time.Millisecond)
}

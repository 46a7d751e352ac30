package reconciler_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	yaml "go.yaml.in/yaml/v3"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
)

// A failure makes the reconciler's row degraded, with the last error, the
// counts, the failing object and the oldest pending time, and adds a retry
// row with attempts, first failure and next attempt. Recovery clears the
// retry row and the failure figures but keeps the last error on record;
// stopping the hive marks the row stopped.
func TestTablesFollowFailureAndRecovery(t *testing.T) {
	fo := reconcilertest.NewFaultyOps(itemKey, newTarget(), nil)
	const diskFull = "injected fault: update b"
	f := startFixture(t, fo, &with{tables: true}, reconciler.WithRetry(20*time.Millisecond, 20*time.Millisecond), reconciler.WithPruning(0))

	f.upsert(&item{ID: "a", Value: "1"})
	f.waitReconciled()
	info := f.waitInfo("running with a", func(i *reconciler.Info) bool { return i.Succeeded == 1 })
	assert.Equal(t, reconciler.Info{ID: "test", Module: "test", State: reconciler.StateRunning, Objects: 1, Succeeded: 1, Workers: 1}, *info)

	require.NoError(t, fo.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Key: "b"}))
	before := time.Now()
	f.upsert(&item{ID: "b", Value: "1"})
	row := f.waitRetry("b", "retried twice and waiting", func(r *reconciler.RetryInfo) bool {
		return r != nil && r.Attempts >= 2 && !r.NextAttempt.IsZero()
	})
	assert.Equal(t, "test", row.Reconciler)
	assert.Equal(t, "b", row.Key)
	assert.False(t, row.Delete)
	assert.Equal(t, diskFull, row.LastError)
	assert.False(t, row.FirstFailed.Before(before), "first failure %s is before the insert %s", row.FirstFailed, before)
	assert.True(t, row.NextAttempt.After(row.FirstFailed), "next attempt %s is after the first failure %s", row.NextAttempt, row.FirstFailed)
	assert.Less(t, time.Until(row.NextAttempt), time.Second, "next attempt within the backoff of 20ms and its jitter")

	info = f.waitInfo("degraded", func(i *reconciler.Info) bool { return i.State == reconciler.StateDegraded && i.Failed >= 2 })
	assert.Equal(t, 2, info.Objects)
	assert.EqualValues(t, 1, info.Succeeded)
	assert.GreaterOrEqual(t, info.FailuresSinceSuccess, 2)
	assert.Equal(t, diskFull, info.LastError)
	assert.False(t, info.LastErrorAt.Before(row.FirstFailed))
	assert.Equal(t, 1, info.Retrying)
	assert.False(t, info.OldestPending.IsZero(), "an object is held: oldest pending is set")
	assert.True(t, info.OldestPending.Before(row.FirstFailed) || info.OldestPending.Equal(row.FirstFailed))

	fo.Clear("b")
	f.waitRetry("b", "gone", func(r *reconciler.RetryInfo) bool { return r == nil })
	info = f.waitInfo("running again", func(i *reconciler.Info) bool { return i.State == reconciler.StateRunning })
	assert.EqualValues(t, 2, info.Succeeded)
	assert.GreaterOrEqual(t, info.Failed, uint64(2))
	assert.Zero(t, info.FailuresSinceSuccess)
	assert.Zero(t, info.Retrying)
	assert.True(t, info.OldestPending.IsZero(), "nothing held: oldest pending is cleared")
	assert.Equal(t, diskFull, info.LastError, "the last error stays on record")
	assert.Zero(t, f.tables.Retries().NumObjects(f.db.ReadTxn()))

	f.stop()
	info, _, found := f.tables.Reconcilers().Get(f.db.ReadTxn(), reconciler.InfoByID.Query("test"))
	require.True(t, found)
	assert.Equal(t, reconciler.StateStopped, info.State)
}

// A retry row is replaced when its object changes (counting the new
// version's attempts from one) and removed when the object is deleted or
// changes to a version that succeeds. A failing delete has a row of its own.
func TestRetryRowsFollowTheObject(t *testing.T) {
	var failE atomic.Bool
	tg := newTarget()
	tg.update = func(_ context.Context, it *item) error {
		if it.Value == "bad" {
			return errors.New("bad value " + it.ID)
		}
		return nil
	}
	tg.delete = func(_ context.Context, it *item) error {
		if it.ID == "e" && failE.Load() {
			return errors.New("busy")
		}
		return nil
	}
	// Retries an hour away: the rows stay as the first failure left them.
	f := startFixture(t, tg, &with{tables: true}, reconciler.WithRetry(time.Hour, time.Hour), reconciler.WithPruning(0))

	f.upsert(&item{ID: "c", Value: "bad"}, &item{ID: "d", Value: "bad"}, &item{ID: "e", Value: "1"})
	for _, key := range []string{"c", "d"} {
		row := f.waitRetry(key, "failing", func(r *reconciler.RetryInfo) bool { return r != nil && !r.NextAttempt.IsZero() })
		assert.Equal(t, 1, row.Attempts)
		assert.Equal(t, "bad value "+key, row.LastError)
		assert.Greater(t, time.Until(row.NextAttempt), 50*time.Minute)
	}

	// c changes to a version that also fails: a new row, from attempt one.
	first := f.waitRetry("c", "failing", func(r *reconciler.RetryInfo) bool { return r != nil })
	f.upsert(&item{ID: "c", Value: "bad"})
	second := f.waitRetry("c", "replaced", func(r *reconciler.RetryInfo) bool { return r != nil && r.FirstFailed.After(first.FirstFailed) })
	assert.Equal(t, 1, second.Attempts)

	// c changes to a good version: the row goes.
	f.upsert(&item{ID: "c", Value: "good"})
	f.waitRetry("c", "gone after success", func(r *reconciler.RetryInfo) bool { return r == nil })

	// d is deleted: the row goes.
	f.remove("d")
	f.waitRetry("d", "gone after delete", func(r *reconciler.RetryInfo) bool { return r == nil })

	// e fails to be deleted: a delete row.
	failE.Store(true)
	f.remove("e")
	row := f.waitRetry("e", "a failing delete", func(r *reconciler.RetryInfo) bool { return r != nil })
	assert.True(t, row.Delete)
	assert.Equal(t, "busy", row.LastError)
	assert.Equal(t, "delete", row.TableRow()[2])

	info := f.waitInfo("one failing", func(i *reconciler.Info) bool { return i.Retrying == 1 })
	assert.Equal(t, reconciler.StateDegraded, info.State)
	assert.Equal(t, 1, f.tables.Retries().NumObjects(f.db.ReadTxn()))
}

// The rows render as tables for db/show: one cell per header column, times
// as ages, the next attempt as "in D" or "running".
func TestTableRowsReadAsTables(t *testing.T) {
	now := time.Now()
	info := &reconciler.Info{
		ID: "agent.routes/r", Module: "agent.routes", Name: "r", State: reconciler.StateDegraded,
		Objects: 3, Succeeded: 10, Failed: 2, Retrying: 1, InFlight: 1, Workers: 4, BusyWorkers: 1,
		OldestPending: now.Add(-time.Second), LastError: "disk full", LastErrorAt: now.Add(-2 * time.Second),
		LastPrune: now.Add(-3 * time.Second), LastPruneError: "prune: nope",
	}
	header, row := info.TableHeader(), info.TableRow()
	require.Len(t, row, len(header))
	cell := func(name string) string {
		for i, h := range header {
			if h == name {
				return row[i]
			}
		}
		t.Fatalf("no column %q in %v", name, header)
		return ""
	}
	assert.Equal(t, "agent.routes", cell("Module"))
	assert.Equal(t, "r", cell("Name"))
	assert.Equal(t, "degraded", cell("State"))
	assert.Equal(t, "3", cell("Objects"))
	assert.Equal(t, "10", cell("Succeeded"))
	assert.Equal(t, "2", cell("Failed"))
	assert.Equal(t, "1", cell("Retrying"))
	assert.Equal(t, "1", cell("InFlight"))
	assert.Equal(t, "1/4", cell("Workers"), "busy/configured")
	assert.Regexp(t, `^1(\.\d+)?s ago$`, cell("OldestPending"))
	assert.Regexp(t, `^disk full \(2(\.\d+)?s ago\)$`, cell("LastError"))
	assert.Regexp(t, `^3(\.\d+)?s ago: prune: nope$`, cell("LastPrune"))
	assert.Equal(t, "", cell("LastRefresh"), "never refreshed: empty")

	empty := (&reconciler.Info{Module: "m", State: reconciler.StateRunning}).TableRow()
	assert.Equal(t, []string{"m", "", "running", "0", "0", "0", "0", "0", "0/0", "", "", "", ""}, empty)

	retry := &reconciler.RetryInfo{Reconciler: "m", Key: "k", Attempts: 3, FirstFailed: now.Add(-time.Minute), NextAttempt: now.Add(time.Hour), LastError: "x"}
	rh, rr := retry.TableHeader(), retry.TableRow()
	require.Len(t, rr, len(rh))
	assert.Equal(t, []string{"Reconciler", "Key", "Op", "Attempts", "FirstFailed", "NextAttempt", "LastError"}, rh)
	assert.Equal(t, []string{"m", "k", "update", "3"}, rr[:4])
	assert.Regexp(t, `^1m0(\.\d+)?s ago$`, rr[4])
	assert.Regexp(t, `^in (1h0m0s|59m59(\.\d+)?s)$`, rr[5])
	retry.NextAttempt, retry.Delete = time.Time{}, true
	rr = retry.TableRow()
	assert.Equal(t, "delete", rr[2])
	assert.Equal(t, "running", rr[5])
	assert.False(t, strings.Contains(strings.Join(rr, ""), "\n"))
}

func TestInfoEncodesDurationsAsStrings(t *testing.T) {
	in := reconciler.Info{ID: "m/x", State: reconciler.StateRunning, LastPruneDuration: 375 * time.Microsecond, FailuresSinceSuccess: 2}
	data, err := json.Marshal(in)
	require.NoError(t, err)
	assert.Contains(t, string(data), `"last-prune-duration":"375µs"`)
	assert.Contains(t, string(data), `"failures-since-success":2`)
	var out reconciler.Info
	require.NoError(t, json.Unmarshal(data, &out))
	assert.Equal(t, in, out)
	y, err := yaml.Marshal(in)
	require.NoError(t, err)
	assert.Contains(t, string(y), "last-prune-duration: 375µs")
	assert.Error(t, json.Unmarshal([]byte(`{"last-prune-duration":"soon"}`), &out))
}

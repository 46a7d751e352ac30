package tables_test

// How the rows render and encode. (What they say as reconcilers' objects
// fail and recover: testdata/observe_failure.txtar and
// testdata/observe_retry_rows.txtar at the root.)

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	yaml "go.yaml.in/yaml/v3"

	"github.com/converge-go/converge/tables"
)

// The rows render as tables for db/show: one cell per header column, times
// as ages, the next attempt as "in D", "running" or "due".
func TestTableRowsReadAsTables(t *testing.T) {
	now := time.Now()
	info := &tables.Info{
		ID: "agent.routes/r", Module: "agent.routes", Name: "r", State: tables.StateDegraded,
		Objects: 3, Succeeded: 10, Failed: 2, Retrying: 1, InFlight: 1, Workers: 4, BusyWorkers: 1,
		OldestPending: now.Add(-time.Second), LastError: "disk full", LastErrorAt: now.Add(-2 * time.Second),
		LastPrune: now.Add(-3 * time.Second), LastPruneError: "prune: nope",
	}
	header, row := info.TableHeader(), info.TableRow()
	require.Equal(t, []string{"Module", "Name", "State", "Objects", "Succeeded", "Failed", "Retrying", "InFlight", "Workers", "OldestPending", "LastError", "LastPrune", "LastRefresh"}, header)
	require.Len(t, row, len(header))
	assert.Equal(t, []string{"agent.routes", "r", "degraded", "3", "10", "2", "1", "1", "1/4"}, row[:9], "Workers is busy/configured")
	assert.Regexp(t, `^1(\.\d+)?s ago$`, row[9])
	assert.Regexp(t, `^disk full \(2(\.\d+)?s ago\)$`, row[10])
	assert.Regexp(t, `^3(\.\d+)?s ago: prune: nope$`, row[11])
	assert.Equal(t, "", row[12], "never refreshed: empty")

	// Shown rounded to the millisecond, as long ago as it is when shown: at
	// least the 37ms set here, more on a slow machine.
	info.TargetFailingSince = time.Now().Add(-37 * time.Millisecond)
	assert.Regexp(t, `^degraded, target failing for (3[7-9]|[4-9]\d|\d{3,})ms$`, info.TableRow()[2])

	empty := (&tables.Info{Module: "m", State: tables.StateRunning}).TableRow()
	assert.Equal(t, []string{"m", "", "running", "0", "0", "0", "0", "0", "0/0", "", "", "", ""}, empty)

	retry := &tables.RetryInfo{Reconciler: "m", Key: "k", Attempts: 3, FirstFailed: now.Add(-time.Minute), NextAttempt: now.Add(time.Hour), LastError: "x"}
	rh, rr := retry.TableHeader(), retry.TableRow()
	require.Len(t, rr, len(rh))
	assert.Equal(t, []string{"Reconciler", "Key", "Op", "Attempts", "FirstFailed", "NextAttempt", "LastError", "Errors", "Drifted"}, rh)
	assert.Equal(t, []string{"m", "k", "update", "3"}, rr[:4])
	assert.Regexp(t, `^1m0(\.\d+)?s ago$`, rr[4])
	assert.Regexp(t, `^in (1h0m0s|59m59(\.\d+)?s)$`, rr[5])
	retry.NextAttempt = now.Add(-32 * time.Millisecond)
	assert.Equal(t, "due", retry.TableRow()[5], "past: due, never a negative duration")
	retry.NextAttempt, retry.Delete = time.Time{}, true
	rr = retry.TableRow()
	assert.Equal(t, "delete", rr[2])
	assert.Equal(t, "running", rr[5])
	assert.False(t, strings.Contains(strings.Join(rr, ""), "\n"))
	assert.Equal(t, "", rr[7], "no errors kept")
	assert.Equal(t, "", rr[8], "not drifted")

	drifted := (&tables.RetryInfo{Reconciler: "m", Key: "k", Drifted: true}).TableRow()
	assert.Equal(t, []string{"m", "k", "update", "0", "", "", "", "", "drifted"}, drifted, "no attempt runs or waits")
}

func TestInfoEncodesDurationsAsStrings(t *testing.T) {
	in := tables.Info{ID: "m/x", State: tables.StateRunning, LastPruneDuration: 375 * time.Microsecond, FailuresSinceSuccess: 2}
	data, err := json.Marshal(in)
	require.NoError(t, err)
	assert.Contains(t, string(data), `"last-prune-duration":"375µs"`)
	assert.Contains(t, string(data), `"failures-since-success":2`)
	var out tables.Info
	require.NoError(t, json.Unmarshal(data, &out))
	assert.Equal(t, in, out)
	y, err := yaml.Marshal(in)
	require.NoError(t, err)
	assert.Contains(t, string(y), "last-prune-duration: 375µs")
	assert.Error(t, json.Unmarshal([]byte(`{"last-prune-duration":"soon"}`), &out))
}

// Write stores what it is given in one transaction and keeps the
// LastRefresh that Refreshed wrote; nil info leaves the row as it is.
func TestWriteKeepsLastRefresh(t *testing.T) {
	db := statedb.New()
	tb, err := tables.New(db)
	require.NoError(t, err)
	get := func() *tables.Info {
		info, _, found := tb.Reconcilers().Get(db.ReadTxn(), tables.InfoByID.Query("m/x"))
		require.True(t, found)
		return info
	}

	at := time.Unix(1700000000, 0)
	tb.Refreshed("m/x", at)
	assert.Equal(t, tables.Info{ID: "m/x", State: tables.StateRunning, LastRefresh: at}, *get(), "a refresh before the first round makes a running row")

	tb.Write(&tables.Info{ID: "m/x", Module: "m", Name: "x", State: tables.StateDegraded, Failed: 1}, nil)
	assert.Equal(t, tables.Info{ID: "m/x", Module: "m", Name: "x", State: tables.StateDegraded, Failed: 1, LastRefresh: at}, *get())

	rev := tb.Reconcilers().Revision(db.ReadTxn())
	tb.Write(nil, []tables.RetryInfo{{Reconciler: "m/x", Key: "k", Attempts: 2, LastError: "e"}})
	assert.Equal(t, rev, tb.Reconcilers().Revision(db.ReadTxn()), "nil info: the row is not written")
	retry, _, found := tb.Retries().Get(db.ReadTxn(), tables.RetryByKey.Query(tables.RetryKey("m/x", "k")))
	require.True(t, found)
	assert.Equal(t, 2, retry.Attempts)

	tb.Write(nil, []tables.RetryInfo{{Reconciler: "m/x", Key: "k"}})
	assert.Zero(t, tb.Retries().NumObjects(db.ReadTxn()), "zero Attempts removes the row")

	tb.Refreshed("m/x", at.Add(time.Minute))
	assert.Equal(t, tables.StateDegraded, get().State, "Refreshed keeps the rest of the row")
	assert.Equal(t, at.Add(time.Minute), get().LastRefresh)

	_, err = tables.New(db)
	assert.Error(t, err, "the tables are registered once per DB")
}

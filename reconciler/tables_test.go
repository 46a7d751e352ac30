package reconciler_test

// How the rows of TablesCell's tables render and encode. (What they say
// as objects fail and recover: testdata/observe_failure.txtar and
// testdata/observe_retry_rows.txtar.)

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	yaml "go.yaml.in/yaml/v3"

	"github.com/converge-go/converge/reconciler"
)

// The rows render as tables for db/show: one cell per header column, times
// as ages, the next attempt as "in D" or "running".
func TestTableRowsReadAsTables(t *testing.T) {
	now := time.Now()
	info := &reconciler.Info{
		ID: "agent.routes/r", Module: "agent.routes", Name: "r", State: reconciler.StateDegraded,
		Objects: 3, Succeeded: 10, Failed: 2, Retrying: 1, InFlight: 1,
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
	assert.Regexp(t, `^1(\.\d+)?s ago$`, cell("OldestPending"))
	assert.Regexp(t, `^disk full \(2(\.\d+)?s ago\)$`, cell("LastError"))
	assert.Regexp(t, `^3(\.\d+)?s ago: prune: nope$`, cell("LastPrune"))
	assert.Equal(t, "", cell("LastRefresh"), "never refreshed: empty")

	empty := (&reconciler.Info{Module: "m", State: reconciler.StateRunning}).TableRow()
	assert.Equal(t, []string{"m", "", "running", "0", "0", "0", "0", "0", "", "", "", ""}, empty)

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

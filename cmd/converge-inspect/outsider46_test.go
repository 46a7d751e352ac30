package main

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/tables"
)

// converge-inspect --reconciler shows "only the reconciler with this ID"
// and, with --json, "the rows as the tables encode them": its failing
// objects, not those of another reconciler whose ID starts with its own
// ("test/x" and "test/x y", WithName taking any name), nor a reconciler
// "test/xy".
func TestOutsider46InspectPicksOneReconcilersRetries(t *testing.T) {
	db := statedb.New()
	tb, err := tables.New(db)
	require.NoError(t, err)
	now := time.Now()
	for _, id := range []string{"test/x", "test/x y", "test/xy"} {
		name := strings.TrimPrefix(id, "test/")
		tb.Write(&tables.Info{ID: id, Module: "test", Name: name, State: tables.StateDegraded, Objects: 1, Retrying: 1},
			[]tables.RetryInfo{{Reconciler: id, Key: "k-of-" + name, Attempts: 1, FirstFailed: now, NextAttempt: now.Add(time.Hour), LastError: "e"}})
	}
	srv := httptest.NewServer(db.HTTPHandler())
	t.Cleanup(srv.Close)
	t.Setenv("HTTP_PROXY", "")
	t.Setenv("http_proxy", "")
	code, stdout, stderr := runInspect(t, map[string]string{"CONVERGE_INSPECT_TOKEN": "outsider46-token-value"}, "--url", srv.URL, "--json", "--reconciler", "test/x")
	require.Equal(t, 1, code, "degraded; stderr: %s", stderr)
	var out struct {
		Reconcilers []tables.Info      `json:"reconcilers"`
		Retries     []tables.RetryInfo `json:"retries"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
	require.Len(t, out.Reconcilers, 1)
	assert.Equal(t, "test/x", out.Reconcilers[0].ID)
	var keys []string
	for _, r := range out.Retries {
		keys = append(keys, r.Reconciler+"|"+r.Key)
	}
	assert.Equal(t, []string{"test/x|k-of-x"}, keys)
}

// "--reconciler name: show only the reconciler with this ID ... fails if
// none has it"; "The token is never printed". A token that happens to occur
// in reconciler IDs (here "x") is redacted from the rows before the
// reconciler is picked, so the reconciler with the ID asked for is not found.
func TestOutsider46InspectTokenInIDs(t *testing.T) {
	db := statedb.New()
	tb, err := tables.New(db)
	require.NoError(t, err)
	tb.Write(&tables.Info{ID: "test/x", Module: "test", Name: "x", State: tables.StateRunning, Objects: 1}, nil)
	srv := httptest.NewServer(db.HTTPHandler())
	t.Cleanup(srv.Close)
	code, stdout, stderr := runInspect(t, map[string]string{"CONVERGE_INSPECT_TOKEN": "x"}, "--url", srv.URL, "--json", "--reconciler", "test/x")
	assert.Equal(t, 0, code, "stderr: %s", stderr)
	assert.NotContains(t, stdout, `"x"`, "the token is not printed")
}

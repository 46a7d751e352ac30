package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/tables"
)

// A reconciler whose setup step (reconciler.WithSetup) fails is shown
// setting-up with its error, and makes the exit status degraded; one
// setting up without a failure does not.
func TestSetupShown(t *testing.T) {
	tb := rowSet{infos: map[string]*tables.Info{}, retries: map[string]*tables.RetryInfo{}, seen: map[string]uint64{}}
	put := func(obj string) {
		t.Helper()
		require.NoError(t, tb.put(tables.ReconcilersTableName, row{Rev: 1, Obj: json.RawMessage(obj)}))
	}
	put(`{"id":"r","module":"r","state":"setting-up"}`)
	require.Equal(t, exitHealthy, tb.report("").exitStatus())

	put(`{"id":"r","module":"r","state":"setting-up","setup-attempts":3,"setup-error":"maps not readable"}`)
	rep := tb.report("")
	require.Equal(t, exitDegraded, rep.exitStatus())
	var b strings.Builder
	require.NoError(t, rep.writeText(&b, time.Now()))
	require.Contains(t, b.String(), "setting-up")
	require.Contains(t, b.String(), "r is setting up: its setup step failed 3 time(s), no operation starts until it succeeds: maps not readable")
}

package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/tables"
)

// A prune held by reconciler.WithPruneGuard shows in LAST PRUNE, with a
// line saying what releases it, and in --json.
func TestPruneHeldShown(t *testing.T) {
	now := sampleNow
	rep := report{Reconcilers: []*tables.Info{{ID: "lb", Module: "lb", State: tables.StateDegraded, Objects: 0, Workers: 1,
		LastPrune: now.Add(-time.Hour), PruneHeld: true, PruneHeldRemove: 120, PruneHeldOf: 120}}, Degraded: true}
	var b bytes.Buffer
	require.NoError(t, rep.writeText(&b, now))
	lines := strings.Split(b.String(), "\n")
	require.Regexp(t, `^lb +degraded +0 +0 +0 +1 +0 +- +1h0m ago, held: would remove 120 of 120$`, lines[1])
	require.Equal(t, "lb holds a prune that would remove 120 of the 120 entries of its target: Reconciler.ConfirmPrune runs it, the desired set growing back releases it", lines[2])
	require.NotContains(t, b.String(), "round limiter or start gate")

	data, err := json.Marshal(rep.Reconcilers[0])
	require.NoError(t, err)
	require.Contains(t, string(data), `"prune-held":true,"prune-held-remove":120,"prune-held-of":120`)
	var back tables.Info
	require.NoError(t, json.Unmarshal(data, &back))
	require.Equal(t, *rep.Reconcilers[0], back)
}

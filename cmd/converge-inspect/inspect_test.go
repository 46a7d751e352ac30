package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/tables"
)

// The tables as text and JSON, with the exit status saying whether a
// reconciler is degraded; then healthy again.
func TestShowsTables(t *testing.T) {
	a := startAgent(t, true, "routes")
	a.fail("routes", "b")
	a.insert("routes", "a", "b", "c")
	a.waitDegraded("routes", 1)

	code, stdout, stderr := runInspect(t, nil, a.args()...)
	require.Equal(t, exitDegraded, code, stderr)
	require.Empty(t, stderr)
	t.Logf("output:\n%s", stdout)
	require.Regexp(t, `(?m)^RECONCILER +STATE +OBJECTS +FAILING +IN FLIGHT +WORKERS +BUSY +OLDEST PENDING +LAST PRUNE$`, stdout)
	require.Regexp(t, `(?m)^routes +degraded +3 +1 +[01] +1 +[01] +\S+ +(-|\S+ ago)$`, stdout)
	require.Regexp(t, `(?m)^RECONCILER +FAILING OBJECT +ATTEMPTS +NEXT ATTEMPT +ERROR$`, stdout)
	require.Regexp(t, `(?m)^routes +b +[1-9]\d* +(in \S+|due|running) +.*injected`, stdout)
	require.NotContains(t, stdout, testToken)

	code, stdout, stderr = runInspect(t, nil, a.args("--json")...)
	require.Equal(t, exitDegraded, code, stderr)
	var rep struct {
		Reconcilers []tables.Info      `json:"reconcilers"`
		Retries     []tables.RetryInfo `json:"retries"`
		Degraded    bool               `json:"degraded"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	require.True(t, rep.Degraded)
	require.Len(t, rep.Reconcilers, 1)
	require.Equal(t, "routes", rep.Reconcilers[0].ID)
	require.Equal(t, tables.StateDegraded, rep.Reconcilers[0].State)
	require.Equal(t, 3, rep.Reconcilers[0].Objects)
	require.Len(t, rep.Retries, 1)
	require.Equal(t, "b", rep.Retries[0].Key)
	require.Positive(t, rep.Retries[0].Attempts)

	a.heal("routes", "b")
	a.waitRunning("routes", 3)
	code, stdout, stderr = runInspect(t, nil, a.args()...)
	require.Equal(t, exitHealthy, code, stderr)
	require.Regexp(t, `(?m)^routes +running +3 +0 +0 +1 +0 +- +(-|\S+ ago)$`, stdout)
	require.Regexp(t, `(?m)^No failing objects\.$`, stdout)
}

// A failed prune makes a reconciler degraded, with no failing object; the
// LAST PRUNE column says why.
func TestPruneFailure(t *testing.T) {
	a := startAgent(t, true, "routes")
	require.NoError(t, a.faults["routes"].Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Op: reconcilertest.OpPrune}))
	a.insert("routes", "a")
	a.recs["routes"].Prune()
	a.waitInfo("routes", "a failed prune", func(i *tables.Info) bool {
		return i.State == tables.StateDegraded && i.LastPruneError != "" && i.Retrying == 0
	})
	code, stdout, stderr := runInspect(t, nil, a.args()...)
	require.Equal(t, exitDegraded, code, stderr)
	require.Regexp(t, `(?m)^routes +degraded +1 +0 +0 +1 +0 +- +\S+ ago, failed: prune: injected fault: prune$`, stdout)
	require.Regexp(t, `(?m)^No failing objects\.$`, stdout)
	require.NotContains(t, stdout, "round limiter")
}

// --reconciler shows one reconciler and its failing objects, by ID or
// name; the exit status is about the ones shown.
func TestFilter(t *testing.T) {
	a := startAgent(t, true, "alpha", "beta")
	a.fail("alpha", "x")
	a.insert("alpha", "x")
	a.insert("beta", "y")
	a.waitDegraded("alpha", 1)
	a.waitRunning("beta", 1)

	code, stdout, stderr := runInspect(t, nil, a.args("--reconciler", "beta")...)
	require.Equal(t, exitHealthy, code, stderr)
	require.Regexp(t, `(?m)^beta +running`, stdout)
	require.NotContains(t, stdout, "alpha")

	code, stdout, stderr = runInspect(t, nil, a.args("--reconciler", "alpha")...)
	require.Equal(t, exitDegraded, code, stderr)
	require.Regexp(t, `(?m)^alpha +degraded`, stdout)
	require.Regexp(t, `(?m)^alpha +x `, stdout)
	require.NotContains(t, stdout, "beta")

	code, stdout, stderr = runInspect(t, nil, a.args()...)
	require.Equal(t, exitDegraded, code, stderr)
	require.Regexp(t, `(?m)^alpha +degraded`, stdout)
	require.Regexp(t, `(?m)^beta +running`, stdout)

	w := startWatch(t, a.args("--reconciler", "beta")...)
	_, before := w.waitLine(`^No failing objects\.$`)
	require.Regexp(t, `(?m)^beta +running +1 +0 +0 +1 +0 +- `, strings.Join(before, "\n"))
	require.NotContains(t, strings.Join(before, "\n"), "alpha")
	require.Equal(t, exitHealthy, w.stop())

	code, stdout, stderr = runInspect(t, nil, a.args("--reconciler", "gamma")...)
	require.Equal(t, exitError, code)
	require.Empty(t, stdout)
	require.Equal(t, "converge-inspect: no reconciler gamma; the agent has alpha, beta\n", stderr)
}

// --watch draws the tables, then again on each change, until its context
// ends; its exit status is the last state's.
func TestWatch(t *testing.T) {
	a := startAgent(t, true, "routes")
	a.insert("routes", "a")
	a.waitRunning("routes", 1)

	w := startWatch(t, a.args()...)
	w.waitLine(`^--- \d\d:\d\d:\d\d$`)
	w.waitLine(`^routes +running +1 +0 +0 +1 +0 +- `)
	w.waitLine(`^No failing objects\.$`)

	a.fail("routes", "b")
	a.insert("routes", "b")
	w.waitLine(`^routes +degraded +2 +1 `)
	w.waitLine(`^routes +b +\d+ +.*injected`)

	a.heal("routes", "b")
	_, before := w.waitLine(`^routes +running +2 +0 +0 +1 +0 +- `)
	require.NotEmpty(t, before)
	w.waitLine(`^No failing objects\.$`)
	require.Equal(t, exitHealthy, w.stop())
	require.Empty(t, w.stderr.String())

	// Stopped while degraded: exit status 1.
	a.fail("routes", "c")
	a.insert("routes", "c")
	a.waitDegraded("routes", 1)
	w = startWatch(t, a.args("--json")...)
	w.waitLine(`^\{"reconcilers":\[\{"id":"routes",.*"state":"degraded".*\],"retries":\[\{"reconciler":"routes","key":"c".*"degraded":true\}$`)
	require.Equal(t, exitDegraded, w.stop())
	require.Empty(t, w.stderr.String())
}

// A stream that the agent ends (it stopped) ends --watch with exit status
// 2 and says so.
func TestWatchAgentGone(t *testing.T) {
	a := startAgent(t, true, "routes")
	w := startWatch(t, a.args()...)
	w.waitLine(`^routes +running`)
	a.server.CloseClientConnections()
	select {
	case code := <-w.done:
		w.done <- code
		require.Equal(t, exitError, code)
	case <-time.After(waitFor):
		t.Fatal("--watch did not end when the agent closed its streams")
	}
	require.Regexp(t, `^converge-inspect: .*stream of changes of reconciler`, w.stderr.String())
}

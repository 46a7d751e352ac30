package main

// An outside reviewer's tests of converge-inspect against a real hive,
// StateDB, reconciler and tables.Cell.

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// deleteAll deletes every object of module's table.
func (a *agent) deleteAll(module string) {
	a.t.Helper()
	wtxn := a.db.WriteTxn(a.tables[module])
	require.NoError(a.t, a.tables[module].DeleteAll(wtxn))
	wtxn.Commit()
}

// Many changes written as fast as possible: the frames are at most four a
// second, so most are merged, but the last frame shows the final state.
func TestOutsiderWatchShowsFinalState(t *testing.T) {
	a := startAgent(t, true, "routes")
	w := startWatch(t, a.args()...)
	w.waitLine(`^routes +running +0 `)

	for i := range 300 {
		a.insert("routes", fmt.Sprintf("k%03d", i))
	}
	a.waitRunning("routes", 300)
	w.waitLine(`^routes +running +300 +0 +0 +1 +0 +- `)
	w.waitLine(`^No failing objects\.$`)

	// Twenty failing objects, then all healed at once.
	for i := range 20 {
		a.fail("routes", fmt.Sprintf("f%02d", i))
	}
	for i := range 20 {
		a.insert("routes", fmt.Sprintf("f%02d", i))
	}
	a.waitDegraded("routes", 20)
	w.waitLine(`^routes +degraded +320 +20 `)
	for i := range 20 {
		a.heal("routes", fmt.Sprintf("f%02d", i))
	}
	a.waitRunning("routes", 320)
	w.waitLine(`^routes +running +320 +0 +0 +1 +0 +- `)
	_, before := w.waitLine(`^No failing objects\.$`)
	require.NotContains(t, strings.Join(before, "\n"), "injected")
	require.Equal(t, exitHealthy, w.stop())
}

// Failing objects that are deleted leave the retries table; --watch drops
// their rows.
func TestOutsiderWatchDeletedFailures(t *testing.T) {
	a := startAgent(t, true, "routes")
	for i := range 15 {
		a.fail("routes", fmt.Sprintf("x%02d", i))
	}
	w := startWatch(t, a.args()...)
	w.waitLine(`^routes +running +0 `)
	ids := make([]string, 15)
	for i := range ids {
		ids[i] = fmt.Sprintf("x%02d", i)
	}
	a.insert("routes", ids...)
	a.waitDegraded("routes", 15)
	w.waitLine(`^routes +\.\.\. +and 5 more`)
	a.deleteAll("routes")
	// Deletes of failing objects are Deletes to apply; they fail too
	// (the fault is per key), so heal first.
	for _, id := range ids {
		a.heal("routes", id)
	}
	a.waitRunning("routes", 0)
	n, _, _ := a.retries.Get(a.db.ReadTxn(), tables.RetryByReconciler.Query("routes"))
	require.Nil(t, n, "the retries table is empty")
	w.waitLine(`^routes +running +0 +0 +0 +1 +0 +- `)
	w.waitLine(`^No failing objects\.$`)
	require.Equal(t, exitHealthy, w.stop())
}

// A paused reconciler, even with failing objects, exits 0 and shows
// paused; --json says degraded false.
func TestOutsiderPaused(t *testing.T) {
	a := startAgent(t, true, "routes")
	a.fail("routes", "b")
	a.insert("routes", "a", "b")
	a.waitDegraded("routes", 1)
	a.recs["routes"].Pause()
	a.waitInfo("routes", "paused", func(i *tables.Info) bool { return i.State == tables.StatePaused })
	code, stdout, stderr := runInspect(t, nil, a.args()...)
	t.Logf("\n%s", stdout)
	require.Equal(t, exitHealthy, code, stderr)
	require.Regexp(t, `(?m)^routes +paused +2 +1 `, stdout)
	code, stdout, stderr = runInspect(t, nil, a.args("--json")...)
	require.Equal(t, exitHealthy, code, stderr)
	var rep struct{ Degraded *bool }
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	require.NotNil(t, rep.Degraded)
	require.False(t, *rep.Degraded)
	a.recs["routes"].Resume()
}

// --json is for scripts: the arrays are arrays even when empty, the
// filter applies to the retries too, and each row decodes back to what
// the table holds.
func TestOutsiderJSON(t *testing.T) {
	a := startAgent(t, true, "alpha", "beta")
	a.fail("alpha", "x")
	a.insert("alpha", "x")
	a.insert("beta", "y")
	a.waitDegraded("alpha", 1)
	a.waitRunning("beta", 1)

	code, stdout, stderr := runInspect(t, nil, a.args("--json", "--reconciler", "beta")...)
	require.Equal(t, exitHealthy, code, stderr)
	var raw map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(stdout), &raw), stdout)
	require.Len(t, raw, 3, stdout)
	require.Equal(t, "false", string(raw["degraded"]))
	require.JSONEq(t, "[]", string(raw["retries"]), "no failing objects of beta: an empty array, not alpha's")

	before := a.db.ReadTxn()
	code, stdout, stderr = runInspect(t, nil, a.args("--json")...)
	require.Equal(t, exitDegraded, code, stderr)
	var rep struct {
		Reconcilers []*tables.Info      `json:"reconcilers"`
		Retries     []*tables.RetryInfo `json:"retries"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	txn := a.db.ReadTxn()
	for _, got := range rep.Reconcilers {
		want, _, ok := a.infos.Get(txn, tables.InfoByID.Query(got.ID))
		require.True(t, ok)
		// Retries go on meanwhile: compare what does not change.
		require.Equal(t, want.Module, got.Module)
		require.Equal(t, want.State, got.State)
		require.Equal(t, want.Objects, got.Objects)
		require.Equal(t, want.Workers, got.Workers)
		// The first prune may land while inspect runs: as it was before
		// or after, not something else.
		was, _, _ := a.infos.Get(before, tables.InfoByID.Query(got.ID))
		require.Contains(t, []int64{was.LastPrune.UnixNano(), want.LastPrune.UnixNano()}, got.LastPrune.UnixNano())
	}
	require.Len(t, rep.Retries, 1)

	// An agent with the tables and no reconciler.
	b := startAgent(t, true)
	code, stdout, stderr = runInspect(t, nil, b.args("--json")...)
	require.Equal(t, exitHealthy, code, stderr)
	require.JSONEq(t, `{"reconcilers":[],"retries":[],"degraded":false}`, stdout)
}

// The example serves the handler "under /statedb/": a --url with the
// trailing slash, as a user copies it, works as well.
func TestOutsiderURLWithTrailingSlash(t *testing.T) {
	a := startAgent(t, true, "routes")
	a.insert("routes", "a")
	a.waitRunning("routes", 1)
	code, stdout, stderr := runInspect(t, nil, "--url", a.url+"/", "--token-file", a.tokenFile())
	require.Equal(t, exitHealthy, code, stderr)
	require.Regexp(t, `(?m)^routes +running +1 `, stdout)
	w := startWatch(t, "--url", a.url+"/", "--token-file", a.tokenFile())
	w.waitLine(`^routes +running +1 `)
	require.Equal(t, exitHealthy, w.stop())
}

// A stopped hive: the row says stopped and the exit status is 0; --watch
// sees the change to stopped.
func TestOutsiderStoppedHive(t *testing.T) {
	p := startPool(t, 2, false)
	p.insert("pool", "a")
	p.waitInfo("pool", "done", func(i *tables.Info) bool { return i.Succeeded == 1 })
	w := startWatch(t, p.args()...)
	w.waitLine(`^pool +running +1 `)
	p.stop()
	w.waitLine(`^pool +stopped +1 +0 +0 +2 +0 `)
	require.Equal(t, exitHealthy, w.stop())
	code, stdout, stderr := runInspect(t, nil, p.args()...)
	require.Equal(t, exitHealthy, code, stderr)
	require.Regexp(t, `(?m)^pool +stopped +1 +0 +0 +2 +0 `, stdout)
}

// Keys that are not printable are shown in hex by the table; a key with
// a newline must not break the one-line-per-object layout.
func TestOutsiderOddKeys(t *testing.T) {
	a := startAgent(t, true, "routes")
	keys := []string{"line\nbreak", "tab\there", "bidi\u202eevil", "é中文", strings.Repeat("k", 300)}
	for _, k := range keys {
		a.fail("routes", k)
	}
	wtxn := a.db.WriteTxn(a.tables["routes"])
	for _, k := range keys {
		_, _, err := a.tables["routes"].Insert(wtxn, &item{ID: k, Status: status.Pending()})
		require.NoError(t, err)
	}
	wtxn.Commit()
	a.waitDegraded("routes", len(keys))
	code, stdout, stderr := runInspect(t, nil, a.args()...)
	t.Logf("\n%s", stdout)
	require.Equal(t, exitDegraded, code, stderr)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	// header, row, blank, header, one line per failing object
	require.Len(t, lines, 4+len(keys), stdout)
	require.NotContains(t, stdout, "\u202e")
	_ = statedb.Revision(0)
}

// --watch --json: every line is one whole report; the last one shows the
// final state, and the exit status is the last line's.
func TestOutsiderWatchJSONLines(t *testing.T) {
	a := startAgent(t, true, "routes")
	w := startWatch(t, a.args("--json")...)
	w.waitLine(`^\{"reconcilers":\[\{"id":"routes"`)
	a.fail("routes", "z")
	for i := range 50 {
		a.insert("routes", fmt.Sprintf("k%02d", i))
	}
	a.insert("routes", "z")
	a.waitDegraded("routes", 1)
	for {
		line, _ := w.waitLine(`^\{`)
		var rep struct {
			Reconcilers []*tables.Info      `json:"reconcilers"`
			Retries     []*tables.RetryInfo `json:"retries"`
			Degraded    bool                `json:"degraded"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &rep), line)
		require.Len(t, rep.Reconcilers, 1)
		if rep.Reconcilers[0].Objects == 51 && rep.Degraded && len(rep.Retries) == 1 {
			break
		}
	}
	require.Equal(t, exitDegraded, w.stop())
}

// --watch --reconciler NAME that matches nothing: the same error as
// without --watch (exit 2, saying which reconcilers there are), or at
// least not a silent success.
//
// converge-inspect chose the same error: --watch fails at the start,
// printing no frame, so the test waits for it to end rather than for a
// first line, and checks that its error is the one without --watch.
func TestOutsiderWatchFilterMatchesNothing(t *testing.T) {
	a := startAgent(t, true, "routes")
	a.waitInfo("routes", "a row", func(*tables.Info) bool { return true })
	code, stdout, stderr := runInspect(t, nil, a.args("--reconciler", "gamma")...)
	require.Equal(t, exitError, code, stderr)
	require.Empty(t, stdout)
	w := startWatch(t, a.args("--reconciler", "gamma")...)
	select {
	case code = <-w.done:
		w.done <- code // for stop, at cleanup
	case <-time.After(waitFor):
		t.Fatalf("--watch of a reconciler the agent does not have did not end in %s", waitFor)
	}
	t.Logf("exit %d stderr %q", code, w.stderr.String())
	require.NotEqual(t, exitHealthy, code, "--watch of a reconciler the agent does not have exits 0")
	require.Equal(t, exitError, code)
	require.Equal(t, stderr, w.stderr.String(), "the same error as without --watch")
	select {
	case line, ok := <-w.lines:
		require.False(t, ok, "no frame, but %q", line)
	case <-time.After(waitFor):
		t.Fatalf("the output did not end in %s", waitFor)
	}
}

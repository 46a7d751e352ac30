package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// What converge offers beyond the StateDB reconciler, as the example shows
// it (issue 13, "Beyond the fixes").

// /metrics serves converge's Prometheus adapter, with the example's module
// label; /debug/vars serves the same figures as converge's expvar metrics,
// beside Go's own variables.
func TestMetrics(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	const (
		updates = `converge_reconcile_total{module="files",name="",operation="update",result="success"}`
		prunes  = `converge_prune_total{module="files",name=""}`
		depth   = `converge_workqueue_depth{module="files",name=""}`
	)
	before := a.scrape("converge_")
	require.GreaterOrEqual(t, before[updates], float64(len(initialNames)))
	require.Contains(t, before, depth)

	a.put("counted", "x")
	a.waitKind("counted", status.KindDone)
	a.prune()
	after := a.scrape("converge_")
	require.Greater(t, after[updates], before[updates])
	require.Greater(t, after[prunes], before[prunes])

	// /debug/vars has Go's variables and the reconciler's, histograms
	// included, keyed by the reconciler's module.
	code, body := a.do(http.MethodGet, "/debug/vars", nil)
	require.Equal(t, http.StatusOK, code)
	var vars map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(body), &vars))
	require.Contains(t, vars, "memstats")
	for _, name := range []string{"reconciliation_operations", "reconciliation_duration_histogram", "queue_wait_histogram", "prune_count"} {
		require.Contains(t, vars, name)
		assert.Contains(t, string(vars[name]), `"files`, "%s has no figures of the files reconciler", name)
	}
}

// The reconcilers and reconciler-retries tables of tables.Cell
// are served by the API and by StateDB's handler.
func TestReconcilersAndRetriesTables(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	a.waitInfo("the initial files", func(i *tables.Info) bool { return i.Succeeded >= uint64(len(initialNames)) })

	var infos []tables.Info
	code, body := a.do(http.MethodGet, "/reconcilers", nil)
	require.Equal(t, http.StatusOK, code, body)
	require.NoError(t, json.Unmarshal([]byte(body), &infos), body)
	require.Len(t, infos, 1)
	require.Equal(t, "files", infos[0].ID)
	require.Equal(t, tables.StateRunning, infos[0].State)
	require.Equal(t, len(initialNames), infos[0].Objects)

	code, body = a.do(http.MethodGet, "/retries", nil)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, "[]", body)

	// A file that cannot be written: a directory has its name.
	require.NoError(t, os.MkdirAll(filepath.Join(a.dir, "blocked", "inner"), 0o755))
	a.put("blocked", "x")
	a.waitKind("blocked", status.KindError)
	a.waitInfo("a failing file", func(i *tables.Info) bool { return i.Retrying == 1 })
	retries := a.waitRetries(1)
	require.Equal(t, "files", retries[0].Reconciler)
	require.Equal(t, "blocked", retries[0].Key)
	require.Positive(t, retries[0].Attempts)
	require.Contains(t, retries[0].LastError, "write blocked")

	code, body = a.do(http.MethodGet, "/retries", nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `"key": "blocked"`)
	code, body = a.do(http.MethodGet, "/statedb/dump/reconciler-retries", nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `"blocked"`)
	code, body = a.do(http.MethodGet, "/statedb/dump/reconcilers", nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `"degraded"`)

	require.NoError(t, os.RemoveAll(filepath.Join(a.dir, "blocked")))
	a.waitKind("blocked", status.KindDone)
	a.waitRetries(0)
	a.waitInfo("no failing file", func(i *tables.Info) bool { return i.State == tables.StateRunning && i.Retrying == 0 })
}

// waitRetries waits until the retries table holds n rows, and returns them.
func (a *testApp) waitRetries(n int) []*tables.RetryInfo {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for {
		seq, watch := a.retries.AllWatch(a.db.ReadTxn())
		rows := collectAll(seq)
		if len(rows) == n {
			return rows
		}
		select {
		case <-watch:
		case <-ctx.Done():
			a.t.Fatalf("timed out waiting for %d retries; have %+v", n, rows)
		}
	}
}

// Changing a template rewrites exactly the files that use it, through the
// reconciler's dependency on the templates table; it is not drift. A file
// whose template is missing fails until the template is defined.
func TestTemplateChangeRewritesItsFiles(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.put("plain", "no template")
	code, body := a.do(http.MethodPut, "/files/note?template=later", strings.NewReader("a note"))
	require.Equal(t, http.StatusCreated, code, body)
	f := a.waitKind("note", status.KindError)
	require.Contains(t, f.Status.Error, `template is not defined: "later"`)
	a.waitKind("plain", status.KindDone)
	a.waitReconciled()
	require.Equal(t, "# hello.txt: written by the converge example; edits are undone.\nHello from converge!\n"+
		"This file is reconciled from a StateDB table into this directory.\n", a.readFile("hello.txt"))

	stat := func(name string) os.FileInfo {
		info, err := os.Stat(filepath.Join(a.dir, name))
		require.NoError(t, err)
		return info
	}
	before := map[string]os.FileInfo{}
	for _, name := range []string{"hello.txt", "motd", "secret.conf", "plain"} {
		before[name] = stat(name)
	}
	drift, _ := a.info()

	// Change banner: hello.txt and motd use it.
	changed := time.Now()
	code, body = a.do(http.MethodPut, "/templates/banner", strings.NewReader("<{{name}}> {{content}}"))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"files": [
    "hello.txt",
    "motd"
  ]`)
	for _, name := range []string{"hello.txt", "motd"} {
		f := a.waitFile(name, "rewritten", func(f *File, found bool) bool {
			return found && f.Status.Kind == status.KindDone && f.Status.UpdatedAt.After(changed)
		})
		require.Equal(t, "banner", f.Template)
		require.Equal(t, "<"+name+"> "+f.Content, a.readFile(name))
		require.False(t, os.SameFile(before[name], stat(name)), name)
	}
	for _, name := range []string{"secret.conf", "plain"} {
		require.True(t, os.SameFile(before[name], stat(name)), "%s does not use the template and must not be rewritten", name)
	}
	info, _ := a.info()
	require.Equal(t, drift.DriftRepaired, info.DriftRepaired, "a template change is not drift")

	// Defining the missing template writes the file that waited for it.
	code, body = a.do(http.MethodPut, "/templates/later", strings.NewReader("later: {{content}}"))
	require.Equal(t, http.StatusCreated, code, body)
	a.waitKind("note", status.KindDone)
	require.Equal(t, "later: a note", a.readFile("note"))

	// Deleting a template fails its files and leaves them on disk as they
	// were; the rules of ownership still hold for templated files.
	code, body = a.do(http.MethodDelete, "/templates/later", nil)
	require.Equal(t, http.StatusNoContent, code, body)
	require.Contains(t, a.waitKind("note", status.KindError).Status.Error, "not defined")
	require.Equal(t, "later: a note", a.readFile("note"))
	require.NoError(t, os.WriteFile(filepath.Join(a.dir, "theirs"), []byte("mine"), 0o644))
	code, body = a.do(http.MethodPut, "/files/theirs?template=banner", strings.NewReader("x"))
	require.Equal(t, http.StatusCreated, code, body)
	require.Contains(t, a.waitKind("theirs", status.KindError).Status.Error, "the example did not write it")
	require.Equal(t, "mine", a.readFile("theirs"))

	var list []templateAnswer
	code, body = a.do(http.MethodGet, "/templates", nil)
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal([]byte(body), &list), body)
	require.Len(t, list, 1)
	require.Equal(t, "banner", list[0].Name)
	require.Equal(t, []string{"hello.txt", "motd", "theirs"}, list[0].Files)
	for _, c := range []struct{ method, path string }{
		{"PUT", "/templates/a%2Fb"}, {"PUT", "/templates/a%0Ab"}, {"PUT", "/files/x?template=a%2Fb"},
	} {
		code, body = a.do(c.method, c.path, strings.NewReader("x"))
		require.Equal(t, http.StatusBadRequest, code, "%s %s: %s", c.method, c.path, body)
		require.Contains(t, body, "invalid template name")
	}
	code, _ = a.do(http.MethodGet, "/templates/nope", nil)
	require.Equal(t, http.StatusNotFound, code)
}

// POST /pause holds writes back, health says Paused; POST /resume applies
// what changed meanwhile.
func TestPauseAndResume(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()

	code, body := a.do(http.MethodPost, "/pause", nil)
	require.Equal(t, http.StatusOK, code, body)
	a.waitInfo("paused", func(i *tables.Info) bool { return i.State == tables.StatePaused })
	a.waitHealthMessage("Paused", true)
	_, body = a.do(http.MethodGet, "/reconcilers", nil)
	require.Contains(t, body, `"state": "paused"`)

	a.put("held", "back")
	code, body = a.do(http.MethodPut, "/templates/banner", strings.NewReader("paused {{name}}"))
	require.Equal(t, http.StatusOK, code, body)
	a.waitFile("motd", "marked by the dependency", func(f *File, found bool) bool {
		return found && f.Status.Kind == status.KindRefreshing
	})
	rev := a.files.Revision(a.db.ReadTxn())
	// No progress while paused: the bound is the assertion, not a wait
	// for something to happen.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, _, err := a.rec.WaitUntilReconciled(ctx, rev)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "no progress while paused")
	requireAbsent(t, filepath.Join(a.dir, "held"))
	require.NotContains(t, a.readFile("motd"), "paused")
	require.Equal(t, status.KindPending, a.waitKind("held", status.KindPending).Status.Kind)

	code, body = a.do(http.MethodPost, "/resume", nil)
	require.Equal(t, http.StatusOK, code, body)
	a.waitKind("held", status.KindDone)
	a.waitReconciled()
	require.Equal(t, "back", a.readFile("held"))
	require.Equal(t, "paused motd", a.readFile("motd"))
	a.waitInfo("running", func(i *tables.Info) bool { return i.State == tables.StateRunning })
	a.waitHealthMessage("Paused", false)
}

// waitHealthMessage polls /health until it is OK and some scope reports
// msg, or, if !present, none does.
func (a *testApp) waitHealthMessage(msg string, present bool) {
	a.t.Helper()
	var last healthResponse
	require.Eventually(a.t, func() bool {
		_, last = a.health()
		found := false
		for _, s := range last.Scopes {
			found = found || s.Message == msg
		}
		return last.Level == cell.StatusOK && found == present
	}, waitFor, 10*time.Millisecond, "health: %q present=%v never held; last %+v", msg, present, last)
}

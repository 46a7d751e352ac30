package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

var initialNames = []string{"hello.txt", "motd", "secret.conf"}

func TestInitialFilesAndCRUD(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	require.Equal(t, initialNames, a.dirNames())
	require.Contains(t, a.readFile("hello.txt"), "Hello from converge!")
	info, err := os.Stat(filepath.Join(a.dir, "secret.conf"))
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o600), info.Mode().Perm())

	// Create.
	require.Equal(t, http.StatusCreated, a.put("greeting", "hi there"))
	a.waitKind("greeting", status.KindDone)
	require.Equal(t, "hi there", a.readFile("greeting"))

	// Replace, with a mode.
	code, body := a.do(http.MethodPut, "/files/greeting?mode=0600", strings.NewReader("hello again"))
	require.Equal(t, http.StatusOK, code, body)
	a.waitFile("greeting", "new content Done", func(f *File, found bool) bool {
		return found && f.Content == "hello again" && f.Status.Kind == status.KindDone
	})
	require.Equal(t, "hello again", a.readFile("greeting"))
	info, err = os.Stat(filepath.Join(a.dir, "greeting"))
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o600), info.Mode().Perm())

	// Read one, and list all with statuses.
	code, body = a.do(http.MethodGet, "/files/greeting", nil)
	require.Equal(t, http.StatusOK, code, body)
	var one File
	require.NoError(t, json.Unmarshal([]byte(body), &one))
	require.Equal(t, "hello again", one.Content)
	require.Equal(t, Mode(0o600), one.Mode)
	require.Equal(t, status.KindDone, one.Status.Kind)

	code, body = a.do(http.MethodGet, "/files", nil)
	require.Equal(t, http.StatusOK, code, body)
	var all []File
	require.NoError(t, json.Unmarshal([]byte(body), &all))
	var names []string
	for _, f := range all {
		names = append(names, f.Name)
		require.Equal(t, status.KindDone, f.Status.Kind, f.Name)
	}
	require.Equal(t, []string{"greeting", "hello.txt", "motd", "secret.conf"}, names)

	// Delete.
	code, body = a.do(http.MethodDelete, "/files/greeting", nil)
	require.Equal(t, http.StatusNoContent, code, body)
	a.waitReconciled() // a delete leaves no status: wait for the disk
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(a.dir, "greeting"))
		return os.IsNotExist(err)
	}, waitFor, 5*time.Millisecond)
	require.Equal(t, initialNames, a.dirNames())

	code, _ = a.do(http.MethodDelete, "/files/greeting", nil)
	require.Equal(t, http.StatusNotFound, code)
	code, _ = a.do(http.MethodGet, "/files/greeting", nil)
	require.Equal(t, http.StatusNotFound, code)

	// Deleting a file that someone already removed is not an error.
	require.Equal(t, http.StatusCreated, a.put("gone", "x"))
	a.waitKind("gone", status.KindDone)
	require.NoError(t, os.Remove(filepath.Join(a.dir, "gone")))
	code, _ = a.do(http.MethodDelete, "/files/gone", nil)
	require.Equal(t, http.StatusNoContent, code)
	code, h := a.health()
	require.Equal(t, http.StatusOK, code, h)
}

// The table is marked initialized only once the initial files are in it, so
// the first prune sees them and cannot delete them.
func TestInitializedAfterLoad(t *testing.T) {
	var counts []int
	var wg sync.WaitGroup
	cfg := testConfig()
	cfg.Dir = filepath.Join(t.TempDir(), "target")
	cfg.Addr = "127.0.0.1:0"
	app := newTestApp(cfg, cell.Invoke(func(db *statedb.DB, files filesTable) {
		initialized, watch := files.Initialized(db.ReadTxn())
		require.False(t, initialized)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-watch
			counts = append(counts, files.NumObjects(db.ReadTxn()))
		}()
	}))
	log := hivetest.Logger(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, app.Start(log, ctx))
	wg.Wait()
	require.NoError(t, app.Stop(log, ctx))
	require.Equal(t, []int{len(initialNames)}, counts)
}

// Prune removes the files the example wrote that are no longer desired,
// here after a restart with a smaller desired set, and leftovers of
// interrupted writes; files it did not write stay.
func TestPruneOnlyOwnedFiles(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	a.put("extra", "only in the first run")
	a.waitKind("extra", status.KindDone)
	a.stop()

	// Between the runs: a file of the user's, a name like a temporary file
	// of the example's next to it, a real leftover temporary file, and a
	// file of the user's in the state directory whose name starts like
	// one, which is not removed.
	write := func(name, content string) {
		require.NoError(t, os.WriteFile(filepath.Join(a.dir, name), []byte(content), 0o644))
	}
	write("users-file", "mine")
	write(tmpPrefix+"0123", "mine too")
	write(stateDir+"/"+tmpPrefix+"0123456789abcdef", "leftover")
	write(stateDir+"/"+tmpPrefix+"notes", "the user's")

	// The directory holds the journal: no --adopt needed.
	cfg := testConfig()
	cfg.Dir = a.dir
	b := startApp(t, cfg, nil)
	// The first prune, once the initial files are loaded, removes extra and
	// reports it as drift repaired.
	info := b.waitPruneAfter(time.Time{})
	require.Empty(t, info.LastPruneError)
	require.Equal(t, uint64(1), info.DriftRepaired)
	b.waitReconciled()
	require.Equal(t, []string{"hello.txt", "motd", "secret.conf", tmpPrefix + "0123", "users-file"}, b.dirNames())
	require.Equal(t, "mine", b.readFile("users-file"))
	require.Equal(t, []string{"journal.log", "lock", "shell.sock", tmpPrefix + "notes", "token"}, dirNames(t, filepath.Join(b.dir, stateDir)))
	require.ElementsMatch(t, initialNames, journalNames(t, b.dir))

	// Later files of the user's and a subdirectory stay through prunes.
	write("stray-after", "x")
	require.NoError(t, os.Mkdir(filepath.Join(b.dir, "subdir"), 0o755))
	b.prune()
	require.Equal(t, []string{"hello.txt", "motd", "secret.conf", "stray-after", "subdir", tmpPrefix + "0123", "users-file"}, b.dirNames())
}

func TestPruneInterval(t *testing.T) {
	cfg := testConfig()
	cfg.PruneInterval = 20 * time.Millisecond
	a := startApp(t, cfg, nil)
	a.waitReconciled()
	first := a.waitPruneAfter(time.Time{})
	a.waitPruneAfter(first.LastPrune)
	require.Equal(t, initialNames, a.dirNames())
}

func TestRefreshRepairsOnlyDrift(t *testing.T) {
	cfg := testConfig()
	cfg.RefreshInterval = 50 * time.Millisecond
	a := startApp(t, cfg, nil)
	a.waitReconciled()
	path := func(name string) string { return filepath.Join(a.dir, name) }
	want := map[string]string{}
	for _, name := range initialNames {
		want[name] = a.readFile(name)
	}
	// Drift: content changed in place, mode changed, file removed.
	require.NoError(t, os.WriteFile(path("motd"), []byte("edited behind its back\n"), 0o644))
	require.NoError(t, os.Chmod(path("secret.conf"), 0o644))
	motdBefore, err := os.Stat(path("motd"))
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		data, err := os.ReadFile(path("motd"))
		return err == nil && string(data) == want["motd"]
	}, waitFor, 5*time.Millisecond)
	require.Eventually(t, func() bool {
		info, err := os.Stat(path("secret.conf"))
		return err == nil && info.Mode().Perm() == 0o600
	}, waitFor, 5*time.Millisecond)
	motdAfter, err := os.Stat(path("motd"))
	require.NoError(t, err)
	require.False(t, os.SameFile(motdBefore, motdAfter), "a drifted file is rewritten (renamed into place)")

	require.NoError(t, os.Remove(path("hello.txt")))
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(path("hello.txt"))
		return err == nil && string(data) == want["hello.txt"]
	}, waitFor, 5*time.Millisecond)

	// A file that did not drift is refreshed but not rewritten.
	require.Equal(t, http.StatusCreated, a.put("steady", "same"))
	last := a.waitKind("steady", status.KindDone).Status.UpdatedAt
	steadyBefore, err := os.Stat(path("steady"))
	require.NoError(t, err)
	// Wait for two refreshes of it to complete.
	for range 2 {
		f := a.waitFile("steady", "a refresh", func(f *File, found bool) bool {
			return found && f.Status.Kind == status.KindDone && f.Status.UpdatedAt.After(last)
		})
		last = f.Status.UpdatedAt
	}
	steadyAfter, err := os.Stat(path("steady"))
	require.NoError(t, err)
	require.True(t, os.SameFile(steadyBefore, steadyAfter), "an unchanged file must not be rewritten")
	require.Equal(t, steadyBefore.ModTime(), steadyAfter.ModTime())

	// Each repair was reported with reconciler.ReportRepaired: at least
	// one for motd, secret.conf and hello.txt each.
	a.waitInfo("3 repairs", func(i *tables.Info) bool { return i.DriftRepaired >= 3 })
	require.GreaterOrEqual(t, a.scrape("converge_drift_repaired_total")[`converge_drift_repaired_total{module="files",name="",operation="refresh"}`], 3.0)
}

func TestFaultAndRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for retries")
	}
	cfg := testConfig()
	// No pruning: a prune that fails while the directory is broken keeps
	// health Degraded until the next prune, which this test does not wait for.
	cfg.PruneInterval = 0
	a := startApp(t, cfg, nil)
	a.waitReconciled()
	a.waitHealth(cell.StatusOK)

	t.Run("directory replaced by a file", func(t *testing.T) {
		a.breakDir()

		require.Equal(t, http.StatusCreated, a.put("new.txt", "fresh"))
		f := a.waitKind("new.txt", status.KindError)
		require.Contains(t, f.Status.Error, "not a directory")

		h := a.waitHealth(cell.StatusDegraded)
		require.Contains(t, degradedErrors(h), "not a directory")
		code, _ := a.health()
		require.Equal(t, http.StatusServiceUnavailable, code)

		// The listing shows the error too.
		_, body := a.do(http.MethodGet, "/files/new.txt", nil)
		require.Contains(t, body, `"kind": "Error"`)

		// Repair: the retry recreates the directory and writes the file.
		require.NoError(t, os.Remove(a.dir))
		a.waitKind("new.txt", status.KindDone)
		a.waitNewToken() // the directory claimed anew has a new token
		require.Equal(t, "fresh", a.readFile("new.txt"))
		a.waitHealth(cell.StatusOK)
		code, _ = a.health()
		require.Equal(t, http.StatusOK, code)
	})

	t.Run("directory in the way of a file", func(t *testing.T) {
		blocker := filepath.Join(a.dir, "blocked")
		require.NoError(t, os.MkdirAll(filepath.Join(blocker, "inner"), 0o755))
		require.Equal(t, http.StatusCreated, a.put("blocked", "content"))
		f := a.waitKind("blocked", status.KindError)
		require.Contains(t, f.Status.Error, "write blocked")
		h := a.waitHealth(cell.StatusDegraded)
		require.Contains(t, degradedErrors(h), "write blocked")

		require.NoError(t, os.RemoveAll(blocker))
		a.waitKind("blocked", status.KindDone)
		require.Equal(t, "content", a.readFile("blocked"))
		a.waitHealth(cell.StatusOK)
	})
}

func TestPruneFailureRecovers(t *testing.T) {
	cfg := testConfig()
	cfg.PruneInterval = 20 * time.Millisecond
	a := startApp(t, cfg, nil)
	a.waitReconciled()
	a.waitHealth(cell.StatusOK)

	a.breakDir()
	h := a.waitHealth(cell.StatusDegraded)
	require.Contains(t, degradedErrors(h), "prune failed")

	require.NoError(t, os.Remove(a.dir))
	a.waitNewToken() // the directory claimed anew has a new token
	a.waitHealth(cell.StatusOK)
}

func TestStateDBHandler(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	code, body := a.do(http.MethodGet, "/statedb/dump/files", nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "hello.txt")

	// A streaming request ends when the app stops.
	req, err := http.NewRequest(http.MethodGet, a.base+"/statedb/changes/files", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := a.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	line := make([]byte, 1)
	_, err = resp.Body.Read(line)
	require.NoError(t, err)
	a.stop()
	_, err = io.Copy(io.Discard, resp.Body)
	_ = err // the stream ends, cleanly or not
}

func TestBadRequests(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	big := bytes.Repeat([]byte("x"), maxContentLen+1)
	cases := []struct {
		method, path string
		body         io.Reader
		code         int
		msg          string
	}{
		{"PUT", "/files/../x", nil, 400, `"../x"`},
		{"PUT", "/files/..%2Fx", nil, 400, `must not contain "/"`},
		{"PUT", "/files/..%2F..%2Fescaped", nil, 400, `must not contain "/"`},
		{"PUT", "/files/%2Fetc%2Fpasswd", nil, 400, `"/etc/passwd"`},
		{"PUT", "/files//etc/passwd", nil, 400, `"/etc/passwd"`},
		{"PUT", "/files/a%5Cb", nil, 400, `must not contain`},
		{"PUT", `/files/..\x`, nil, 400, `must not contain`},
		{"PUT", "/files/sub/file", nil, 400, `must not contain "/"`},
		{"PUT", "/files/.", nil, 400, "directory itself or its parent"},
		{"PUT", "/files/..", nil, 400, "directory itself or its parent"},
		{"PUT", "/files/", nil, 400, "empty"},
		{"DELETE", "/files/..", nil, 400, "directory itself"},
		{"DELETE", "/files/%2Fetc%2Fpasswd", nil, 400, `"/etc/passwd"`},
		{"GET", "/files/..%2F..%2Fetc%2Fpasswd", nil, 400, `must not contain`},
		{"PUT", "/files/a%00b", nil, 400, "control characters"},
		{"PUT", "/files/" + stateDir, nil, 400, "reserved"},
		{"PUT", "/files/" + strings.Repeat("n", maxNameLen+1), nil, 400, "longer than"},
		{"PUT", "/files/big", bytes.NewReader(big), 413, "larger than"},
		{"PUT", "/files/big", io.MultiReader(bytes.NewReader(big)), 413, "larger than"}, // chunked, no length
		{"PUT", "/files/moded?mode=999", strings.NewReader("x"), 400, "invalid mode"},
		{"PUT", "/files/moded?mode=01777", strings.NewReader("x"), 400, "invalid mode"},
		{"PUT", "/files/moded?mode=rw", strings.NewReader("x"), 400, "invalid mode"},
		{"POST", "/files/x", strings.NewReader("x"), 405, "not allowed"},
		{"DELETE", "/files/never-existed", nil, 404, "no desired file"},
	}
	for _, c := range cases {
		code, body := a.do(c.method, c.path, c.body)
		assert.Equal(t, c.code, code, "%s %s: %s", c.method, c.path, body)
		assert.Contains(t, errorMessage(t, body), c.msg, "%s %s", c.method, c.path)
	}

	// Exactly at the limit is fine.
	require.Equal(t, http.StatusCreated, a.put("max", string(big[:maxContentLen])))
	a.waitKind("max", status.KindDone)

	// Nothing was written outside the directory, nor any bad name inside.
	a.waitReconciled()
	parentEntries, err := os.ReadDir(a.parent)
	require.NoError(t, err)
	require.Len(t, parentEntries, 1)
	require.Equal(t, "target", parentEntries[0].Name())
	require.Equal(t, []string{"hello.txt", "max", "motd", "secret.conf"}, a.dirNames())
	require.Equal(t, 4, a.files.NumObjects(a.db.ReadTxn()))
}

func TestBadInitialFiles(t *testing.T) {
	cases := map[string]struct{ yaml, msg string }{
		"syntax":      {"files:\n  - name: a\n   content: x\n", "invalid YAML"},
		"not a list":  {"files: hello\n", "line 1: files must be a list"},
		"unknown key": {"files:\n  - name: a\n    contents: x\n", "line 3, column 5: unknown key in files[0] (its text is not shown); it takes name, content, mode, template"},
		"traversal":   {"files:\n  - name: ../evil\n    content: x\n", `line 2: files[0]: invalid file name "../evil"`},
		"absolute":    {"files:\n  - name: /etc/passwd\n", `invalid file name "/etc/passwd"`},
		"empty name":  {"files:\n  - content: x\n", "files[0]: invalid file name: the name is empty"},
		"dot dot":     {"files:\n  - name: ..\n", "directory itself or its parent"},
		"duplicate":   {"files:\n  - name: a\n  - name: a\n", `files[1]: duplicate name "a" (also files[0])`},
		"bad mode":    {"files:\n  - name: a\n    mode: 0999\n", "invalid mode"},
		"status":      {"files:\n  - name: a\n    status: {kind: Done}\n", "line 3, column 5: unknown key in files[0]"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			parent := t.TempDir()
			path := filepath.Join(parent, "files.yaml")
			require.NoError(t, os.WriteFile(path, []byte(c.yaml), 0o644))
			err := startFailure(t, config{Dir: filepath.Join(parent, "target"), Addr: "127.0.0.1:0", FilesPath: path, RetryMax: time.Second})
			require.ErrorContains(t, err, path)
			require.ErrorContains(t, err, c.msg)
			_, statErr := os.Stat(filepath.Join(parent, "target"))
			require.True(t, os.IsNotExist(statErr), "nothing is written when the start fails")
		})
	}
	t.Run("missing file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "nope.yaml")
		err := startFailure(t, config{Dir: t.TempDir(), Addr: "127.0.0.1:0", FilesPath: path, RetryMax: time.Second})
		require.ErrorContains(t, err, "nope.yaml")
		require.ErrorContains(t, err, "no such file") // hive's ErrPopulate does not wrap
	})
}

func TestEmptyInitialFileAndEmptyList(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.yaml")
	require.NoError(t, os.WriteFile(path, nil, 0o644))
	cfg := testConfig()
	cfg.FilesPath = path
	a := startApp(t, cfg, nil)
	code, body := a.do(http.MethodGet, "/files", nil)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, "[]", body)
}

// The example prints the directory it reconciles into as an absolute path
// and stops cleanly with exit status 0.
func TestRunPrintsDirectoryAndStops(t *testing.T) {
	t.Chdir(t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"--dir", "target", "--addr", "127.0.0.1:0"}, &stdout, &stderr) }()
	wd, err := os.Getwd()
	require.NoError(t, err)
	banner := "converge example: reconciling into " + filepath.Join(wd, "target") + ", API on http://127.0.0.1:"
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), banner) }, waitFor, 5*time.Millisecond, stderr.String())
	cancel()
	select {
	case code := <-done:
		require.Equal(t, exitOK, code, stderr.String())
	case <-time.After(waitFor):
		t.Fatal("run did not return after its context ended")
	}
	require.Contains(t, stderr.String(), "Stopped hive")
}

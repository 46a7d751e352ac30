package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
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
	// of the example's next to it, and a real leftover temporary file.
	write := func(name, content string) {
		require.NoError(t, os.WriteFile(filepath.Join(a.dir, name), []byte(content), 0o644))
	}
	write("users-file", "mine")
	write(tmpPrefix+"0123", "mine too")
	write(stateDir+"/"+tmpPrefix+"0123", "leftover")

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
	require.Equal(t, []string{"journal.json"}, dirNames(t, filepath.Join(b.dir, stateDir)))
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
	a.waitInfo("3 repairs", func(i *reconciler.Info) bool { return i.DriftRepaired >= 3 })
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
	a.waitHealth(cell.StatusOK)
}

func TestStateDBHandler(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	code, body := a.do(http.MethodGet, "/statedb/dump/files", nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "hello.txt")

	// A streaming request ends when the app stops.
	resp, err := a.client.Get(a.base + "/statedb/changes/files")
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
		assert.Contains(t, body, c.msg, "%s %s", c.method, c.path)
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
		"not a list":  {"files: hello\n", "invalid YAML"},
		"unknown key": {"files:\n  - name: a\n    contents: x\n", "field contents not found"},
		"traversal":   {"files:\n  - name: ../evil\n    content: x\n", `files[0]: invalid file name "../evil"`},
		"absolute":    {"files:\n  - name: /etc/passwd\n", `invalid file name "/etc/passwd"`},
		"empty name":  {"files:\n  - content: x\n", "files[0]: invalid file name: the name is empty"},
		"dot dot":     {"files:\n  - name: ..\n", "directory itself or its parent"},
		"duplicate":   {"files:\n  - name: a\n  - name: a\n", `files[1]: duplicate name "a" (also files[0])`},
		"bad mode":    {"files:\n  - name: a\n    mode: 0999\n", "invalid mode"},
		"status":      {"files:\n  - name: a\n    status: {kind: Done}\n", "field status not found"},
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

// Issue 13, defect 1: the example pruned files it did not write, took "."
// for its directory and followed a symlink at its path. It now refuses a
// non-empty directory without its journal (exit status 2) and a symbolic
// link, and touches nothing in either.
func TestRefusesDirectoriesItDidNotCreate(t *testing.T) {
	populate := func(t *testing.T, dir string) map[string]string {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
		for name, content := range map[string]string{"go.mod": "module mine\n", "README.md": "# mine\n", "sub/x": "x"} {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
		}
		return snapshot(t, dir)
	}
	t.Run("non-empty directory", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "d")
		before := populate(t, dir)
		code, stderr := runExample(t, "--dir", dir)
		require.Equal(t, exitUsage, code, stderr)
		require.Contains(t, stderr, "example: target directory "+dir+" is not empty and the example did not create it")
		require.Contains(t, stderr, "--adopt")
		require.Equal(t, before, snapshot(t, dir))
	})
	t.Run("the current directory", func(t *testing.T) {
		dir := t.TempDir()
		before := populate(t, dir)
		t.Chdir(dir)
		code, stderr := runExample(t, "--dir", ".")
		require.Equal(t, exitUsage, code, stderr)
		require.Equal(t, before, snapshot(t, dir))
	})
	t.Run("symbolic link", func(t *testing.T) {
		parent := t.TempDir()
		full, empty := filepath.Join(parent, "full"), filepath.Join(parent, "empty")
		before := populate(t, full)
		require.NoError(t, os.Mkdir(empty, 0o755))
		for _, target := range []string{full, empty} {
			link := filepath.Join(parent, "link-to-"+filepath.Base(target))
			require.NoError(t, os.Symlink(target, link))
			for _, adopt := range []string{"--adopt=false", "--adopt"} {
				code, stderr := runExample(t, "--dir", link, adopt)
				require.Equal(t, exitUsage, code, stderr)
				require.Contains(t, stderr, "is a symbolic link")
			}
		}
		require.Equal(t, before, snapshot(t, full))
		require.Empty(t, snapshot(t, empty))
	})
	t.Run("state directory not the example's", func(t *testing.T) {
		for name, setup := range map[string]func(dir string){
			"a file":     func(dir string) { require.NoError(t, os.WriteFile(filepath.Join(dir, stateDir), nil, 0o644)) },
			"no journal": func(dir string) { require.NoError(t, os.Mkdir(filepath.Join(dir, stateDir), 0o755)) },
			"another's journal": func(dir string) {
				require.NoError(t, os.Mkdir(filepath.Join(dir, stateDir), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(dir, journalPath), []byte(`{"owner": "someone else", "files": {"go.mod": {}}}`), 0o644))
			},
		} {
			dir := filepath.Join(t.TempDir(), "d")
			populate(t, dir)
			setup(dir)
			before := snapshot(t, dir)
			code, stderr := runExample(t, "--dir", dir, "--adopt")
			require.Equal(t, exitUsage, code, "%s: %s", name, stderr)
			require.Contains(t, stderr, stateDir, name)
			require.Equal(t, before, snapshot(t, dir), name)
		}
	})
}

// With --adopt the example adds its files to a directory that holds
// others, and never changes or removes those: not by prune, not by a
// delete, and not when a desired file has the same name (that file fails
// until the name is freed).
func TestAdoptLeavesOtherFilesAlone(t *testing.T) {
	cfg := testConfig()
	cfg.Adopt = true
	var before map[string]string
	a := startApp(t, cfg, func(dir string) {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o640))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "motd"), []byte("my motd"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "x"), []byte("x"), 0o600))
		before = snapshot(t, dir)
	})
	a.waitKind("hello.txt", status.KindDone)
	a.waitKind("secret.conf", status.KindDone)
	f := a.waitKind("motd", status.KindError)
	require.Contains(t, f.Status.Error, "write motd: exists and the example did not write it")
	require.Contains(t, degradedErrors(a.waitHealth(cell.StatusDegraded)), "write motd")
	a.prune()

	// Deleting the desired motd does not delete the user's.
	code, body := a.do(http.MethodDelete, "/files/motd", nil)
	require.Equal(t, http.StatusNoContent, code, body)
	a.waitHealth(cell.StatusOK)
	a.prune()
	requireUnchanged(t, before, snapshot(t, a.dir))
	require.ElementsMatch(t, []string{"hello.txt", "secret.conf"}, journalNames(t, a.dir))

	// What the example wrote is its own to delete.
	a.put("new", "x")
	a.waitKind("new", status.KindDone)
	code, body = a.do(http.MethodDelete, "/files/new", nil)
	require.Equal(t, http.StatusNoContent, code, body)
	require.Eventually(t, func() bool {
		_, err := os.Lstat(filepath.Join(a.dir, "new"))
		return os.IsNotExist(err)
	}, waitFor, 5*time.Millisecond)
	requireUnchanged(t, before, snapshot(t, a.dir))
}

// A symbolic link put in place of the directory while the example runs is
// not followed: writes, deletes and prunes fail until it is gone.
func TestSymlinkSwappedInIsNotFollowed(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	elsewhere := filepath.Join(a.parent, "elsewhere")
	require.NoError(t, os.Mkdir(elsewhere, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(elsewhere, "hello.txt"), []byte("not yours"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(elsewhere, "other"), []byte("x"), 0o644))
	before := snapshot(t, elsewhere)
	require.NoError(t, os.Rename(a.dir, filepath.Join(a.parent, "moved")))
	require.NoError(t, os.Symlink(elsewhere, a.dir))

	a.put("x", "y")
	require.Contains(t, a.waitKind("x", status.KindError).Status.Error, "is a symbolic link")
	code, body := a.do(http.MethodDelete, "/files/hello.txt", nil)
	require.Equal(t, http.StatusNoContent, code, body)
	a.prune()
	require.Equal(t, before, snapshot(t, elsewhere))

	// Once the link is gone, the directory is created anew and x written.
	require.NoError(t, os.Remove(a.dir))
	a.waitKind("x", status.KindDone)
	require.Equal(t, "y", a.readFile("x"))
	require.Equal(t, before, snapshot(t, elsewhere))
}

// Issue 13, defect 2: with the address taken, the example exited 1 but had
// already written files. Now the listener is bound before the directory is
// touched.
func TestFailedStartWritesNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	parent := t.TempDir()
	missing, empty := filepath.Join(parent, "missing"), filepath.Join(parent, "empty")
	require.NoError(t, os.Mkdir(empty, 0o755))
	for _, dir := range []string{missing, empty} {
		code, stderr := runExample(t, "--dir", dir, "--addr", ln.Addr().String())
		require.Equal(t, exitFailure, code, stderr)
		require.Contains(t, stderr, "address already in use")
	}
	requireAbsent(t, missing)
	entries, err := os.ReadDir(empty)
	require.NoError(t, err)
	require.Empty(t, entries)
}

// Issue 13, defect 3: a file the example cannot read back (mode 0000 or
// 0200 for a user other than root) failed every refresh and was rewritten
// by the retry, so health flapped. The tests run as root, so reading is
// made to fail as it would for another user.
func TestUnreadableFilesDoNotFlap(t *testing.T) {
	var reads atomic.Int32
	unreadable := func(root *os.Root, name string) ([]byte, error) {
		if name == "locked" {
			reads.Add(1)
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
		}
		return root.ReadFile(name)
	}
	cfg := testConfig()
	cfg.RefreshInterval = 20 * time.Millisecond
	a := startApp(t, cfg, nil, cell.Provide(func() fileReader { return unreadable }))
	path := filepath.Join(a.dir, "locked")

	code, body := a.do(http.MethodPut, "/files/locked?mode=0000", strings.NewReader("secret"))
	require.Equal(t, http.StatusCreated, code, body)
	last := a.waitKind("locked", status.KindDone).Status.UpdatedAt
	written, err := os.Stat(path)
	require.NoError(t, err)

	// Unchanged: refreshes end Done without reading or rewriting it.
	waitRefreshes := func(n int) {
		for range n {
			f := a.waitFile("locked", "a refresh", func(f *File, found bool) bool {
				require.NotEqual(t, status.KindError, f.Status.Kind, f.Status.Error)
				return f.Status.Kind == status.KindDone && f.Status.UpdatedAt.After(last)
			})
			last = f.Status.UpdatedAt
		}
	}
	waitRefreshes(3)
	now, err := os.Stat(path)
	require.NoError(t, err)
	require.True(t, os.SameFile(written, now), "an unchanged unreadable file must not be rewritten")
	require.Zero(t, reads.Load())

	// Changed behind its back, same size and mode: it cannot be read to
	// compare, so it is rewritten, still without an error.
	require.NoError(t, os.WriteFile(path, []byte("SECRET"), 0))
	require.NoError(t, os.Chtimes(path, time.Time{}, written.ModTime().Add(time.Second)))
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(path)
		return err == nil && string(data) == "secret"
	}, waitFor, 5*time.Millisecond)
	require.Positive(t, reads.Load())
	waitRefreshes(2)
	code, h := a.health()
	require.Equal(t, http.StatusOK, code, h)
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

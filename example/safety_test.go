package main

import (
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/status"
)

// The example is safe on a user's machine (issue 13, defects 1 to 3).

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
	a.waitQuiet() // the first prune would recreate the directory moved away
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
// touched, and the address taken is a usage error (exit status 2).
func TestFailedStartWritesNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	parent := t.TempDir()
	missing, empty := filepath.Join(parent, "missing"), filepath.Join(parent, "empty")
	require.NoError(t, os.Mkdir(empty, 0o755))
	for _, dir := range []string{missing, empty} {
		code, stderr := runExample(t, "--dir", dir, "--addr", ln.Addr().String())
		require.Equal(t, exitUsage, code, stderr)
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
	unreadable := func(root *os.Root, name string) ([]byte, fileID, error) {
		if name == "locked" {
			reads.Add(1)
			return nil, fileID{}, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
		}
		return readRegular(root, name)
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
	// In one write of the same size: a refresh never sees the file
	// truncated, which it would rewrite without trying to read it.
	edit, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = edit.WriteAt([]byte("SECRET"), 0)
	require.NoError(t, err)
	require.NoError(t, edit.Close())
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

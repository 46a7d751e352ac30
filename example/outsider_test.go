//go:build linux

package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
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

// An outside review of what docs/example.md promises under "What it
// guarantees your machine", done the way a careless operator or an
// unlucky user would meet it. Each test is named after the guarantee it
// checks and asserts the documented behaviour.

// inodeOf returns the inode number of the file at path.
func inodeOf(t *testing.T, path string) uint64 {
	t.Helper()
	info, err := os.Lstat(path)
	require.NoError(t, err)
	return info.Sys().(*syscall.Stat_t).Ino
}

// takeInode creates files named prefix-N in dir, holding content, until
// one gets the inode number want, as the user's next new file does on
// ext4 (which hands out a freed inode again at once), and returns its
// path. The others are kept, so that their inodes stay taken. The test is
// skipped if the file system does not give the inode back.
func takeInode(t *testing.T, dir, prefix string, want uint64, content string) string {
	t.Helper()
	for i := range 64 {
		path := filepath.Join(dir, fmt.Sprintf("%s-%d", prefix, i))
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
		if inodeOf(t, path) == want {
			return path
		}
	}
	t.Skipf("the file system of %s did not reuse inode %d", dir, want)
	return ""
}

// waitSettled waits until the named file is neither Pending nor
// Refreshing, and returns it.
func (a *testApp) waitSettled(name string) *File {
	a.t.Helper()
	return a.waitFile(name, "Done or Error", func(f *File, found bool) bool {
		return found && (f.Status.Kind == status.KindDone || f.Status.Kind == status.KindError)
	})
}

// waitDeleteReconciled waits until the reconciler has processed every
// change of the files table so far, a delete among them.
func (a *testApp) waitDeleteReconciled() {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	_, _, err := a.rec.WaitUntilReconciled(ctx, a.files.Revision(a.db.ReadTxn()))
	require.NoError(a.t, err)
}

// docs/example.md: "A file it wrote that you replace (say an editor saves
// motd as a new file) is yours: the example does not write over it, and
// motd goes to Error". The example recognises its file by inode number,
// and also accepts the inode of the file its last write replaced (Prev).
// Both numbers are free once that file is gone, and ext4 gives a freed
// inode to the next new file at once: the user's replacement then passes
// for the example's own file and is overwritten.
func TestAFileTheUserPutInPlaceIsNotWrittenOver(t *testing.T) {
	t.Run("removed and written anew", func(t *testing.T) {
		a := startApp(t, testConfig(), nil)
		a.put("notes", "the example's notes")
		a.waitKind("notes", status.KindDone)
		path := filepath.Join(a.dir, "notes")
		ino := inodeOf(t, path)

		// rm notes, then the user writes a notes of their own.
		require.NoError(t, os.Remove(path))
		mine := takeInode(t, a.dir, "notes.user", ino, "the user's own notes")
		require.NoError(t, os.Rename(mine, path))

		a.put("notes", "the example's new notes")
		f := a.waitSettled("notes")
		assert.Equal(t, "the user's own notes", a.readFile("notes"), "the user's file was written over")
		assert.Equal(t, status.KindError.String(), f.Status.Kind.String())
		assert.Contains(t, f.Status.Error, "exists and the example did not write it")
	})
	t.Run("saved by an editor after a second write", func(t *testing.T) {
		a := startApp(t, testConfig(), nil)
		a.put("conf", "version 1")
		a.waitKind("conf", status.KindDone)
		path := filepath.Join(a.dir, "conf")
		first := inodeOf(t, path)
		a.put("conf", "version 2")
		a.waitKind("conf", status.KindDone)
		require.NotEqual(t, first, inodeOf(t, path), "the second write replaces the file")

		// An editor saves conf: a new file, renamed over it.
		saved := takeInode(t, a.dir, ".conf.swp", first, "the user's conf")
		require.NoError(t, os.Rename(saved, path))

		a.put("conf", "version 3")
		f := a.waitSettled("conf")
		assert.Equal(t, "the user's conf", a.readFile("conf"), "the user's file was written over")
		assert.Equal(t, status.KindError.String(), f.Status.Kind.String())
		assert.Contains(t, f.Status.Error, "exists and the example did not write it")
	})
}

// docs/example.md: "It removes a file only if the file still holds what
// the example wrote: one you changed, or put in its place, is left alone
// and forgotten." A file the user put in its place is removed if it holds
// the same bytes: here the user's own copy, with mode 0600.
func TestAFileTheUserPutInPlaceIsNotRemoved(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.put("shared", "the same words")
	a.waitKind("shared", status.KindDone)
	path := filepath.Join(a.dir, "shared")
	theirs := inodeOf(t, path)

	// The user puts their own copy in its place, as an editor saves.
	require.NoError(t, os.WriteFile(path+".new", []byte("the same words"), 0o600))
	require.NoError(t, os.Rename(path+".new", path))
	require.NotEqual(t, theirs, inodeOf(t, path))

	code, body := a.do(http.MethodDelete, "/files/shared", nil)
	require.Equal(t, http.StatusNoContent, code, body)
	a.waitDeleteReconciled()
	info, err := os.Lstat(path)
	require.NoError(t, err, "the file the user put in place was removed")
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())
}

// The check that a file is still the example's and the removal are two
// steps: a file the user puts in its place between them is removed.
// (docs/example.md: "one you changed, or put in its place, is left
// alone".) The reader the tests may give the example stands in for the
// moment between the two: the user saves the file as the example reads
// it to compare.
func TestAFileReplacedDuringTheCheckIsNotRemoved(t *testing.T) {
	var armed atomic.Bool
	fired := make(chan struct{})
	var path string
	reader := func(root *os.Root, name string) ([]byte, fileID, error) {
		data, id, err := readRegular(root, name)
		if name == "notes" && armed.CompareAndSwap(true, false) {
			// The user saves notes, as an editor does.
			if werr := os.WriteFile(path+".new", []byte("the user's new work"), 0o644); werr == nil {
				os.Rename(path+".new", path)
			}
			close(fired)
		}
		return data, id, err
	}
	a := startApp(t, testConfig(), nil, cell.Provide(func() fileReader { return reader }))
	path = filepath.Join(a.dir, "notes")
	a.put("notes", "the example's")
	a.waitKind("notes", status.KindDone)
	// touch notes: still the example's file, with its content, so the
	// delete reads it to compare.
	later := time.Now().Add(time.Second)
	require.NoError(t, os.Chtimes(path, later, later))

	armed.Store(true)
	code, body := a.do(http.MethodDelete, "/files/notes", nil)
	require.Equal(t, http.StatusNoContent, code, body)
	a.waitDeleteReconciled()
	select {
	case <-fired:
	default:
		t.Fatal("the delete did not read notes: the interleaving was not reached")
	}
	data, err := os.ReadFile(path)
	require.NoError(t, err, "the file the user saved during the delete was removed")
	require.Equal(t, "the user's new work", string(data))
}

// As above, for a write: a refresh finds the example's file edited in
// place and repairs it ("A file of it that you edit in place is still its
// own, and repaired"), but the user saves a new file meanwhile, which is
// theirs ("the example does not write over it"). The rename of the repair
// replaces whatever is at the name by then.
func TestAFileReplacedDuringTheRefreshIsNotWrittenOver(t *testing.T) {
	var armed atomic.Bool
	fired := make(chan time.Time, 1)
	var path string
	reader := func(root *os.Root, name string) ([]byte, fileID, error) {
		data, id, err := readRegular(root, name)
		if name == "conf" && armed.CompareAndSwap(true, false) {
			if werr := os.WriteFile(path+".new", []byte("the user's saved conf"), 0o644); werr == nil {
				os.Rename(path+".new", path)
			}
			fired <- time.Now()
		}
		return data, id, err
	}
	cfg := testConfig()
	cfg.RefreshInterval = 20 * time.Millisecond
	a := startApp(t, cfg, nil, cell.Provide(func() fileReader { return reader }))
	path = filepath.Join(a.dir, "conf")
	a.put("conf", "AAAA")
	a.waitKind("conf", status.KindDone)

	armed.Store(true)
	// Edited in place, in one write of the same size: a refresh never
	// sees the file truncated, which it would repair without reading it.
	edit, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = edit.WriteAt([]byte("BBBB"), 0)
	require.NoError(t, err)
	require.NoError(t, edit.Close())
	var at time.Time
	select {
	case at = <-fired:
	case <-time.After(waitFor):
		t.Fatal("no refresh read conf")
	}
	f := a.waitFile("conf", "the refresh that read it to end", func(f *File, found bool) bool {
		return found && f.Status.UpdatedAt.After(at) &&
			(f.Status.Kind == status.KindDone || f.Status.Kind == status.KindError)
	})
	assert.Equal(t, "the user's saved conf", a.readFile("conf"), "the file the user saved was written over")
	assert.Equal(t, status.KindError.String(), f.Status.Kind.String())
}

// Nothing stops a second example from using the directory of a running
// one (a second `go run ./example` with the same --dir and another
// --addr). It writes its own token over the first one's, so the running
// API no longer takes the token in DIR/.converge-example/token ("Every
// request needs the token in DIR/.converge-example/token"), and both
// append to, and compact, one journal each believes is its own.
func TestASecondExampleDoesNotTakeTheDirectoryOfARunningOne(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()

	cfg := testConfig()
	cfg.Dir, cfg.Addr = a.dir, "127.0.0.1:0"
	second := newTestApp(cfg)
	log := hivetest.Logger(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	err := second.Start(log, ctx)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		second.Stop(log, ctx)
	})

	assert.Equal(t, a.token, readToken(t, a.dir), "the running example's token was replaced in the token file")
	a.token = readToken(t, a.dir) // as a user would, from the file
	code, body := a.do(http.MethodGet, "/files", nil)
	assert.Equal(t, http.StatusOK, code, "the token in the file does not open the running API: %s", body)
	require.Error(t, err, "a second example started on the directory a running one uses")
}

// The issue: "errors must not print the file's content"; docs/example.md:
// "--files /etc/shadow # the error shows no line of the file". An unknown
// key is quoted when it looks like a name, and a credential often does:
// here an access key id, the first key of a credentials file.
func TestFilesErrorsDoNotPrintTheFilesContent(t *testing.T) {
	const secret = "AKIAIOSFODNN7EXAMPLE"
	path := filepath.Join(t.TempDir(), "credentials")
	require.NoError(t, os.WriteFile(path, []byte(secret+": wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY\n"), 0o600))
	dir := filepath.Join(t.TempDir(), "target")
	code, stderr := runExample(t, "--dir", dir, "--files", path, "--addr", "127.0.0.1:0")
	require.Equal(t, exitUsage, code, stderr)
	require.NotContains(t, stderr, secret, "the error shows a line of the file")
	requireAbsent(t, dir)
}

// Held: names that stretch the line-based journal (the longest name,
// made of characters JSON escapes, line and paragraph separators, bidi
// controls, a name like the state directory's) are written, survive a
// restart's reading of the journal, and are pruned; names with a newline
// or the state directory's own name are refused.
func TestOddNamesKeepTheJournalReadable(t *testing.T) {
	odd := []string{
		strings.Repeat("<", maxNameLen),
		strings.Repeat("\u2028", maxNameLen/3),
		"a\u2029b\u202ec",
		".Converge-Example",
		".converge-example ",
		"journal.log",
		"tmp-0123456789abcdef",
	}
	a := startApp(t, testConfig(), nil)
	for _, name := range odd {
		a.put(url.PathEscape(name), "x")
	}
	for _, name := range odd {
		a.waitKind(name, status.KindDone)
	}
	for _, path := range []string{"/files/a%0Ab", "/files/a%0Db", "/files/.converge-example", "/files/" + strings.Repeat("x", maxNameLen+1)} {
		code, body := a.do(http.MethodPut, path, strings.NewReader("x"))
		require.Equal(t, http.StatusBadRequest, code, "%s: %s", path, body)
	}
	a.stop()
	require.ElementsMatch(t, append(odd, initialNames...), journalNames(t, a.dir))

	cfg := testConfig()
	cfg.Dir = a.dir
	b := startApp(t, cfg, nil)
	info := b.waitPruneAfter(time.Time{})
	require.Empty(t, info.LastPruneError)
	b.waitReconciled()
	require.ElementsMatch(t, initialNames, b.dirNames())
	require.ElementsMatch(t, initialNames, journalNames(t, b.dir))
}

// The same second example, and the journal: "It records the files it
// writes in DIR/.converge-example/journal.log". When the second one
// compacts the log (renames a new log over it), the first one goes on
// appending to the old one, which no name holds any more: what it writes
// from then on is recorded nowhere, so it is never pruned or deleted.
func TestASecondExampleDoesNotLoseTheRecordsOfTheFirst(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()

	cfg := testConfig()
	cfg.Dir, cfg.Addr = a.dir, "127.0.0.1:0"
	var b testApp
	second := newTestApp(cfg, cell.Invoke(func(db *statedb.DB, files filesTable, r reconciler.Reconciler[*File]) {
		b.db, b.files, b.rec = db, files.RWTable, r
	}))
	log := hivetest.Logger(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	stopSecond := func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		second.Stop(log, ctx)
	}
	t.Cleanup(stopSecond) // a start that fails leaves what it started running
	if err := second.Start(log, ctx); err != nil {
		t.Logf("the second example was refused: %v", err)
		return
	}

	// The second example writes and deletes enough files to compact the
	// log: more than twice its entries plus compactMin records.
	n := compactMin/2 + 16
	wtxn := b.db.WriteTxn(b.files)
	for i := range n {
		b.files.Insert(wtxn, &File{Name: fmt.Sprintf("b-%d", i), Content: "b", Mode: defaultMode, Status: status.Pending()})
	}
	wtxn.Commit()
	require.NoError(t, reconciler.WaitForReconciliation(ctx, b.db, b.files, statusIndex))
	wtxn = b.db.WriteTxn(b.files)
	for i := range n {
		b.files.Delete(wtxn, &File{Name: fmt.Sprintf("b-%d", i)})
	}
	_, _, err := b.rec.WaitUntilReconciled(ctx, b.files.Revision(wtxn.Commit()))
	require.NoError(t, err)

	// The first example writes a file.
	a.put("from-a", "written by the first example")
	a.waitKind("from-a", status.KindDone)
	stopSecond()
	a.stop()
	require.FileExists(t, filepath.Join(a.dir, "from-a"))
	require.Contains(t, journalNames(t, a.dir), "from-a", "a file the example wrote is not in its journal")
}

// Held: on a full disk (a small tmpfs, where the machine lets the test
// mount one) a write fails with an error, leaves no temporary file, and
// the file is written once there is room again.
func TestAFullDiskLeavesNoTemporaryFile(t *testing.T) {
	mnt := t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=512k,mode=0755"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	cfg := testConfig()
	cfg.Dir = filepath.Join(mnt, "target")
	a := startApp(t, cfg, nil)
	a.waitReconciled()

	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	require.NoError(t, err)
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			break
		}
	}
	require.NoError(t, f.Close())

	a.put("x", strings.Repeat("x", 8192))
	require.Contains(t, a.waitKind("x", status.KindError).Status.Error, "no space left")
	names := dirNames(t, filepath.Join(a.dir, stateDir))
	for _, name := range names {
		require.False(t, strings.HasPrefix(name, tmpPrefix), "a temporary file is left: %v", names)
	}
	require.NoError(t, os.Remove(filler))
	a.waitKind("x", status.KindDone)
	require.Equal(t, strings.Repeat("x", 8192), a.readFile("x"))
	a.stop()
	require.ElementsMatch(t, append([]string{"x"}, initialNames...), journalNames(t, a.dir))
}

// docs/example.md: the token "only you can read (mode 0600, in a 0700
// directory)". A state directory the example finds with other modes (a
// restore from a backup, a chmod -R a+rX of the tree) is used as it is:
// the token goes on being written into a directory others can list.
func TestTheTokenIsInA0700Directory(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	a.stop()
	state := filepath.Join(a.dir, stateDir)
	require.NoError(t, os.Chmod(state, 0o755))

	cfg := testConfig()
	cfg.Dir, cfg.Addr = a.dir, "127.0.0.1:0"
	app := newTestApp(cfg)
	log := hivetest.Logger(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := app.Start(log, ctx); err != nil {
		require.ErrorContains(t, err, stateDir) // refusing it is as good as making it 0700
		require.NoError(t, app.Stop(log, ctx))
		return
	}
	defer app.Stop(log, ctx)
	info, err := os.Stat(state)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700).String(), info.Mode().Perm().String(), "the token's directory")
}

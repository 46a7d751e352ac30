//go:build unix

package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/status"
)

// The example touches only what it wrote, in a directory only its user
// can change (issue 35, items 1, 2, 5 and 6).

// Issue 35, item 1: a file is removed only if it still holds what the
// example wrote. One the user put in its place (even if it got the same
// inode number), one the user changed, and one a journal entry names
// without the example having written it are left alone through a restart
// and its prune, and forgotten; the example does not write over them.
func TestOnlyTheFileTheExampleWroteIsRemoved(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	for _, name := range []string{"mine", "edited", "replaced"} {
		a.put(name, "written by the example")
		a.waitKind(name, status.KindDone)
	}
	a.stop()

	// Between the runs: "edited" is changed in place (still the
	// example's file); "replaced" is removed and the user writes a file
	// of that name; and the journal claims a name, U+FFFD, that only the
	// user wrote, as the journal of issue 35 did.
	path := func(name string) string { return filepath.Join(a.dir, name) }
	require.NoError(t, os.WriteFile(path("edited"), []byte("edited in place"), 0o644))
	require.NoError(t, os.Remove(path("replaced")))
	require.NoError(t, os.WriteFile(path("replaced"), []byte("the user's"), 0o644))
	require.NoError(t, os.WriteFile(path("\ufffd"), []byte("the user's too"), 0o644))
	sum := sha256.Sum256([]byte("something else"))
	appendRecord(t, a.dir, fmt.Sprintf(`{"name":"\ufffd","size":14,"mode":"0644","mtime":1,"sha256":%q,"id":{"dev":1,"ino":2}}`, hex.EncodeToString(sum[:])))

	cfg := testConfig()
	cfg.Dir = a.dir
	b := startApp(t, cfg, nil)
	info := b.waitPruneAfter(time.Time{})
	require.Empty(t, info.LastPruneError)
	require.Equal(t, uint64(1), info.DriftRepaired, "only mine was as the example wrote it")
	b.waitReconciled()
	require.Equal(t, []string{"edited", "hello.txt", "motd", "replaced", "secret.conf", "\ufffd"}, b.dirNames())
	require.Equal(t, "edited in place", b.readFile("edited"))
	require.Equal(t, "the user's", b.readFile("replaced"))
	require.Equal(t, "the user's too", b.readFile("\ufffd"))
	require.ElementsMatch(t, initialNames, journalNames(t, b.dir), "the journal forgets what is not the example's")

	// Wanted again, the name is the user's: the file fails, untouched.
	b.put("replaced", "from the example")
	require.Contains(t, b.waitKind("replaced", status.KindError).Status.Error, "exists and the example did not write it")
	require.Equal(t, "the user's", b.readFile("replaced"))
}

// appendRecord appends a line to the journal of dir, as if the example
// had written it.
func appendRecord(t *testing.T, dir, line string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, journalPath), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(line + "\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// Issue 35, item 1 and 6: a file the example is about to replace is
// replaced by the user meanwhile; the example wrote it, then the user
// made it theirs: the example's refresh does not overwrite the user's
// file, and a delete does not remove it.
func TestAFileReplacedByTheUserIsTheirs(t *testing.T) {
	cfg := testConfig()
	cfg.RefreshInterval = 20 * time.Millisecond
	a := startApp(t, cfg, nil)
	a.put("conf", "the example's")
	a.waitKind("conf", status.KindDone)
	path := filepath.Join(a.dir, "conf")
	require.NoError(t, os.WriteFile(path+".new", []byte("the user's"), 0o644))
	require.NoError(t, os.Rename(path+".new", path)) // as an editor saves
	require.Contains(t, a.waitKind("conf", status.KindError).Status.Error, "exists and the example did not write it")
	require.Equal(t, "the user's", a.readFile("conf"))

	code, body := a.do(http.MethodDelete, "/files/conf", nil)
	require.Equal(t, http.StatusNoContent, code, body)
	a.waitReconciled()
	a.prune()
	require.Equal(t, "the user's", a.readFile("conf"))
	require.ElementsMatch(t, initialNames, journalNames(t, a.dir))
}

// Issue 35, item 2: a directory another user created (the predictable
// default $TMPDIR/converge-example among them), or that others can write,
// is refused with a reason, exit status 2, and left as it was; so is a
// state directory or journal another user planted. The tests run as root,
// so a directory is given to another user with chown.
func TestRefusesWhatOtherUsersCanChange(t *testing.T) {
	const other = 4242
	mkdir := func(t *testing.T, path string, mode fs.FileMode, uid int) {
		require.NoError(t, os.MkdirAll(path, 0o700))
		require.NoError(t, os.Chmod(path, mode)) // not reduced by the umask
		require.NoError(t, os.Chown(path, uid, uid))
	}
	plant := func(t *testing.T, dir string, mode fs.FileMode, uid int) {
		mkdir(t, filepath.Join(dir, stateDir), mode, uid)
		j := filepath.Join(dir, journalPath)
		sum := sha256.Sum256([]byte("x"))
		data := fmt.Sprintf("{\"owner\":%q,\"version\":2}\n{\"name\":\"victim\",\"size\":1,\"mode\":\"0644\",\"sha256\":%q}\n", journalOwner, hex.EncodeToString(sum[:]))
		require.NoError(t, os.WriteFile(j, []byte(data), 0o600))
		require.NoError(t, os.Chown(j, uid, uid))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "victim"), []byte("y"), 0o644))
	}
	cases := map[string]struct {
		setup func(t *testing.T, dir string)
		msg   string
	}{
		"another user's directory": {func(t *testing.T, dir string) { mkdir(t, dir, 0o755, other) },
			"is owned by uid 4242, not by the user running the example (uid 0): another user may have created it"},
		"writable by everyone": {func(t *testing.T, dir string) { mkdir(t, dir, 0o777, 0) },
			"can be written by other users (mode -rwxrwxrwx)"},
		"writable by its group": {func(t *testing.T, dir string) { mkdir(t, dir, 0o775, 0) },
			"can be written by other users (mode -rwxrwxr-x)"},
		"another user's state directory": {func(t *testing.T, dir string) { mkdir(t, dir, 0o755, 0); plant(t, dir, 0o700, other) },
			stateDir + " is owned by uid 4242"},
		"a state directory others can write": {func(t *testing.T, dir string) { mkdir(t, dir, 0o755, 0); plant(t, dir, 0o777, 0) },
			stateDir + " can be written by other users"},
		"another user's journal": {func(t *testing.T, dir string) {
			mkdir(t, dir, 0o755, 0)
			plant(t, dir, 0o700, 0)
			require.NoError(t, os.Chown(filepath.Join(dir, journalPath), other, other))
		}, journalPath + " is owned by uid 4242"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "target")
			c.setup(t, dir)
			before := snapshotAll(t, dir)
			code, stderr := runExample(t, "--dir", dir, "--addr", "127.0.0.1:0", "--adopt")
			require.Equal(t, exitUsage, code, stderr)
			requireOnce(t, stderr, c.msg)
			require.Contains(t, stderr, "example: target directory "+dir)
			require.NotContains(t, stderr, "Serving HTTP")
			require.Equal(t, before, snapshotAll(t, dir))
		})
	}

	t.Run("the default directory, taken first", func(t *testing.T) {
		tmp := t.TempDir()
		t.Setenv("TMPDIR", tmp)
		dir := filepath.Join(tmp, "converge-example")
		mkdir(t, dir, 0o777, other)
		plant(t, dir, 0o777, other)
		before := snapshotAll(t, dir)
		code, stderr := runExample(t, "--addr", "127.0.0.1:0")
		require.Equal(t, exitUsage, code, stderr)
		requireOnce(t, stderr, "example: target directory "+dir+" is owned by uid 4242")
		require.Equal(t, before, snapshotAll(t, dir))
	})
}

// snapshotAll is snapshot with the state directory, and owners.
func snapshotAll(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%s uid %d", info.Mode(), info.Sys().(*syscall.Stat_t).Uid)
		if info.Mode().IsRegular() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			desc += " " + string(data)
		}
		out[path] = desc
		return nil
	}))
	return out
}

// Issue 35, item 2: a directory opened to other users while the example
// runs is not written to until it is private again; the error says why,
// without the directory's path (it reaches /health and the API).
func TestDirectoryOpenedToOthersWhileRunning(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	require.NoError(t, os.Chmod(a.dir, 0o777))
	a.put("x", "y")
	f := a.waitKind("x", status.KindError)
	require.Contains(t, f.Status.Error, "the target directory can be written by other users")
	requireAbsent(t, filepath.Join(a.dir, "x"))
	h := a.waitHealth(cell.StatusDegraded)
	require.NotContains(t, degradedErrors(h), a.parent)

	require.NoError(t, os.Chmod(a.dir, 0o755))
	a.waitKind("x", status.KindDone)
	require.Equal(t, "y", a.readFile("x"))
}

// A second example started on the directory of a running one exits with
// status 2, naming the directory, and writes nothing there: the token and
// the journal stay the first one's. Once the first stops, the directory
// can be used again.
func TestASecondExampleOnTheDirectoryExitsWithStatus2(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	journal, err := os.ReadFile(filepath.Join(a.dir, journalPath))
	require.NoError(t, err)

	code, stderr := runExample(t, "--dir", a.dir, "--addr", "127.0.0.1:0")
	require.Equal(t, exitUsage, code, stderr)
	requireOnce(t, stderr, "example: target directory "+a.dir+" is in use by another converge example (it holds a lock on the directory): stop that one, or choose another --dir\n")
	require.Equal(t, a.token, readToken(t, a.dir))
	after, err := os.ReadFile(filepath.Join(a.dir, journalPath))
	require.NoError(t, err)
	require.Equal(t, string(journal), string(after))
	code, body := a.do(http.MethodGet, "/files", nil)
	require.Equal(t, http.StatusOK, code, body)

	a.stop()
	cfg := testConfig()
	cfg.Dir = a.dir
	b := startApp(t, cfg, nil)
	b.waitReconciled()
	require.Equal(t, b.token, readToken(t, b.dir))
}

// A file left moved aside (the example stopped before it could put it
// back) is never removed by the example: the start says where it is.
func TestAFileLeftAsideIsKeptAndReported(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	a.stop()
	left := filepath.Join(a.dir, stateDir, asidePrefix+"0123456789abcdef")
	require.NoError(t, os.WriteFile(left, []byte("the user's"), 0o644))

	var logged syncBuffer
	cfg := testConfig()
	cfg.Dir = a.dir
	b := startAppLogging(t, slog.New(slog.NewTextHandler(&logged, nil)), cfg, nil)
	b.waitReconciled()
	b.prune()
	data, err := os.ReadFile(left)
	require.NoError(t, err)
	require.Equal(t, "the user's", string(data))
	require.Contains(t, logged.String(), "Files moved aside by a removal the example did not finish are in its state directory")
	require.Contains(t, logged.String(), filepath.Base(left))
}

// A state directory opened to listing by others while the example runs
// (it holds the token) is made 0700 again before the next write.
func TestStateDirectoryOpenedWhileRunningIsMadePrivateAgain(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	state := filepath.Join(a.dir, stateDir)
	require.NoError(t, os.Chmod(state, 0o755))
	a.put("x", "y")
	a.waitKind("x", status.KindDone)
	info, err := os.Stat(state)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700).String(), info.Mode().Perm().String())
	require.Equal(t, a.token, readToken(t, a.dir), "the token is the same")
}

// Issue 35, item 5: every write rewrote and synced the whole journal.
// Now a write appends one record to the log, whatever its size: here a
// journal of 5,000 entries grows by one line for one more file, and is
// not rewritten.
func TestJournalWriteCostDoesNotGrow(t *testing.T) {
	cfg := testConfig()
	cfg.PruneInterval = 0 // the entries have no files: keep them
	var before os.FileInfo
	a := startApp(t, cfg, func(dir string) {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, stateDir), 0o700))
		var b strings.Builder
		fmt.Fprintf(&b, "{\"owner\":%q,\"version\":2}\n", journalOwner)
		sum := sha256.Sum256(nil)
		for i := range 5000 {
			fmt.Fprintf(&b, "{\"name\":\"old-%d\",\"mode\":\"0644\",\"sha256\":%q,\"id\":{\"dev\":1,\"ino\":%d}}\n", i, hex.EncodeToString(sum[:]), i+1)
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, journalPath), []byte(b.String()), 0o600))
		var err error
		before, err = os.Stat(filepath.Join(dir, journalPath))
		require.NoError(t, err)
	})
	a.waitReconciled()
	log := filepath.Join(a.dir, journalPath)
	start, err := os.Stat(log)
	require.NoError(t, err)
	require.True(t, os.SameFile(before, start))

	a.put("one-more", "x")
	a.waitKind("one-more", status.KindDone)
	after, err := os.Stat(log)
	require.NoError(t, err)
	require.True(t, os.SameFile(start, after), "the log was rewritten")
	grown := after.Size() - start.Size()
	require.Positive(t, grown)
	require.Less(t, grown, int64(400), "more than one record was written")
	data, err := os.ReadFile(log)
	require.NoError(t, err)
	require.Equal(t, 5000+len(initialNames)+2, bytes.Count(data, []byte("\n")), "%s", data[len(data)-1500:])
	require.Len(t, journalNames(t, a.dir), 5000+len(initialNames)+1)
}

// The journal's log: records are appended; a log that holds more than
// twice as many records as entries is compacted; a record cut short by a
// crash is dropped when the log is read; a damaged one is refused.
func TestJournalLog(t *testing.T) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	defer root.Close()
	require.NoError(t, root.Mkdir(stateDir, 0o700))
	j, err := createJournal(root)
	require.NoError(t, err)
	entry := journalEntry{Size: 1, Mode: 0o644, ModTime: time.Unix(0, 42), SHA256: digest([]byte("x")), ID: fileID{1, 2, "1:aa"}, Prev: fileID{1, 3, "1:bb"}}
	require.NoError(t, j.commit(setRecord("a", entry), setRecord("b", entry), deleteRecord("b")))
	lines := func() int {
		data, err := root.ReadFile(journalPath)
		require.NoError(t, err)
		return bytes.Count(data, []byte("\n"))
	}
	require.Equal(t, 4, lines())
	first, err := root.Stat(journalPath)
	require.NoError(t, err)

	var many []record
	for range 2 * compactMin {
		many = append(many, setRecord("a", entry))
	}
	require.NoError(t, j.commit(many...))
	require.Equal(t, 2, lines(), "compacted: the header and one entry")
	compacted, err := root.Stat(journalPath)
	require.NoError(t, err)
	require.False(t, os.SameFile(first, compacted))
	require.NoError(t, j.commit(setRecord("c", entry)))
	require.Equal(t, 3, lines())
	j.close()
	require.ErrorIs(t, j.commit(setRecord("d", entry)), errJournalClosed)

	// A record cut short at the end is dropped, and cut from the file.
	f, err := root.OpenFile(journalPath, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"name":"cut`)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	j, err = loadJournal(root, readRegular)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "c"}, j.names())
	got, _ := j.get("a")
	require.Equal(t, entry.SHA256, got.SHA256)
	require.True(t, got.ModTime.Equal(entry.ModTime))
	require.True(t, got.identifies(fileID{1, 2, "1:aa"}) && got.identifies(fileID{1, 3, "1:bb"}) && !got.identifies(fileID{1, 4, "1:cc"}))
	require.False(t, got.identifies(fileID{1, 2, "1:ab"}), "the inode number of the file, reused by another")
	require.False(t, got.identifies(fileID{Dev: 1, Ino: 2}), "an inode number alone identifies no file")
	j.close()
	require.Equal(t, 3, lines())

	// A damaged record is refused, naming its line.
	f, err = root.OpenFile(journalPath, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString("{\"name\":\"../x\",\"sha256\":\"\"}\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = loadJournal(root, readRegular)
	require.ErrorContains(t, err, journalPath+" is damaged at line 4: invalid file name")
}

// The journal of earlier versions (journal.json) is converted: an entry
// is kept if its file still holds the content recorded, and forgotten
// otherwise, so the file is left alone.
func TestLegacyJournalIsConverted(t *testing.T) {
	var dir string
	cfg := testConfig()
	a := startApp(t, cfg, func(d string) {
		dir = d
		require.NoError(t, os.MkdirAll(filepath.Join(d, stateDir), 0o700))
		for name, content := range map[string]string{"kept": "as written", "changed": "changed since", "users": "the user's"} {
			require.NoError(t, os.WriteFile(filepath.Join(d, name), []byte(content), 0o644))
		}
		written := func(content string) string {
			sum := sha256.Sum256([]byte(content))
			return fmt.Sprintf(`{"size": %d, "mode": "0644", "mtime": "2026-01-01T00:00:00Z", "sha256": %q}`, len(content), hex.EncodeToString(sum[:]))
		}
		legacy := fmt.Sprintf(`{"owner": %q, "files": {"kept": %s, "changed": %s}}`, journalOwner, written("as written"), written("as written!!!"))
		require.NoError(t, os.WriteFile(filepath.Join(d, legacyJournalPath), []byte(legacy), 0o600))
	})
	require.Equal(t, dir, a.dir)
	info := a.waitPruneAfter(time.Time{})
	require.Empty(t, info.LastPruneError)
	a.waitReconciled()
	requireAbsent(t, filepath.Join(a.dir, "kept"))
	require.Equal(t, "changed since", a.readFile("changed"))
	require.Equal(t, "the user's", a.readFile("users"))
	requireAbsent(t, filepath.Join(a.dir, legacyJournalPath))
	require.ElementsMatch(t, initialNames, journalNames(t, a.dir))
}

// Issue 35, item 6: a failed write left its temporary file behind. Here
// the write of the temporary file fails once it exists (as on a full
// disk: TestAFullDiskLeavesNoTemporaryFile makes one where it can mount a
// tmpfs); nothing is left in the state directory. (A process-wide
// RLIMIT_FSIZE did it once, and also failed go test's own log.)
func TestFailedWriteLeavesNoTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, stateDir), 0o700))
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	defer root.Close()
	errFull := errors.New("no space left on device")
	failing := func(out *os.File, data []byte, mode fs.FileMode) (fileState, error) {
		_, err := out.Write(data[:len(data)/2])
		require.NoError(t, err)
		return fileState{}, errFull
	}
	_, _, err = writeTempWith(root, []byte("some content"), 0o644, failing)
	require.ErrorIs(t, err, errFull)
	require.Empty(t, dirNames(t, filepath.Join(dir, stateDir)), "the temporary file is removed")

	base, _, err := writeTemp(root, []byte("some content"), 0o644)
	require.NoError(t, err)
	require.Equal(t, []string{base}, dirNames(t, filepath.Join(dir, stateDir)))
}

// Issue 35, item 6: replacing a parent of --dir with a symbolic link
// redirected every write. The parent is held open from the start: writes
// go on into the directory the example claimed, wherever it moved, and
// never through the link.
func TestParentReplacedBySymlinkIsNotFollowed(t *testing.T) {
	top := t.TempDir()
	cfg := testConfig()
	cfg.Dir = filepath.Join(top, "a", "b", "target")
	a := startApp(t, cfg, nil)
	a.waitReconciled()
	elsewhere := filepath.Join(top, "elsewhere")
	for _, dir := range []string{filepath.Join(elsewhere, "target"), filepath.Join(elsewhere, "b", "target")} {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "keep"), []byte("x"), 0o644))
	}
	before := snapshot(t, elsewhere)

	// The parent first, then the grandparent.
	require.NoError(t, os.Rename(filepath.Join(top, "a", "b"), filepath.Join(top, "a", "b.moved")))
	require.NoError(t, os.Symlink(elsewhere, filepath.Join(top, "a", "b")))
	a.put("x", "after the parent moved")
	a.waitKind("x", status.KindDone)
	require.NoError(t, os.Rename(filepath.Join(top, "a"), filepath.Join(top, "a.moved")))
	require.NoError(t, os.Symlink(elsewhere, filepath.Join(top, "a")))
	a.put("y", "after the grandparent moved")
	a.waitKind("y", status.KindDone)
	code, body := a.do(http.MethodDelete, "/files/motd", nil)
	require.Equal(t, http.StatusNoContent, code, body)
	a.waitReconciled()
	a.prune()

	require.Equal(t, before, snapshot(t, elsewhere))
	moved := filepath.Join(top, "a.moved", "b.moved", "target")
	data, err := os.ReadFile(filepath.Join(moved, "y"))
	require.NoError(t, err)
	require.Equal(t, "after the grandparent moved", string(data))
	require.Equal(t, []string{"hello.txt", "secret.conf", "x", "y"}, dirNames(t, moved))
}

// A directory made at the name of one the example claimed before, after a
// claim that failed once it had taken the lock, is claimed anew with a new
// token. That failed claim releases the directory claimed before, whose
// inode number the file system may then give to the next directory (ext4
// gives freed numbers out again): the example tells directories apart by
// file handle, as it does files. (The test cannot make the number be
// reused; it logs whether it was.)
func TestADirectoryMadeAfterAFailedClaimGetsANewToken(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	before, err := os.Stat(a.dir)
	require.NoError(t, err)

	// A directory with a damaged journal in its place: claiming it takes
	// the lock, then fails.
	require.NoError(t, os.RemoveAll(a.dir))
	require.NoError(t, os.MkdirAll(filepath.Join(a.dir, stateDir), 0o700))
	require.NoError(t, os.Chmod(a.dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(a.dir, journalPath), []byte("damaged\n"), 0o600))
	require.Equal(t, http.StatusCreated, a.put("x", "content"))
	a.waitFile("x", "an error about the journal", func(f *File, found bool) bool {
		return found && f.Status.Kind == status.KindError && strings.Contains(f.Status.Error, "journal")
	})

	require.NoError(t, os.RemoveAll(a.dir)) // the retry makes a new one
	a.waitKind("x", status.KindDone)
	made, err := os.Stat(a.dir)
	require.NoError(t, err)
	t.Logf("the new directory has the first one's inode number: %v", os.SameFile(before, made))
	a.waitNewToken()
	require.Equal(t, "content", a.readFile("x"))
}

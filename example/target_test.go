//go:build unix

package main

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The steps of a write and a removal that must never replace or remove a
// file other than the one checked, each driven into the interleaving it
// guards against: the user's file takes the name after the check.

// testTarget is a target on a claimed directory of its own, outside a
// hive, and what it logged.
type testTarget struct {
	*target
	c   *claimed
	dir string
	log *strings.Builder
}

func newTestTarget(t *testing.T) *testTarget {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	t.Cleanup(func() { root.Close() })
	require.NoError(t, root.Mkdir(stateDir, 0o700))
	j, err := createJournal(root)
	require.NoError(t, err)
	c := &claimed{root: root, journal: j}
	c.dir.sync = func() error { return syncDir(root, ".") }
	require.NoError(t, c.openDirs())
	t.Cleanup(c.close)
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&logged, nil))
	tgt := &target{dir: &ownedDir{path: dir}, log: log, read: readRegular}
	return &testTarget{target: tgt, c: c, dir: dir, log: &logged}
}

// userFile saves a file of the user's at name, as an editor does.
func (tt *testTarget) userFile(t *testing.T, name, content string) {
	path := filepath.Join(tt.dir, name)
	require.NoError(t, os.WriteFile(path+".new", []byte(content), 0o644))
	require.NoError(t, os.Rename(path+".new", path))
}

func (tt *testTarget) read(t *testing.T, name string) string {
	data, err := os.ReadFile(filepath.Join(tt.dir, name))
	require.NoError(t, err)
	return string(data)
}

// stateNames lists the state directory but for the journal and the lock.
func (tt *testTarget) stateNames(t *testing.T) []string {
	var names []string
	for _, name := range dirNames(t, filepath.Join(tt.dir, stateDir)) {
		if name != "journal.log" && name != "lock" {
			names = append(names, name)
		}
	}
	return names
}

// write writes f as Update does, found as old (nil if missing), and
// returns the error of the write.
func (tt *testTarget) write(name, content string, old *fileState) error {
	return tt.target.write(tt.c, &File{Name: name, Content: content, Mode: defaultMode}, old)
}

func (tt *testTarget) stat(t *testing.T, name string) *fileState {
	st, err := tt.c.stat(inTarget(name))
	require.NoError(t, err)
	return &st
}

// A replacement finds the user's file at the name, not the one checked:
// by exchange where the file system can, and by moving it aside where it
// cannot, it leaves the user's file there, and nothing in the state
// directory.
func TestAReplacementGivesTheUsersFileItsNameBack(t *testing.T) {
	for _, aside := range []bool{false, true} {
		t.Run(map[bool]string{false: "exchange", true: "aside"}[aside], func(t *testing.T) {
			tt := newTestTarget(t)
			require.NoError(t, tt.write("conf", "v1", nil))
			checked := tt.stat(t, "conf")
			tt.userFile(t, "conf", "the user's")

			base, neu, err := writeTemp(tt.c.root, []byte("v2"), 0o644)
			require.NoError(t, err)
			if aside {
				err = tt.replaceAside(tt.c, inState(base), "conf", *checked)
			} else {
				err = tt.replace(tt.c, inState(base), "conf", *checked, neu)
			}
			require.ErrorIs(t, err, errNotOwned)
			require.Equal(t, "the user's", tt.read(t, "conf"))
			// The new file is at its temporary name still, which write
			// removes.
			require.Equal(t, []string{base}, tt.stateNames(t))
			require.NoError(t, tt.c.root.Remove(tt.c.path(inState(base))))

			// And the file checked is replaced when it is still there.
			require.NoError(t, tt.write("other", "v1", nil))
			require.NoError(t, tt.write("other", "v2", tt.stat(t, "other")))
			require.Equal(t, "v2", tt.read(t, "other"))
			entry, _ := tt.c.journal.get("other")
			require.True(t, entry.identifies(tt.stat(t, "other").id))
			require.Empty(t, tt.stateNames(t))
		})
	}
}

// A file moved aside to be removed that turns out not to be the example's
// goes back to its name; if the user took the name meanwhile, it is kept
// in the state directory, and the log says where.
func TestAFileMovedAsideIsPutBackOrKept(t *testing.T) {
	tt := newTestTarget(t)
	tt.userFile(t, "notes", "the user's first")
	aside, err := tt.c.moveAside("notes")
	require.NoError(t, err)
	tt.putBack(tt.c, aside, "notes")
	require.Equal(t, "the user's first", tt.read(t, "notes"))
	require.Empty(t, tt.stateNames(t))

	aside, err = tt.c.moveAside("notes")
	require.NoError(t, err)
	tt.userFile(t, "notes", "the user's second")
	tt.putBack(tt.c, aside, "notes")
	require.Equal(t, "the user's second", tt.read(t, "notes"))
	require.Equal(t, []string{aside.base}, tt.stateNames(t))
	require.Equal(t, "the user's first", tt.read(t, stateDir+"/"+aside.base))
	require.Contains(t, tt.log.String(), "is kept in the state directory")
	require.Contains(t, tt.log.String(), aside.base)
}

// A file written whose directory then fails to sync is still recorded as
// the example's: the write fails, and its retry finds the file its own.
func TestAFailedDirectorySyncKeepsTheRecord(t *testing.T) {
	tt := newTestTarget(t)
	failing := errors.New("sync failed")
	tt.c.dir.sync = func() error { return failing }
	require.ErrorIs(t, tt.write("x", "v1", nil), failing)
	require.Equal(t, "v1", tt.read(t, "x"))
	entry, owned := tt.c.journal.get("x")
	require.True(t, owned)
	st := tt.stat(t, "x")
	require.True(t, tt.ours(tt.c.root, "x", *st, entry), "the example's file is not recognised")

	// A replacement likewise.
	require.ErrorIs(t, tt.write("x", "v2", st), failing)
	require.Equal(t, "v2", tt.read(t, "x"))
	entry, _ = tt.c.journal.get("x")
	require.True(t, tt.ours(tt.c.root, "x", *tt.stat(t, "x"), entry))
}

// Where there is no file handle (a file system without, or a journal of
// an earlier version), the inode number must come with the content the
// example wrote.
func TestWithoutAHandleTheContentMustMatch(t *testing.T) {
	tt := newTestTarget(t)
	require.NoError(t, tt.write("x", "as written", nil))
	entry, _ := tt.c.journal.get("x")
	st := *tt.stat(t, "x")
	entry.ID.Handle, entry.Prev = "", fileID{}
	require.True(t, tt.ours(tt.c.root, "x", st, entry))
	require.NoError(t, os.WriteFile(filepath.Join(tt.dir, "x"), []byte("edited it"), 0o644))
	require.False(t, tt.ours(tt.c.root, "x", *tt.stat(t, "x"), entry), "a weak identity took an edited file for the example's")
}

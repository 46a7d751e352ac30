package main

import (
	"crypto/sha256"
	"io/fs"
	"os"
)

// fileReader reads a file of the target directory for the drift check.
// The default is (*os.Root).ReadFile; tests provide one that fails, as
// reading a file of mode 0000 or 0200 fails for a user other than root.
type fileReader func(root *os.Root, name string) ([]byte, error)

// drifted describes how the file on disk differs from f, or returns "" if
// it does not. info is the file's Lstat and entry the journal's record of
// the example's last write of it.
//
// Reading is the last resort: a file whose size, mode and modification
// time are those the example recorded after writing the content f wants is
// unchanged. Only a file that changed since is read, and one that cannot be
// read is rewritten rather than counted as a failure: the example owns it,
// and a write needs no read permission.
func (t *target) drifted(root *os.Root, f *File, info fs.FileInfo, entry journalEntry) string {
	switch {
	case !info.Mode().IsRegular():
		return "not a regular file"
	case info.Size() != int64(len(f.Content)):
		return "size"
	case info.Mode().Perm() != fs.FileMode(f.Mode):
		return "mode"
	}
	want := digest([]byte(f.Content))
	if entry.SHA256 == want && entry.Size == info.Size() && entry.ModTime.Equal(info.ModTime()) {
		return ""
	}
	data, err := t.read(root, f.Name)
	switch {
	case err != nil:
		return "changed since written and unreadable: " + err.Error()
	case digest(data) != want:
		return "content"
	}
	return ""
}

// digest is the SHA-256 of data, as kept in the journal.
func digest(data []byte) [sha256.Size]byte { return sha256.Sum256(data) }

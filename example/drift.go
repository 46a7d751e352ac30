package main

import (
	"crypto/sha256"
	"io/fs"
	"os"
)

// drifted describes how the file on disk differs from f, or returns "" if
// it does not. st is the file at f's name and entry the journal's record
// of the example's last write of it.
//
// Reading is the last resort: a file whose size, mode and modification
// time are those the example recorded after writing the content f wants is
// unchanged. Only a file that changed since is read, and one that cannot be
// read is rewritten rather than counted as a failure: the example owns it,
// and a write needs no read permission. A file read that is not st (it
// was replaced meanwhile) is a difference too: the write that repairs it
// replaces st only.
func (t *target) drifted(root *os.Root, f *File, st fileState, entry journalEntry) string {
	info := st.info
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
	data, id, err := t.read(root, f.Name)
	switch {
	case err != nil:
		return "changed since written and unreadable: " + err.Error()
	case st.id.Ino != 0 && !sameFile(id, st.id):
		return "replaced while read"
	case digest(data) != want:
		return "content"
	}
	return ""
}

// digest is the SHA-256 of data, as kept in the journal.
func digest(data []byte) [sha256.Size]byte { return sha256.Sum256(data) }

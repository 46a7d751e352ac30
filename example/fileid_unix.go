//go:build unix

package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// openNoFollowNoBlock opens a file without following a symbolic link at
// its name, and without waiting for the writer of a named pipe.
const openNoFollowNoBlock = syscall.O_NOFOLLOW | syscall.O_NONBLOCK

// idOf returns the identity of the file info describes: its device and
// inode numbers.
func idOf(info fs.FileInfo) fileID {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}
	}
	return fileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}
}

// checkPrivate refuses a directory or file that another user could
// change: one owned by a user other than the one running the example, or
// writable by its group or by others, as ssh refuses such files of
// ~/.ssh. what names it in the error, which says why; fix, if not empty,
// says what to do.
func checkPrivate(what string, info fs.FileInfo, fix string) error {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if fix != "" {
		fix = "; " + fix
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return &refusedError{fmt.Sprintf("%s is owned by uid %d, not by the user running the example (uid %d): "+
			"another user may have created it to read or change what the example writes%s", what, st.Uid, uid, fix)}
	}
	if perm := info.Mode().Perm(); perm&0o022 != 0 {
		if fix != "" {
			fix = "; run chmod go-w on it, or" + strings.TrimPrefix(fix, ";")
		}
		return &refusedError{fmt.Sprintf("%s can be written by other users (mode %s): "+
			"they could change what the example writes%s", what, perm, fix)}
	}
	return nil
}

// ownedByUser reports whether info is of a file owned by the user running
// the example.
func ownedByUser(info fs.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

// othersCanRead reports whether a user other than the owner could read
// the file whose info is file, in the directory whose info is dir: by the
// group's permissions or by everyone's.
func othersCanRead(dir, file fs.FileInfo) bool {
	d, f := dir.Mode().Perm(), file.Mode().Perm()
	return d&0o010 != 0 && f&0o040 != 0 || d&0o001 != 0 && f&0o004 != 0
}

// privateMode0600 reports whether info, the token's, has mode 0600.
func privateMode0600(info fs.FileInfo) bool { return info.Mode().Perm() == 0o600 }

// privateMode reports whether info, the state directory's, has mode 0700:
// only the user can list it and read the token in it.
func privateMode(info fs.FileInfo) bool { return info.Mode().Perm() == 0o700 }

// checkParent refuses the parent of the target directory, whose info is
// given, if a user other than the one running the example could move the
// directory away or put another in its place: a parent owned by another
// user (root excepted: root can do that anyway), or one its group or
// others can write unless it is sticky (as /tmp is: there only the owner
// of an entry may rename or remove it). what names the directory in the
// error, parent its parent.
func checkParent(what, parent string, info fs.FileInfo) error {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if uid := os.Geteuid(); int(st.Uid) != uid && st.Uid != 0 {
		return &refusedError{fmt.Sprintf("%s: its parent %s is owned by uid %d, neither the user running the example (uid %d) nor root: "+
			"that user can move the directory away or put another in its place; choose another --dir", what, parent, st.Uid, uid)}
	}
	if perm := info.Mode().Perm(); perm&0o022 != 0 && info.Mode()&fs.ModeSticky == 0 {
		return &refusedError{fmt.Sprintf("%s: its parent %s can be written by other users (mode %s) and is not sticky: "+
			"they can move the directory away or put another in its place; run chmod go-w (or chmod +t) on it, or choose another --dir", what, parent, perm)}
	}
	return nil
}

// checkLinks refuses a path one of whose components is a symbolic link
// another user (root excepted) owns: that user can point it elsewhere at
// any time, so that the example, or a command that follows the path,
// writes where they choose.
func checkLinks(what, path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil // the checks that follow report it
	}
	uid := os.Geteuid()
	for p := abs; ; p = filepath.Dir(p) {
		if info, err := os.Lstat(p); err == nil && info.Mode()&fs.ModeSymlink != 0 {
			if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) != uid && st.Uid != 0 {
				return &refusedError{fmt.Sprintf("%s: %s is a symbolic link owned by uid %d, neither the user running the example (uid %d) nor root: "+
					"that user can point it elsewhere and choose where the example writes; choose another --dir", what, p, st.Uid, uid)}
			}
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

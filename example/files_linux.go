package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// On Linux a file is identified by its file handle as well as its inode
// number: the handle (name_to_handle_at, as NFS uses) holds the inode's
// generation, which changes when a freed inode number is given to a new
// file, so a file the user creates after removing the example's is not
// taken for it. Renames that must not replace a file use renameat2.

// stat returns what is at l, without following a symbolic link: its
// FileInfo and its identity, both of one file. It needs no permission on
// the file itself.
func (c *claimed) stat(l loc) (fileState, error) {
	fd, err := unix.Openat(c.fd(l), l.base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fileState{}, &fs.PathError{Op: "lstat", Path: c.path(l), Err: err}
	}
	f := os.NewFile(uintptr(fd), l.base)
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fileState{}, err
	}
	return fileState{info: info, id: withHandle(fd, idOf(info))}, nil
}

// idOfFile returns the identity of the open file f, info its Stat.
func idOfFile(f *os.File, info fs.FileInfo) fileID {
	id := idOf(info)
	if conn, err := f.SyscallConn(); err == nil {
		conn.Control(func(fd uintptr) { id = withHandle(int(fd), id) })
	}
	return id
}

// withHandle adds to id the file handle of fd, if its file system gives
// one.
func withHandle(fd int, id fileID) fileID {
	h, _, err := unix.NameToHandleAt(fd, "", unix.AT_EMPTY_PATH)
	if err == nil && h.Size() > 0 {
		id.Handle = fmt.Sprintf("%x:%x", h.Type(), h.Bytes())
	}
	return id
}

// exchange swaps the files at a and b atomically (renameat2
// RENAME_EXCHANGE). It fails with errNoExchange where the file system
// cannot.
func (c *claimed) exchange(a, b loc) error {
	err := unix.Renameat2(c.fd(a), a.base, c.fd(b), b.base, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
		return errNoExchange
	}
	if err != nil {
		return &os.LinkError{Op: "exchange", Old: c.path(a), New: c.path(b), Err: err}
	}
	return nil
}

// renameNoReplace renames a to b unless b exists: then it fails with an
// error that is fs.ErrExist, and changes nothing.
func (c *claimed) renameNoReplace(a, b loc) error {
	err := unix.Renameat2(c.fd(a), a.base, c.fd(b), b.base, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// The file system cannot: a link fails if b exists.
		if err = unix.Linkat(c.fd(a), a.base, c.fd(b), b.base, 0); err == nil {
			err = unix.Unlinkat(c.fd(a), a.base, 0)
		}
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: c.path(a), New: c.path(b), Err: err}
	}
	return nil
}

// fd returns the descriptor of the directory l is in.
func (c *claimed) fd(l loc) int {
	if l.state {
		return int(c.stateFile.Fd())
	}
	return int(c.dirFile.Fd())
}

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// lockPath is the lock file, inside the target directory. An example
// holds an exclusive lock on it while it uses the directory, taken before
// it writes anything there, so that a second example started on the same
// directory is refused instead of replacing the first one's token and
// compacting the journal under it.
const lockPath = stateDir + "/lock"

// errLocked is returned by lockFile when another process holds the lock.
var errLocked = errors.New("the lock is held by another process")

// dirLock is the lock on a directory's lockPath, held until closed.
type dirLock struct {
	file *os.File
	info fs.FileInfo // the lock file's, to recognise it
}

// takeLock opens, creating it if it is missing, the lock file of root,
// whose state directory exists, and locks it. It fails with errLocked if
// another example holds it, and refuses a lock file that is not a regular
// file of the user's.
func takeLock(root *os.Root) (*dirLock, error) {
	file, err := root.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	info, err := file.Stat()
	switch {
	case err != nil:
	case !info.Mode().IsRegular():
		err = &refusedError{lockPath + " is not a regular file"}
	default:
		err = checkPrivate(lockPath, info, "")
	}
	if err == nil {
		err = lockFile(file)
	}
	if err != nil {
		file.Close()
		return nil, err
	}
	return &dirLock{file: file, info: info}, nil
}

// holds reports whether l is the lock on the lock file of root.
func (l *dirLock) holds(root *os.Root) bool {
	info, err := root.Lstat(lockPath)
	return l != nil && err == nil && os.SameFile(info, l.info)
}

// close releases the lock.
func (l *dirLock) close() {
	if l != nil {
		l.file.Close()
	}
}

// lock takes the lock of root, the directory being claimed, for d, unless
// d holds it already (the directory is claimed again), and releases the
// lock d held on another directory.
func (d *ownedDir) lock(root *os.Root) error {
	if d.held.holds(root) {
		return nil
	}
	l, err := takeLock(root)
	if errors.Is(err, errLocked) {
		return &refusedError{fmt.Sprintf("%s is in use by another converge example (it holds %s): stop that one, or choose another --dir", d.label(), lockPath)}
	}
	if err != nil {
		return fmt.Errorf("%s: locking it: %w", d.label(), err)
	}
	d.held.close()
	d.held = l
	return nil
}

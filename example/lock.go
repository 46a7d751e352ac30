package main

import (
	"errors"
	"fmt"
	"os"
)

// lockPath is the lock file, inside the target directory. An example
// holds an exclusive lock on the directory itself and on this file while
// it uses the directory, taken before it writes anything there, so that a
// second example started on the same directory is refused instead of
// replacing the first one's token and compacting the journal under it.
// The lock on the directory's own descriptor is what counts: a lock file
// can be removed (by someone cleaning up what looks like a stale file)
// and a new one created and locked, but the directory cannot be swapped
// from under an open descriptor. The lock file stays for examples of
// earlier versions, which lock only it.
const lockPath = stateDir + "/lock"

// errLocked is returned by lockFile when another process holds the lock.
var errLocked = errors.New("the lock is held by another process")

// dirLock is the lock on a directory and its lockPath, held until closed.
type dirLock struct {
	dir  *os.File // the directory, locked
	id   fileID   // its identity, to recognise it
	file *os.File // its lock file, locked
}

// takeLock locks the directory root opens, and its lock file, opening it
// and creating it if it is missing (the state directory exists). It fails
// with errLocked if another example holds either, and refuses a lock file
// that is not a regular file of the user's.
func takeLock(root *os.Root) (*dirLock, error) {
	dir, err := root.Open(".")
	if err != nil {
		return nil, err
	}
	info, err := dir.Stat()
	if err == nil {
		err = lockFile(dir)
	}
	if err != nil {
		dir.Close()
		return nil, err
	}
	l := &dirLock{dir: dir, id: idOfFile(dir, info)}
	if l.file, err = root.OpenFile(lockPath, os.O_RDWR|os.O_CREATE|openNoFollowNoBlock, 0o600); err != nil {
		l.close()
		return nil, err
	}
	info, err = l.file.Stat()
	switch {
	case err != nil:
	case !info.Mode().IsRegular():
		err = &refusedError{lockPath + " is not a regular file"}
	default:
		err = checkPrivate(lockPath, info, "")
	}
	if err == nil {
		err = lockFile(l.file)
	}
	if err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

// holds reports whether l is the lock on the directory root opens. Only
// the directory is compared: this process's own lock on it is held, and
// a second lock on it would fail, whatever became of the lock file.
func (l *dirLock) holds(root *os.Root) bool {
	if l == nil {
		return false
	}
	dir, err := root.Open(".")
	if err != nil {
		return false
	}
	defer dir.Close()
	info, err := dir.Stat()
	return err == nil && sameFile(idOfFile(dir, info), l.id)
}

// close releases the lock.
func (l *dirLock) close() {
	if l != nil {
		l.dir.Close()
		if l.file != nil {
			l.file.Close()
		}
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
		return &refusedError{fmt.Sprintf("%s is in use by another converge example (it holds a lock on the directory): stop that one, or choose another --dir", d.label())}
	}
	if err != nil {
		return fmt.Errorf("%s: locking it: %w", d.label(), err)
	}
	d.held.close()
	d.held = l
	return nil
}

package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
)

// writeTemp writes data to a new temporary file in the state directory,
// with mode, synced and closed, ready to be renamed into place. It returns
// the file's name in the state directory (tmpPrefix and a random suffix)
// and what it is. On failure nothing is left behind.
func writeTemp(root *os.Root, data []byte, mode fs.FileMode) (string, fileState, error) {
	return writeTempWith(root, data, mode, finishTemp)
}

// writeTempWith is writeTemp with finish writing the data to the file
// created, so that a test can make that fail.
func writeTempWith(root *os.Root, data []byte, mode fs.FileMode, finish func(*os.File, []byte, fs.FileMode) (fileState, error)) (string, fileState, error) {
	base := randomName(tmpPrefix)
	name := stateDir + "/" + base
	out, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return "", fileState{}, err
	}
	st, err := finish(out, data, mode)
	if err != nil {
		out.Close()
		if removeErr := root.Remove(name); removeErr != nil && !errors.Is(removeErr, fs.ErrNotExist) {
			err = errors.Join(err, removeErr)
		}
		return "", fileState{}, err
	}
	return base, st, nil
}

// randomName returns prefix followed by 16 random hex digits.
func randomName(prefix string) string {
	var suffix [8]byte
	rand.Read(suffix[:])
	return prefix + hex.EncodeToString(suffix[:])
}

// finishTemp writes data to out, sets its mode, syncs and closes it.
func finishTemp(out *os.File, data []byte, mode fs.FileMode) (fileState, error) {
	if _, err := out.Write(data); err != nil {
		return fileState{}, err
	}
	// Chmod because the mode given to OpenFile is reduced by the umask.
	if err := out.Chmod(mode); err != nil {
		return fileState{}, err
	}
	if err := out.Sync(); err != nil {
		return fileState{}, err
	}
	info, err := out.Stat()
	if err != nil {
		return fileState{}, err
	}
	st := fileState{info: info, id: idOfFile(out, info)}
	return st, out.Close()
}

// fileState is a file as the example saw it: its FileInfo and identity.
type fileState struct {
	info fs.FileInfo
	id   fileID
}

// loc is a name in the target directory, or in its state directory.
type loc struct {
	state bool   // in the state directory
	base  string // a name, without "/"
}

func inTarget(name string) loc { return loc{base: name} }
func inState(name string) loc  { return loc{state: true, base: name} }

// path returns l's path relative to the target directory, for os.Root.
func (c *claimed) path(l loc) string {
	if l.state {
		return stateDir + "/" + l.base
	}
	return l.base
}

// errNoExchange is returned by claimed.exchange where the file system
// cannot swap two files.
var errNoExchange = errors.New("the file system cannot exchange two files")

// syncDir syncs the directory name of root, so that the names created,
// renamed or removed in it are on disk.
func syncDir(root *os.Root, name string) error {
	dir, err := root.Open(name)
	if err != nil {
		return err
	}
	err = dir.Sync()
	if closeErr := dir.Close(); err == nil {
		err = closeErr
	}
	return err
}

// groupSync syncs a directory for many goroutines at once. Each calls
// sync after changing a name in it; one fsync covers every change made
// before it starts, so writers that arrive while one runs share the next.
// The zero value is not usable: set sync.
type groupSync struct {
	sync func() error

	changes atomic.Uint64 // changes made
	mu      sync.Mutex    // held during an fsync
	synced  uint64        // changes known to be on disk
}

// wait returns once the caller's change, made before the call, is on disk.
func (g *groupSync) wait() error {
	seq := g.changes.Add(1)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.synced >= seq {
		return nil
	}
	upto := g.changes.Load()
	if err := g.sync(); err != nil {
		return err
	}
	g.synced = upto
	return nil
}

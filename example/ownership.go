package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cilium/hive/cell"
)

// The example keeps a record of what it owns in a directory of its own
// inside the target, the way Cilium's route reconciler records the routes
// it installed: it writes, repairs, deletes and prunes only the files listed
// there, so files someone else put in the directory are never touched.
const (
	// stateDir holds the journal and the temporary files of atomic writes.
	// Its presence marks a directory the example created or adopted.
	stateDir = ".converge-example"
	// journalPath is the journal: the files the example wrote.
	journalPath = stateDir + "/journal.json"
	// tmpPrefix starts the names of temporary files, inside stateDir.
	tmpPrefix = "tmp-"
	// journalOwner identifies our journal among other tools' files.
	journalOwner = "converge example"
)

// journal is the ownership record, stored as JSON in journalPath.
type journal struct {
	Owner string                  `json:"owner"`
	Files map[string]journalEntry `json:"files"`
}

// journalEntry describes a file as the example last wrote it. Size, mode
// and modification time let the drift check tell an unchanged file without
// reading it; the digest is that of the content written.
type journalEntry struct {
	Size    int64     `json:"size"`
	Mode    Mode      `json:"mode"`
	ModTime time.Time `json:"mtime"`
	SHA256  string    `json:"sha256"`
}

// refusedError is a target directory the example will not use. At start,
// it fails the start with a usage error (exit status 2); later, the
// operation that met it.
type refusedError struct{ msg string }

func (e *refusedError) Error() string { return e.msg }

// ownedDir is the target directory and its ownership journal. Every use
// opens the directory afresh (see open), so no name can reach outside it,
// a symlink at its path is refused rather than followed, and a directory
// that was removed or replaced is seen as it is now.
type ownedDir struct {
	path  string
	adopt bool
	log   *slog.Logger

	mu      sync.Mutex
	seen    fs.FileInfo // the directory the journal belongs to
	journal journal
}

// newOwnedDir claims the target directory in a start hook, which fails the
// start if the directory is not the example's to use. Any failure then is
// about --dir (a usage error, exit status 2): the directory is refused, or
// cannot be created or opened.
func newOwnedDir(lc cell.Lifecycle, cfg config, log *slog.Logger) *ownedDir {
	d := &ownedDir{path: cfg.Dir, adopt: cfg.Adopt, log: log}
	lc.Append(cell.Hook{OnStart: func(cell.HookContext) error {
		root, err := d.open()
		if err != nil {
			return refuse("dir", err)
		}
		return root.Close()
	}})
	return d
}

// open returns the target directory as an os.Root. A missing directory is
// created (it is part of the desired state). A directory not seen before
// is claimed: an empty one, or one holding the example's journal, is
// taken; a non-empty one without the journal only with --adopt. A symbolic
// link is refused.
func (d *ownedDir) open() (*os.Root, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	info, err := os.Lstat(d.path)
	if errors.Is(err, fs.ErrNotExist) {
		// Mkdir, not MkdirAll, for the directory itself: one that appears
		// meanwhile is not mistaken for a directory the example created.
		if err = os.MkdirAll(filepath.Dir(d.path), 0o755); err == nil {
			if err = os.Mkdir(d.path, 0o755); errors.Is(err, fs.ErrExist) {
				err = nil
			}
		}
		if err == nil {
			info, err = os.Lstat(d.path)
		}
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("target directory: %w", err)
	case info.Mode()&fs.ModeSymlink != 0:
		return nil, &refusedError{fmt.Sprintf("target directory %s is a symbolic link: the example does not follow one; give the directory's own path", d.path)}
	case !info.IsDir():
		return nil, fmt.Errorf("target directory %s is not a directory; choose another --dir", d.path)
	}
	root, err := os.OpenRoot(d.path)
	if err != nil {
		return nil, fmt.Errorf("target directory: %w", err)
	}
	opened, err := root.Stat(".")
	if err == nil && !os.SameFile(info, opened) {
		err = fmt.Errorf("target directory %s changed while being opened", d.path)
	}
	if err == nil && !d.known(root, opened) {
		err = d.claim(root)
	}
	if err != nil {
		root.Close()
		return nil, err
	}
	d.seen = opened
	return root, nil
}

// known reports whether the directory is the one claimed last and still
// has its state directory. Checking the state directory too catches a
// directory that was replaced by a new one with a reused inode number.
func (d *ownedDir) known(root *os.Root, opened fs.FileInfo) bool {
	if d.seen == nil || !os.SameFile(d.seen, opened) {
		return false
	}
	info, err := root.Lstat(stateDir)
	return err == nil && info.IsDir()
}

// claim takes a directory not seen before: it loads its journal, or
// creates one if the directory is empty or adopted, and removes temporary
// files left by an interrupted write.
func (d *ownedDir) claim(root *os.Root) error {
	info, err := root.Lstat(stateDir)
	switch {
	case err == nil && !info.IsDir():
		return &refusedError{fmt.Sprintf("target directory %s: %s is not the example's state directory; remove it or choose another --dir", d.path, stateDir)}
	case err == nil:
		j, err := loadJournal(root)
		if err != nil {
			return &refusedError{fmt.Sprintf("target directory %s: %v; remove %s or choose another --dir", d.path, err, stateDir)}
		}
		d.journal = j
		d.log.Info("Using a directory the example owns", "directory", d.path, "files", len(j.Files))
	case errors.Is(err, fs.ErrNotExist):
		names, err := readDirNames(root, ".")
		if err != nil {
			return fmt.Errorf("target directory %s: %w", d.path, err)
		}
		if len(names) > 0 && !d.adopt {
			return &refusedError{fmt.Sprintf("target directory %s is not empty and the example did not create it (it has no %s/): "+
				"choose another --dir, or pass --adopt to let the example add its files there (it never changes or removes the others)", d.path, stateDir)}
		}
		if err := root.Mkdir(stateDir, 0o700); err != nil {
			return fmt.Errorf("target directory %s: %w", d.path, err)
		}
		d.journal = journal{Owner: journalOwner, Files: map[string]journalEntry{}}
		if err := d.save(root); err != nil {
			return err
		}
		if len(names) > 0 {
			d.log.Info("Adopted a directory; its existing files are left alone", "directory", d.path, "existing", len(names))
		}
	default:
		return fmt.Errorf("target directory %s: %w", d.path, err)
	}
	return removeTemporaries(root)
}

func loadJournal(root *os.Root) (journal, error) {
	var j journal
	data, err := root.ReadFile(journalPath)
	if err != nil {
		return j, fmt.Errorf("reading the ownership journal: %w", err)
	}
	if err := json.Unmarshal(data, &j); err != nil || j.Owner != journalOwner {
		return j, fmt.Errorf("%s is not the example's ownership journal", journalPath)
	}
	if j.Files == nil {
		j.Files = map[string]journalEntry{}
	}
	for name := range j.Files {
		if err := validateName(name); err != nil {
			return j, fmt.Errorf("%s: %w", journalPath, err)
		}
	}
	return j, nil
}

// save writes the journal atomically.
func (d *ownedDir) save(root *os.Root) error {
	data, err := json.MarshalIndent(d.journal, "", "  ")
	if err != nil {
		return err
	}
	tmp, _, err := writeTemp(root, data, 0o600)
	if err != nil {
		return fmt.Errorf("writing the ownership journal: %w", err)
	}
	if err := root.Rename(tmp, journalPath); err != nil {
		root.Remove(tmp)
		return fmt.Errorf("writing the ownership journal: %w", err)
	}
	return nil
}

// owned returns the journal's entry for name, if the example wrote it.
func (d *ownedDir) owned(name string) (journalEntry, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.journal.Files[name]
	return e, ok
}

// ownedNames returns the names of every file the example wrote.
func (d *ownedDir) ownedNames() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	names := make([]string, 0, len(d.journal.Files))
	for name := range d.journal.Files {
		names = append(names, name)
	}
	return names
}

// record sets (entry non-nil) or removes name's entry and saves the
// journal; if the save fails, the entry is left as it was. It returns the
// previous entry, for undoing.
func (d *ownedDir) record(root *os.Root, name string, entry *journalEntry) (prev *journalEntry, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok := d.journal.Files[name]; ok {
		prev = &old
	}
	set := func(e *journalEntry) {
		if e == nil {
			delete(d.journal.Files, name)
		} else {
			d.journal.Files[name] = *e
		}
	}
	set(entry)
	if err := d.save(root); err != nil {
		set(prev)
		return prev, err
	}
	return prev, nil
}

// removeTemporaries removes temporary files left in the state directory by
// an interrupted write. Only the state directory is looked at.
func removeTemporaries(root *os.Root) error {
	names, err := readDirNames(root, stateDir)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		if strings.HasPrefix(name, tmpPrefix) {
			if err := root.Remove(stateDir + "/" + name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func readDirNames(root *os.Root, name string) ([]string, error) {
	dir, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	return dir.Readdirnames(-1)
}

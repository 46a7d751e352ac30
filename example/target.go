package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// target implements reconciler.Operations[*File] on the target directory.
// It writes, deletes and prunes only files its ownership journal lists (see
// ownedDir): a file of the directory that the example did not write is
// never changed or removed, and a desired file whose name is taken by one
// fails with an error until the name is freed. The reconciler calls the
// operations one at a time.
type target struct {
	dir       *ownedDir
	log       *slog.Logger
	read      fileReader
	templates statedb.Table[*Template]
	limiter   logLimiter // for problems a retry meets again and again
}

var _ reconciler.Operations[*File] = (*target)(nil)

type targetParams struct {
	cell.In

	Dir       *ownedDir
	Log       *slog.Logger
	Templates statedb.RWTable[*Template]
	Read      fileReader `optional:"true"` // tests simulate unreadable files with it
}

func newTarget(p targetParams) *target {
	t := &target{dir: p.Dir, log: p.Log, read: p.Read, templates: p.Templates, limiter: logLimiter{every: time.Minute, now: time.Now}}
	if t.read == nil {
		t.read = (*os.Root).ReadFile
	}
	return t
}

// errNotOwned is wrapped by the error of an Update whose name is taken by
// a file the example did not write.
var errNotOwned = errors.New("exists and the example did not write it: remove it or use another name")

// errDirInTheWay is wrapped by the error of an Update of a file the example
// wrote whose name a directory took since.
var errDirInTheWay = errors.New("a directory is in the way: remove it and the file will be written")

// Update writes the file atomically: a temporary file in the state
// directory is written, synced, recorded in the journal and then renamed
// (or, for a new name, linked) into place, so a reader sees either the old
// or the new content, never a partial one. A file with a template is
// rendered from the template as of txn.
//
// When the reconciler refreshes the file (its status is Refreshing: the
// periodic refresh, or the dependency after its template changed), Update
// writes only if the file should change. If the example last wrote what is
// wanted now, a difference on disk is drift: it is repaired and reported
// with reconciler.ReportRepaired, as is a missing file restored. If what
// is wanted changed since (a new template), the write is an ordinary
// update, not drift. The log says which of these happened.
func (t *target) Update(ctx context.Context, txn statedb.ReadTxn, _ statedb.Revision, f *File) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	content, err := render(txn, t.templates, f)
	if err == nil {
		want := f.Clone() // f is stored with its Done status: keep its own content
		want.Content = content
		err = t.update(ctx, want, f.Status.Kind == status.KindRefreshing)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", f.Name, err)
	}
	return nil
}

// update writes f, whose content is the one to write. If refreshing, it
// first checks whether the file on disk needs it.
func (t *target) update(ctx context.Context, f *File, refreshing bool) error {
	root, err := t.dir.open()
	if err != nil {
		return err
	}
	defer root.Close()
	entry, owned := t.dir.owned(f.Name)
	info, err := root.Lstat(f.Name)
	exists := err == nil
	switch {
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return err
	case exists && !owned:
		return errNotOwned
	case exists && info.IsDir():
		// The example wrote a file here, and someone put a directory in
		// its place. It is not the example's to remove: fail, and say
		// once in a while what to do, until the directory is gone.
		t.logLimited(f.Name, slog.LevelWarn, "A directory is in the way of a file; remove the directory and the file will be written",
			"name", f.Name, "directory", filepath.Join(t.dir.path, f.Name))
		return errDirInTheWay
	}
	if !refreshing {
		err = t.write(root, f, exists)
	} else {
		// Say what the refresh found: the example last wrote other content
		// or another mode than is wanted now (a template changed), or the
		// file is missing (removed, or the directory recreated, which
		// leaves the journal without it), or it changed on disk.
		var repaired bool
		repaired, err = t.refresh(root, f, info, exists, entry, owned)
		if err == nil && repaired {
			reconciler.ReportRepaired(ctx, 1)
		}
	}
	if err == nil {
		t.forgetLimited(f.Name) // a later fault is reported at once
	}
	return err
}

// refresh writes f if it needs it, logging why, and reports whether it
// repaired drift. info and exists are f's Lstat; entry and owned its
// record in the journal (a file that exists is owned). A change of what is
// wanted is not drift, even if the file is also missing; a missing file the
// journal does not list (the directory was recreated) is.
func (t *target) refresh(root *os.Root, f *File, info fs.FileInfo, exists bool, entry journalEntry, owned bool) (repaired bool, err error) {
	switch {
	case owned && entry.SHA256 != digest([]byte(f.Content)):
		t.log.Info("Rewriting a file whose desired content changed", "name", f.Name, "template", f.Template)
		return false, t.write(root, f, exists)
	case owned && entry.Mode != f.Mode:
		t.log.Info("Rewriting a file whose desired mode changed", "name", f.Name, "mode", f.Mode)
		return false, t.write(root, f, exists)
	case !exists:
		t.log.Info("Restoring a missing file", "name", f.Name, "template", f.Template)
		return true, t.write(root, f, false)
	}
	drift := t.drifted(root, f, info, entry)
	if drift == "" {
		return false, nil
	}
	t.log.Info("Repairing drifted file", "name", f.Name, "drift", drift)
	return true, t.write(root, f, true)
}

// write writes f's content to its name, replacing the existing file if
// replace is set. The journal records the file before it takes the name,
// so an interruption never leaves a file of the example unrecorded.
func (t *target) write(root *os.Root, f *File, replace bool) error {
	tmp, info, err := writeTemp(root, []byte(f.Content), fs.FileMode(f.Mode))
	if err != nil {
		return err
	}
	defer root.Remove(tmp) // left over after a link, or after a failure
	entry := journalEntry{Size: info.Size(), Mode: f.Mode, ModTime: info.ModTime(), SHA256: digest([]byte(f.Content))}
	prev, err := t.dir.record(root, f.Name, &entry)
	if err != nil {
		return err
	}
	if replace {
		err = root.Rename(tmp, f.Name)
	} else if err = root.Link(tmp, f.Name); errors.Is(err, fs.ErrExist) {
		err = errNotOwned // it appeared since the check
	} else if err != nil {
		err = root.Rename(tmp, f.Name) // a file system without hard links
	}
	if err != nil {
		if _, undoErr := t.dir.record(root, f.Name, prev); undoErr != nil {
			t.log.Warn("Could not undo a journal entry", "name", f.Name, "error", undoErr)
		}
	}
	return err
}

// Delete removes the file if the example wrote it. A file that is already
// gone, or that the example did not write, is not an error.
func (t *target) Delete(ctx context.Context, _ statedb.ReadTxn, _ statedb.Revision, f *File) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	root, err := t.dir.open()
	if err != nil {
		return fmt.Errorf("remove %s: %w", f.Name, err)
	}
	defer root.Close()
	if _, owned := t.dir.owned(f.Name); !owned {
		return nil
	}
	_, err = t.remove(root, f.Name)
	return err
}

// remove removes a file the example owns and forgets it, and reports
// whether a file was removed. A directory in its place is not the
// example's and is left alone.
func (t *target) remove(root *os.Root, name string) (removed bool, err error) {
	info, err := root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return false, fmt.Errorf("remove %s: %w", name, err)
	case info.IsDir():
		t.log.Warn("Not removing a directory that took the place of a file", "name", name)
	default:
		switch err := root.Remove(name); {
		case err == nil:
			removed = true
		case !errors.Is(err, fs.ErrNotExist):
			return false, fmt.Errorf("remove %s: %w", name, err)
		}
	}
	if _, err := t.dir.record(root, name, nil); err != nil {
		return removed, fmt.Errorf("remove %s: %w", name, err)
	}
	return removed, nil
}

// Prune removes the files the example wrote that are no longer desired,
// and temporary files left by an interrupted write, and reports the files
// it removed as drift repaired. It does not list the directory: files the
// journal does not name are not the example's.
func (t *target) Prune(ctx context.Context, _ statedb.ReadTxn, objects iter.Seq2[*File, statedb.Revision]) error {
	root, err := t.dir.open()
	if err != nil {
		return err
	}
	defer root.Close()
	want := map[string]bool{}
	for f := range objects {
		want[f.Name] = true
	}
	owned := t.dir.ownedNames()
	slices.Sort(owned)
	var errs []error
	for _, name := range owned {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !want[name] {
			t.log.Info("Pruning a file no longer desired", "name", name)
			removed, err := t.remove(root, name)
			if removed {
				reconciler.ReportRepaired(ctx, 1)
			}
			errs = append(errs, err)
		}
	}
	errs = append(errs, removeTemporaries(root))
	return errors.Join(errs...)
}

// logLimited logs msg about the file name unless the same message was
// logged for it within the last minute: a retry meets the same problem
// every few seconds, and one line says it.
func (t *target) logLimited(name string, level slog.Level, msg string, args ...any) {
	if t.limiter.allow(name, msg) {
		t.log.Log(context.Background(), level, msg, args...)
	}
}

// forgetLimited forgets the messages logged for name, once it is fine.
func (t *target) forgetLimited(name string) { t.limiter.forget(name) }

// logLimiter allows a message per key at most once every interval. now is
// the clock, replaced in tests.
type logLimiter struct {
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	last map[string]map[string]time.Time // key, message: when last allowed
}

// allow reports whether msg may be logged for key now, and if so records
// it.
func (l *logLimiter) allow(key, msg string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if last, ok := l.last[key][msg]; ok && now.Sub(last) < l.every {
		return false
	}
	if l.last == nil {
		l.last = map[string]map[string]time.Time{}
	}
	if l.last[key] == nil {
		l.last[key] = map[string]time.Time{}
	}
	l.last[key][msg] = now
	return true
}

// forget lets every message for key be logged again at once.
func (l *logLimiter) forget(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.last, key)
}

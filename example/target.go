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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// target implements reconciler.Operations[*File] on the target directory.
// It writes, deletes and prunes only files its ownership journal lists (see
// ownedDir and journal), and only if the file at the name is still the one
// it wrote: a file of the directory that the example did not write is
// never changed or removed, and a desired file whose name is taken by one
// fails with an error until the name is freed.
//
// The reconciler calls Update and Delete on several workers, never two at
// once for one file; a prune waits for those under way to finish, and
// holds new ones back until it is done.
type target struct {
	dir       *ownedDir
	log       *slog.Logger
	read      fileReader
	templates statedb.Table[*Template]
	limiter   logLimiter   // for problems a retry meets again and again
	ops       sync.RWMutex // held for reading by Update and Delete, for writing by Prune
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
// (or, for a new name, linked) into place, and the directory synced, so a
// reader sees either the old or the new content, never a partial one, and
// a crash loses neither the file nor its record. A file with a template
// is rendered from the template as of txn.
//
// When the reconciler refreshes the file (its status is Refreshing: the
// periodic refresh, or the dependency after its template changed), Update
// writes only if the file should change. If the example last wrote what is
// wanted now, a difference on disk is drift: it is repaired and reported
// with reconciler.ReportRepaired, as is a file the example wrote that went
// missing. If what is wanted changed since (a new template), or the file
// was never written (its template has just been defined), the write is an
// ordinary update, not drift. The log says which of these happened.
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
	t.ops.RLock()
	defer t.ops.RUnlock()
	c, err := t.dir.acquire()
	if err != nil {
		return err
	}
	defer t.dir.release(c)
	entry, owned := c.journal.get(f.Name)
	info, err := c.root.Lstat(f.Name)
	exists := err == nil
	switch {
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return err
	case exists && owned && info.IsDir():
		// The example wrote a file here, and someone put a directory in
		// its place. It is not the example's to remove: fail, and say
		// once in a while what to do, until the directory is gone.
		t.logLimited(f.Name, slog.LevelWarn, "A directory is in the way of a file; remove the directory and the file will be written",
			"name", f.Name, "directory", filepath.Join(t.dir.path, f.Name))
		return errDirInTheWay
	case exists && !(owned && t.ours(c.root, f.Name, info, entry)):
		return errNotOwned
	}
	if !refreshing {
		if !(owned && exists && t.asWanted(c.root, f, info, entry)) {
			err = t.write(c, f, info)
		}
	} else {
		var repaired bool
		repaired, err = t.refresh(c, f, info, entry, owned)
		if err == nil && repaired {
			reconciler.ReportRepaired(ctx, 1)
		}
	}
	if err == nil {
		t.forgetLimited(f.Name) // a later fault is reported at once
	}
	return err
}

// ours reports whether the file at name, info its Lstat, is the file
// entry records: the one the example put there, edited in place or not
// (its inode number), or, where inode numbers are not known, one holding
// the content recorded. A file put in its place is not.
func (t *target) ours(root *os.Root, name string, info fs.FileInfo, entry journalEntry) bool {
	if !info.Mode().IsRegular() {
		return false
	}
	if id := idOf(info); id != (fileID{}) {
		return entry.identifies(id)
	}
	return t.unchanged(root, name, info, entry)
}

// unchanged reports whether the file at name, info its Lstat, still holds
// what the example wrote, as entry records it. It reads the file unless
// its inode, size and modification time are those recorded. Only such a
// file is removed: an inode number is reused as soon as it is free, so a
// file a user made after removing the example's may have the same one,
// and a file the user changed holds their work.
func (t *target) unchanged(root *os.Root, name string, info fs.FileInfo, entry journalEntry) bool {
	switch {
	case !info.Mode().IsRegular() || info.Size() != entry.Size:
		return false
	case entry.identifies(idOf(info)) && info.ModTime().Equal(entry.ModTime):
		return true
	}
	data, err := t.read(root, name)
	return err == nil && digest(data) == entry.SHA256
}

// asWanted reports whether the file the example wrote, info its Lstat,
// is already as f wants it: the same content and mode, and no drift. Then
// an update, after a restart or a Pending status renewed by the
// dependency, need not write it again.
func (t *target) asWanted(root *os.Root, f *File, info fs.FileInfo, entry journalEntry) bool {
	return entry.SHA256 == digest([]byte(f.Content)) && entry.Mode == f.Mode && t.drifted(root, f, info, entry) == ""
}

// refresh writes f if it needs it, logging why, and reports whether it
// repaired drift. info is f's Lstat, nil if the file is missing; entry and
// owned its record in the journal (a file that exists is owned). A change
// of what is wanted is not drift, even if the file is also missing, and
// neither is the first write of a file; a missing file the example wrote,
// here or in a directory that was removed since, is.
func (t *target) refresh(c *claimed, f *File, info fs.FileInfo, entry journalEntry, owned bool) (repaired bool, err error) {
	switch {
	case owned && entry.SHA256 != digest([]byte(f.Content)):
		t.log.Info("Rewriting a file whose desired content changed", "name", f.Name, "template", f.Template)
		return false, t.write(c, f, info)
	case owned && entry.Mode != f.Mode:
		t.log.Info("Rewriting a file whose desired mode changed", "name", f.Name, "mode", f.Mode)
		return false, t.write(c, f, info)
	case info == nil && (owned || t.dir.writtenBefore(f.Name)):
		t.log.Info("Restoring a missing file", "name", f.Name, "template", f.Template)
		return true, t.write(c, f, nil)
	case info == nil: // never written: its template has just been defined
		return false, t.write(c, f, nil)
	}
	drift := t.drifted(c.root, f, info, entry)
	if drift == "" {
		return false, nil
	}
	t.log.Info("Repairing drifted file", "name", f.Name, "drift", drift)
	return true, t.write(c, f, info)
}

// write writes f's content to its name, replacing old, the file there
// now, if it is not nil. The journal records the file before it takes the
// name, with old as the file it replaces, so an interruption never leaves
// a file of the example unrecorded, nor its own file unrecognised.
func (t *target) write(c *claimed, f *File, old fs.FileInfo) error {
	tmp, info, err := writeTemp(c.root, []byte(f.Content), fs.FileMode(f.Mode))
	if err != nil {
		return err
	}
	defer c.root.Remove(tmp) // left over after a link, or after a failure
	entry := journalEntry{Size: info.Size(), Mode: f.Mode, ModTime: info.ModTime(), SHA256: digest([]byte(f.Content)), ID: idOf(info)}
	if old != nil {
		entry.Prev = idOf(old)
	}
	prev, hadPrev := c.journal.get(f.Name)
	if err := c.journal.commit(setRecord(f.Name, entry)); err != nil {
		return err
	}
	if old != nil {
		err = c.root.Rename(tmp, f.Name)
	} else if err = c.root.Link(tmp, f.Name); errors.Is(err, fs.ErrExist) {
		err = errNotOwned // it appeared since the check
	} else if err != nil {
		err = c.root.Rename(tmp, f.Name) // a file system without hard links
	}
	if err == nil {
		err = c.dir.wait()
	}
	if err != nil {
		undo := deleteRecord(f.Name)
		if hadPrev {
			undo = setRecord(f.Name, prev)
		}
		if undoErr := c.journal.commit(undo); undoErr != nil {
			t.log.Warn("Could not undo a journal entry", "name", f.Name, "error", undoErr)
		}
		return err
	}
	t.dir.written(f.Name)
	return nil
}

// Delete removes the file if the example wrote it. A file that is already
// gone, or that the example did not write, is not an error.
func (t *target) Delete(ctx context.Context, _ statedb.ReadTxn, _ statedb.Revision, f *File) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.ops.RLock()
	defer t.ops.RUnlock()
	c, err := t.dir.acquire()
	if err != nil {
		return fmt.Errorf("remove %s: %w", f.Name, err)
	}
	defer t.dir.release(c)
	entry, owned := c.journal.get(f.Name)
	if !owned {
		return nil
	}
	removed, err := t.remove(c, f.Name, entry)
	if err == nil && removed {
		err = c.dir.wait()
	}
	if err == nil {
		err = c.journal.commit(deleteRecord(f.Name))
	}
	if err != nil {
		return fmt.Errorf("remove %s: %w", f.Name, err)
	}
	return nil
}

// remove removes the file at name if it still holds what the example
// wrote (see unchanged), and reports whether it did. Anything else there
// is left alone, and logged: a directory or a file put in its place, or
// the example's file changed since. The caller then forgets the entry,
// once the removal is synced.
func (t *target) remove(c *claimed, name string, entry journalEntry) (removed bool, err error) {
	info, err := c.root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	case info.IsDir():
		t.log.Warn("Not removing a directory that took the place of a file", "name", name)
		return false, nil
	case !t.unchanged(c.root, name, info, entry):
		t.log.Warn("Not removing a file that changed since the example wrote it, or took its place; forgetting it", "name", name)
		return false, nil
	}
	if err := c.root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return true, nil
}

// Prune removes the files the example wrote that are no longer desired,
// and temporary files left by an interrupted write, and reports the files
// it removed as drift repaired. It does not list the directory: files the
// journal does not name are not the example's. The removals run on the
// workers, and are synced and recorded together at the end: a prune
// costs its removals, one fsync of the directory and one of the journal.
func (t *target) Prune(ctx context.Context, _ statedb.ReadTxn, objects iter.Seq2[*File, statedb.Revision]) error {
	t.ops.Lock()
	defer t.ops.Unlock()
	c, err := t.dir.acquire()
	if err != nil {
		return err
	}
	defer t.dir.release(c)
	want := map[string]bool{}
	for f := range objects {
		want[f.Name] = true
	}
	var unwanted []string
	for _, name := range c.journal.names() {
		if !want[name] {
			unwanted = append(unwanted, name)
		}
	}

	var (
		mu      sync.Mutex
		forget  []record
		removed []string
		errs    []error
		next    atomic.Int64
		wg      sync.WaitGroup
	)
	for range min(workers, len(unwanted)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(unwanted) {
					return
				}
				name := unwanted[i]
				entry, _ := c.journal.get(name)
				ok, err := t.remove(c, name, entry)
				mu.Lock()
				switch {
				case err != nil:
					errs = append(errs, fmt.Errorf("remove %s: %w", name, err))
				case ok:
					removed = append(removed, name)
					fallthrough
				default:
					forget = append(forget, deleteRecord(name))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		errs = append(errs, ctx.Err())
	}
	if len(removed) > 0 {
		if err := c.dir.wait(); err != nil {
			return errors.Join(append(errs, err)...) // the journal keeps them: pruned again
		}
		slices.Sort(removed)
		t.log.Info("Pruned files no longer desired", "count", len(removed), "names", abbreviate(removed, 5))
		reconciler.ReportRepaired(ctx, len(removed))
	}
	if err := c.journal.commit(forget...); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, removeTemporaries(c.root))
	return errors.Join(errs...)
}

// abbreviate joins the first n names, and says how many more there are.
func abbreviate(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
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

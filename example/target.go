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
		t.read = readRegular
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
// directory is written, synced, recorded in the journal and then
// exchanged with the file it replaces (or, for a new name, linked into
// place), and the directory synced, so a reader sees either the old or
// the new content, never a partial one, and a crash loses neither the
// file nor its record. (Where the file system cannot exchange two files,
// the old one is moved aside first, and the name is missing for a
// moment.) A file with a template
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
	st, err := c.stat(inTarget(f.Name))
	exists := err == nil
	var old *fileState // the file there now, if any
	if exists {
		old = &st
	}
	switch {
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return err
	case exists && owned && st.info.IsDir():
		// The example wrote a file here, and someone put a directory in
		// its place. It is not the example's to remove: fail, and say
		// once in a while what to do, until the directory is gone.
		t.logLimited(f.Name, slog.LevelWarn, "A directory is in the way of a file; remove the directory and the file will be written",
			"name", f.Name, "directory", filepath.Join(t.dir.path, f.Name))
		return errDirInTheWay
	case exists && !(owned && t.ours(c.root, f.Name, st, entry)):
		return errNotOwned
	}
	if !refreshing {
		if !(owned && exists && t.asWanted(c.root, f, st, entry)) {
			err = t.write(c, f, old)
		}
	} else {
		var repaired bool
		repaired, err = t.refresh(c, f, old, entry, owned)
		if err == nil && repaired {
			reconciler.ReportRepaired(ctx, 1)
		}
	}
	if err == nil {
		t.forgetLimited(f.Name) // a later fault is reported at once
	}
	return err
}

// ours reports whether st, the file at name, is the file entry records:
// the one the example put there (or the one its last write replaced, if
// that write was cut short), edited in place or not. It is recognised by
// its file handle, which a new file never shares, even one given the
// inode number of a file removed. Where there is no handle (a file system
// that gives none, or an entry of an earlier version of the example), an
// inode number is not enough: the file must also hold the content the
// example wrote, so a file edited in place is not recognised there. A
// file put in the example's file's place is not its own.
func (t *target) ours(root *os.Root, name string, st fileState, entry journalEntry) bool {
	switch {
	case !st.info.Mode().IsRegular():
		return false
	case st.id.strong() && entry.ID.strong():
		return entry.identifies(st.id)
	case st.id.Ino != 0 && (st.id.Dev != entry.ID.Dev || st.id.Ino != entry.ID.Ino):
		return false
	}
	return t.holds(root, name, st, entry)
}

// holds reports whether st, the file at name, holds the content entry
// records. It reads the file, and only st: a file put at the name since
// st was found is not read as st.
func (t *target) holds(root *os.Root, name string, st fileState, entry journalEntry) bool {
	if st.info.Size() != entry.Size {
		return false
	}
	data, id, err := t.read(root, name)
	return err == nil && (st.id.Ino == 0 || sameFile(id, st.id)) && digest(data) == entry.SHA256
}

// unchanged reports whether st, the file at name, is the example's (see
// ours) and still holds what it wrote, as entry records it. It always
// reads the file and compares its content with the digest recorded: a
// file edited in place to the same size, its modification time put back
// (touch -r, rsync --inplace -t), holds the user's work although its
// identity, size and time are those recorded. Only a file that holds
// what the example wrote is removed; one it cannot read is not.
func (t *target) unchanged(root *os.Root, name string, st fileState, entry journalEntry) bool {
	switch {
	case !st.info.Mode().IsRegular() || st.info.Size() != entry.Size:
		return false
	case !(st.id.strong() && entry.ID.strong()):
		return t.ours(root, name, st, entry) // which reads the content
	case !entry.identifies(st.id):
		return false
	}
	return t.holds(root, name, st, entry)
}

// asWanted reports whether the file the example wrote, st, is already as f wants it: the same content and mode, and no drift. Then
// an update, after a restart or a Pending status renewed by the
// dependency, need not write it again.
func (t *target) asWanted(root *os.Root, f *File, st fileState, entry journalEntry) bool {
	return entry.SHA256 == digest([]byte(f.Content)) && entry.Mode == f.Mode && t.drifted(root, f, st, entry) == ""
}

// refresh writes f if it needs it, logging why, and reports whether it
// repaired drift. old is the file at f's name, nil if it is missing; entry
// and owned its record in the journal (a file that exists is owned). A
// change of what is wanted is not drift, even if the file is also missing,
// and neither is the first write of a file; a missing file the example
// wrote, here or in a directory that was removed since, is.
func (t *target) refresh(c *claimed, f *File, old *fileState, entry journalEntry, owned bool) (repaired bool, err error) {
	switch {
	case owned && entry.SHA256 != digest([]byte(f.Content)):
		t.log.Info("Rewriting a file whose desired content changed", "name", f.Name, "template", f.Template)
		return false, t.write(c, f, old)
	case owned && entry.Mode != f.Mode:
		t.log.Info("Rewriting a file whose desired mode changed", "name", f.Name, "mode", f.Mode)
		return false, t.write(c, f, old)
	case old == nil && (owned || t.dir.writtenBefore(f.Name)):
		t.log.Info("Restoring a missing file", "name", f.Name, "template", f.Template)
		return true, t.write(c, f, nil)
	case old == nil: // never written: its template has just been defined
		return false, t.write(c, f, nil)
	}
	drift := t.drifted(c.root, f, *old, entry)
	if drift == "" {
		return false, nil
	}
	t.log.Info("Repairing drifted file", "name", f.Name, "drift", drift)
	return true, t.write(c, f, old)
}

// write writes f's content to its name. old is the file there now, which
// the caller found to be the example's, or nil if the name is free. The
// journal records the new file before it takes the name, with old as the
// file it replaces, so an interruption never leaves a file of the example
// unrecorded, nor its own file unrecognised. The new file replaces old
// only: a file that took the name since the caller looked is left there,
// and the write fails with errNotOwned.
func (t *target) write(c *claimed, f *File, old *fileState) error {
	base, st, err := writeTemp(c.root, []byte(f.Content), fs.FileMode(f.Mode))
	if err != nil {
		return err
	}
	tmp := inState(base)
	// What tmp holds at the end is the example's: a second link to the
	// new file, old, replaced, or the new file, not used.
	defer c.root.Remove(c.path(tmp))
	entry := journalEntry{Size: st.info.Size(), Mode: f.Mode, ModTime: st.info.ModTime(), SHA256: digest([]byte(f.Content)), ID: st.id}
	if old != nil {
		entry.Prev = old.id
	}
	prev, hadPrev := c.journal.get(f.Name)
	if err := c.journal.commit(setRecord(f.Name, entry)); err != nil {
		return err
	}
	if old != nil {
		err = t.replace(c, tmp, f.Name, *old, st)
	} else {
		err = c.place(tmp, f.Name)
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
	// The new file has the name, and the journal says so whatever comes
	// next: if the directory cannot be synced, the write fails and is
	// retried, and the file is still recognised as the example's.
	return c.dir.wait()
}

// place gives the new file at tmp the name, which was free: by a link, or
// where the file system has none, by a rename that does not replace. A
// file that took the name since is left there: errNotOwned.
func (c *claimed) place(tmp loc, name string) error {
	err := c.root.Link(c.path(tmp), name)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		err = c.renameNoReplace(tmp, inTarget(name))
	}
	if errors.Is(err, fs.ErrExist) {
		return errNotOwned // it appeared since the check
	}
	return err
}

// replace puts the new file neu, at tmp, in the place of old, the
// example's file at name, in one step where the file system can exchange
// two files (then tmp holds old). It never replaces another file: if the
// file at name is no longer old (the user saved their own meanwhile),
// that file is given its name back, and replace fails with errNotOwned.
func (t *target) replace(c *claimed, tmp loc, name string, old, neu fileState) error {
	err := c.exchange(tmp, inTarget(name))
	switch {
	case errors.Is(err, errNoExchange):
		return t.replaceAside(c, tmp, name, old)
	case errors.Is(err, fs.ErrNotExist): // old was removed since: the name is free
		return c.place(tmp, name)
	case err != nil:
		return err
	}
	if got, err := c.stat(tmp); err == nil && sameFile(got.id, old.id) {
		return nil
	}
	// Not the file checked: exchange them back.
	if err := c.exchange(tmp, inTarget(name)); err != nil {
		t.keep(c, tmp, name)
		return fmt.Errorf("%w (the file that took its place is kept in %s; putting it back failed: %v)", errNotOwned, stateDir, err)
	}
	got, err := c.stat(tmp)
	switch {
	case err == nil && sameFile(got.id, neu.id):
		return errNotOwned
	case err == nil:
		// The name was taken once more meanwhile: give it back that file,
		// and keep the one before it.
		c.exchange(tmp, inTarget(name))
	}
	t.keep(c, tmp, name)
	return errNotOwned
}

// replaceAside is replace where the file system cannot exchange two
// files: old is moved aside and checked, and the new file is given the
// name, free for a moment.
func (t *target) replaceAside(c *claimed, tmp loc, name string, old fileState) error {
	aside, err := c.moveAside(name)
	if errors.Is(err, fs.ErrNotExist) {
		return c.place(tmp, name)
	}
	if err != nil {
		return err
	}
	if got, err := c.stat(aside); err != nil || !sameFile(got.id, old.id) {
		t.putBack(c, aside, name)
		return errNotOwned
	}
	if err := c.place(tmp, name); err != nil && !errors.Is(err, errNotOwned) {
		t.putBack(c, aside, name)
		return err
	} else if err != nil {
		c.root.Remove(c.path(aside)) // old, the example's: the name is another's now
		return err
	}
	return c.root.Remove(c.path(aside))
}

// moveAside renames the file at name to a new name in the state
// directory, and returns that.
func (c *claimed) moveAside(name string) (loc, error) {
	aside := inState(randomName(asidePrefix))
	return aside, c.root.Rename(name, c.path(aside))
}

// putBack gives the file at aside, moved there from name, its name back,
// unless the name was taken since: then it is kept where it is, and the
// log says so.
func (t *target) putBack(c *claimed, aside loc, name string) {
	if err := c.renameNoReplace(aside, inTarget(name)); err != nil {
		t.log.Warn("A file that took the place of the example's, moved aside to be checked, could not be given its name back; "+
			"it is kept in the state directory", "name", name, "kept", filepath.Join(t.dir.path, c.path(aside)), "error", err)
	}
}

// keep renames the file at l, which is not the example's, to a name in
// the state directory that nothing removes, and logs where it is.
func (t *target) keep(c *claimed, l loc, name string) {
	kept := inState(randomName(asidePrefix))
	if err := c.root.Rename(c.path(l), c.path(kept)); err != nil {
		t.log.Error("Could not keep a file that took the place of the example's", "name", name, "file", c.path(l), "error", err)
		return
	}
	t.log.Warn("A file that took the place of the example's while it was replaced is kept in the state directory",
		"name", name, "kept", filepath.Join(t.dir.path, c.path(kept)))
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

// remove removes the file at name if it is the example's and still holds
// what it wrote (see unchanged), and reports whether it did. Anything else
// there is left alone, and logged: a directory or a file put in its
// place, or the example's file changed since. The caller then forgets the
// entry, once the removal is synced.
//
// The file is moved aside before it is removed, and what was moved is
// checked to be the file found: a file the user saved in its place
// between the check and the removal is given its name back.
func (t *target) remove(c *claimed, name string, entry journalEntry) (removed bool, err error) {
	const notOurs = "Not removing a file that changed since the example wrote it, or took its place; forgetting it"
	st, err := c.stat(inTarget(name))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	case st.info.IsDir():
		t.log.Warn("Not removing a directory that took the place of a file", "name", name)
		return false, nil
	case !t.unchanged(c.root, name, st, entry):
		t.log.Warn(notOurs, "name", name)
		return false, nil
	}
	aside, err := c.moveAside(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	}
	// What was moved is read again: a file saved, or edited in place,
	// between the check and the move is not the example's to remove.
	got, err := c.stat(aside)
	if err != nil || !sameFile(got.id, st.id) || !t.holds(c.root, c.path(aside), got, entry) {
		t.log.Warn(notOurs, "name", name)
		t.putBack(c, aside, name)
		return false, nil
	}
	if err := c.root.Remove(c.path(aside)); err != nil && !errors.Is(err, fs.ErrNotExist) {
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

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"log/slog"
	"os"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// target implements reconciler.Operations[*File] on a real directory. Every
// operation opens the directory afresh with os.Root, so no name can reach
// outside it (not even through a symlink), and a directory that was removed,
// replaced or remounted is seen as it is now rather than through a stale
// handle. The reconciler calls the operations one at a time.
type target struct {
	dir string
	log *slog.Logger
}

var _ reconciler.Operations[*File] = (*target)(nil)

func newTarget(cfg config, log *slog.Logger) *target {
	return &target{dir: cfg.Dir, log: log}
}

// open creates the directory if it is missing (it is part of the desired
// state) and opens it as a root for the file operations.
func (t *target) open() (*os.Root, error) {
	if err := os.MkdirAll(t.dir, 0o755); err != nil {
		return nil, fmt.Errorf("target directory: %w", err)
	}
	root, err := os.OpenRoot(t.dir)
	if err != nil {
		return nil, fmt.Errorf("target directory: %w", err)
	}
	return root, nil
}

// Update writes the file atomically: a temporary file in the same directory
// is written, synced and renamed over the name, so a reader sees either the
// old or the new content, never a partial one. When the reconciler refreshes
// the file (its status is Refreshing), Update first compares the file on
// disk with the desired one and writes only if it drifted.
func (t *target) Update(ctx context.Context, _ statedb.ReadTxn, _ statedb.Revision, f *File) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := t.update(f); err != nil {
		return fmt.Errorf("write %s: %w", f.Name, err)
	}
	return nil
}

func (t *target) update(f *File) error {
	root, err := t.open()
	if err != nil {
		return err
	}
	defer root.Close()
	if f.Status.Kind == status.KindRefreshing {
		drift, err := drifted(root, f)
		if err != nil {
			return err
		}
		if drift == "" {
			return nil
		}
		t.log.Info("Repairing drifted file", "name", f.Name, "drift", drift)
	}
	return writeAtomic(root, f)
}

// drifted describes how the file on disk differs from f, or returns "" if it
// does not.
func drifted(root *os.Root, f *File) (string, error) {
	info, err := root.Lstat(f.Name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "missing", nil
	case err != nil:
		return "", err
	case !info.Mode().IsRegular():
		return "not a regular file", nil
	case info.Size() != int64(len(f.Content)):
		return "content", nil
	}
	data, err := root.ReadFile(f.Name)
	if err != nil {
		return "", err
	}
	if string(data) != f.Content {
		return "content", nil
	}
	if info.Mode().Perm() != fs.FileMode(f.Mode) {
		return "mode", nil
	}
	return "", nil
}

func writeAtomic(root *os.Root, f *File) (err error) {
	var suffix [8]byte
	rand.Read(suffix[:])
	tmp := tmpPrefix + hex.EncodeToString(suffix[:])
	out, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fs.FileMode(f.Mode))
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			out.Close()
			root.Remove(tmp)
		}
	}()
	if _, err := out.WriteString(f.Content); err != nil {
		return err
	}
	// Chmod because the mode given to OpenFile is reduced by the umask.
	if err := out.Chmod(fs.FileMode(f.Mode)); err != nil {
		return err
	}
	if err := out.Sync(); err != nil {
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return root.Rename(tmp, f.Name)
}

// Delete removes the file. A file that is already gone is not an error. A
// directory in its place is not ours to remove and is left alone.
func (t *target) Delete(ctx context.Context, _ statedb.ReadTxn, _ statedb.Revision, f *File) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	root, err := t.open()
	if err != nil {
		return fmt.Errorf("remove %s: %w", f.Name, err)
	}
	defer root.Close()
	return removeFile(root, f.Name, t.log)
}

func removeFile(root *os.Root, name string, log *slog.Logger) error {
	info, err := root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("remove %s: %w", name, err)
	case info.IsDir():
		log.Warn("Not removing a directory in the target", "name", name)
		return nil
	}
	if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	return nil
}

// Prune removes every file of the directory that is not in the desired set,
// including temporary files left over by an interrupted write.
// Subdirectories are left alone.
func (t *target) Prune(ctx context.Context, _ statedb.ReadTxn, objects iter.Seq2[*File, statedb.Revision]) error {
	root, err := t.open()
	if err != nil {
		return err
	}
	defer root.Close()
	want := map[string]bool{}
	for f := range objects {
		want[f.Name] = true
	}
	dir, err := root.Open(".")
	if err != nil {
		return fmt.Errorf("reading the target directory: %w", err)
	}
	entries, err := dir.ReadDir(-1)
	dir.Close()
	if err != nil {
		return fmt.Errorf("reading the target directory: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if e.IsDir() || want[e.Name()] {
			continue
		}
		t.log.Info("Pruning unwanted file", "name", e.Name())
		errs = append(errs, removeFile(root, e.Name(), t.log))
	}
	return errors.Join(errs...)
}

package sets

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// MaxObjectsPerTxn bounds the write transactions of this package: Retire,
// Refresh and the job of [Retired] each write at most this many objects
// per transaction, so that the reconcilers and writers of the table wait
// for its lock no longer than for a reconciler's round of that size.
const MaxObjectsPerTxn = 1000

// Table is the objects of one StateDB table whose reconcilers share a
// [status.Set]: each reconciler, registered with reconciler.WithName,
// reads and writes its own entry of every object's set. A Table retires
// names nobody serves any more ([Table.Retire], [Retired]), refreshes one
// name on demand and waits for it ([Table.Refresh]), and waits for several
// names to settle the table ([Table.Wait]). A name that joins needs
// nothing: its reconciler reads a missing entry as Pending
// ([status.Set.Get]) and reconciles every object.
//
// Make one with [Of]; the zero Table is not usable. A Table holds no state
// of its own beyond what Of was given, starts no goroutine, and its
// methods are safe for concurrent use.
type Table[Obj any] struct {
	db    *statedb.DB
	table statedb.RWTable[Obj]
	clone func(Obj) Obj
	get   func(Obj) status.Set
	set   func(Obj, status.Set) Obj
}

// Of returns the Table for table, whose objects keep their status.Set where
// get reads it and set writes it (set is given a clone made with clone and
// may modify it; it returns the object to store). The functions must not
// block; they are called on the goroutine of the method that needs them, and
// a panic in one is recovered and returned as an error wrapping
// [ErrFuncPanicked]. Errors wrap reconciler.ErrInvalidConfig for nil
// arguments.
func Of[Obj any](db *statedb.DB, table statedb.RWTable[Obj], clone func(Obj) Obj,
	get func(Obj) status.Set, set func(Obj, status.Set) Obj) (*Table[Obj], error) {
	var missing []string
	for _, a := range []struct {
		nil  bool
		name string
	}{{db == nil, "db"}, {table == nil, "table"}, {clone == nil, "clone"}, {get == nil, "get"}, {set == nil, "set"}} {
		if a.nil {
			missing = append(missing, a.name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("sets.Of: %s must not be nil: %w", strings.Join(missing, ", "), reconciler.ErrInvalidConfig)
	}
	return &Table[Obj]{db: db, table: table, clone: clone, get: get, set: set}, nil
}

// Name returns the name of the StateDB table, or "" for a Table not made
// with [Of].
func (t *Table[Obj]) Name() string {
	if t == nil || t.table == nil {
		return ""
	}
	return t.table.Name()
}

// Statuses returns obj's status.Set, as the get given to Of reads it; a
// panic of get is returned as an error wrapping [ErrFuncPanicked].
func (t *Table[Obj]) Statuses(obj Obj) (status.Set, error) {
	if t == nil || t.get == nil {
		return status.Set{}, fmt.Errorf("sets: Statuses: the Table was not made with sets.Of: %w", reconciler.ErrInvalidConfig)
	}
	return t.statuses(obj)
}

// checkName refuses what reconciler.WithName refuses, and the empty name,
// which no reconciler of a status.Set has.
func checkName(what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%s: empty reconciler name: %w", what, reconciler.ErrInvalidConfig)
	case strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return fmt.Errorf("%s: reconciler name %q holds white space or a control character: %w", what, name, reconciler.ErrInvalidConfig)
	}
	return nil
}

// checkCall checks what every method is given: a usable Table and a live
// context.
func (t *Table[Obj]) checkCall(ctx context.Context, what string) error {
	switch {
	case t == nil || t.table == nil:
		return fmt.Errorf("%s: the Table was not made with sets.Of: %w", what, reconciler.ErrInvalidConfig)
	case ctx == nil:
		return fmt.Errorf("%s: nil context: %w", what, reconciler.ErrInvalidConfig)
	}
	return ctx.Err()
}

// recovered turns a panic of a function given to Of into an error; use as
// defer recovered(&err, what).
func recovered(err *error, what string) {
	if v := recover(); v != nil {
		*err = fmt.Errorf("%s: %w: %v", what, ErrFuncPanicked, v)
	}
}

// statuses returns the set of obj, recovering a panic of get.
func (t *Table[Obj]) statuses(obj Obj) (s status.Set, err error) {
	defer recovered(&err, "sets: get")
	return t.get(obj), nil
}

// withSet returns a clone of obj holding s, recovering a panic of clone or
// set.
func (t *Table[Obj]) withSet(obj Obj, s status.Set) (o Obj, err error) {
	defer recovered(&err, "sets: clone or set")
	return t.set(t.clone(obj), s), nil
}

// key returns obj's primary key, as a map key.
func (t *Table[Obj]) key(obj Obj) (string, bool) {
	k, ok := t.table.PrimaryIndexer().ObjectToKey(obj)
	return string(k), ok
}

// showKey renders a primary key for messages: as it is if it is printable
// text, else in hex.
func showKey(key string) string {
	if utf8.ValidString(key) && strings.IndexFunc(key, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return key
	}
	return fmt.Sprintf("%x", key)
}

// has reports whether s has an entry for name (a missing one reads as
// Pending, see status.Set.Get).
func has(s status.Set, name string) bool {
	for n := range s.All() {
		if n == name {
			return true
		}
	}
	return false
}

// edit is a change of the sets of some objects: which ones need it, and
// what each becomes. needs is asked of the version of a snapshot and
// again of the current version in the write transaction, so that a write
// made since is never overwritten; change only of the current one.
type edit[Obj any] struct {
	needs   func(key string, s status.Set) bool
	change  func(s status.Set) status.Set
	written func(key string, obj Obj) // nil: nothing to record
}

// rewrite applies e to the objects of objs (read from a snapshot), in
// write transactions of at most MaxObjectsPerTxn objects each, committed
// one after another, and returns how many objects it wrote. It stops at
// the first error (ctx's, or of a function given to Of), aborting the
// transaction under way; those committed before stay.
func (t *Table[Obj]) rewrite(ctx context.Context, what string, objs iter.Seq2[Obj, statedb.Revision], e edit[Obj]) (int, error) {
	var (
		written int
		batch   = make([]Obj, 0, 64)
		err     error
	)
	for obj := range objs {
		var s status.Set
		if s, err = t.statuses(obj); err != nil {
			break
		}
		key, ok := t.key(obj)
		if !ok || !e.needs(key, s) {
			continue
		}
		if batch = append(batch, obj); len(batch) == MaxObjectsPerTxn {
			var n int
			n, err = t.commit(ctx, what, batch, e)
			written += n
			batch = batch[:0]
			if err != nil {
				break
			}
		}
	}
	if err == nil && len(batch) > 0 {
		var n int
		n, err = t.commit(ctx, what, batch, e)
		written += n
	}
	return written, err
}

// commit writes one batch of rewrite in one write transaction.
func (t *Table[Obj]) commit(ctx context.Context, what string, batch []Obj, e edit[Obj]) (int, error) {
	wtxn, err := t.lock(ctx)
	if err != nil {
		return 0, err
	}
	defer wtxn.Abort() // after Commit, does nothing
	type write struct {
		key string
		obj Obj
	}
	writes := make([]write, 0, len(batch))
	for _, old := range batch {
		q, ok := t.table.PrimaryIndexer().QueryFromObject(old)
		if !ok {
			continue
		}
		cur, _, found := t.table.Get(wtxn, q)
		if !found {
			continue // deleted since the snapshot
		}
		s, err := t.statuses(cur)
		if err != nil {
			return 0, err
		}
		key, ok := t.key(cur)
		if !ok || !e.needs(key, s) {
			continue
		}
		obj, err := t.withSet(cur, e.change(s))
		if err != nil {
			return 0, err
		}
		if k, ok := t.key(obj); !ok || k != key {
			return 0, fmt.Errorf("%s: table %q: clone or set changed the primary key of %s: %w", what, t.table.Name(), showKey(key), reconciler.ErrInvalidConfig)
		}
		if _, _, err := t.table.Insert(wtxn, obj); err != nil {
			return 0, fmt.Errorf("%s: table %q: writing %s: %w", what, t.table.Name(), showKey(key), err)
		}
		writes = append(writes, write{key, obj})
	}
	wtxn.Commit()
	if e.written != nil {
		for _, w := range writes {
			e.written(w.key, w.obj)
		}
	}
	return len(writes), nil
}

// lock returns a write transaction on the table, as DB.WriteTxn does,
// unless ctx ends first (a writer holding the table for long: a restore,
// say): it then returns ctx's error, and the transaction is aborted as
// soon as it is taken, by a goroutine left to wait for the writer.
func (t *Table[Obj]) lock(ctx context.Context) (statedb.WriteTxn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	got := make(chan statedb.WriteTxn, 1)
	go func() { got <- t.db.WriteTxn(t.table) }()
	select {
	case wtxn := <-got:
		return wtxn, nil
	case <-ctx.Done():
		go func() { (<-got).Abort() }()
		return nil, ctx.Err()
	}
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

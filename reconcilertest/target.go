package reconcilertest

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler"
)

// Target is an in-memory target system for tests. It implements
// [reconciler.Operations] and [reconciler.BatchOperations] for any object
// type: Update stores value(obj) under key(obj), Delete removes the key,
// Prune removes every key not in the desired set. It records every call in
// order (see [Call]) and can be compared with a table. It is a
// [TargetReader] and a [TargetWriter], for the reconciler/target commands.
//
// A Target lives outside the hive, so it keeps its state across a
// restart, like a real target system. Every operation returns ctx's error
// without touching the state if ctx has already ended. All methods are safe
// for concurrent use; none blocks. Use [NewTarget]; the zero Target is not
// usable.
type Target[Obj any] struct {
	callLog
	key, value func(Obj) string

	mu      sync.Mutex
	state   map[string]string
	changed chan struct{} // closed and replaced on every change of state
}

var (
	_ reconciler.Operations[struct{}]      = (*Target[struct{}])(nil)
	_ reconciler.BatchOperations[struct{}] = (*Target[struct{}])(nil)
	_ CallRecorder                         = (*Target[struct{}])(nil)
)

// NewTarget returns an empty target that stores objects as value(obj) under
// key(obj). key must give each object the key it has in the table, in the
// form the script commands use (usually the primary key as a string). It
// panics if key or value is nil.
func NewTarget[Obj any](key, value func(Obj) string) *Target[Obj] {
	if key == nil || value == nil {
		panic("reconcilertest.NewTarget: key and value functions must not be nil")
	}
	return &Target[Obj]{key: key, value: value, state: map[string]string{}, changed: make(chan struct{})}
}

// notify must be called with mu held.
func (t *Target[Obj]) notify() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// Update implements [reconciler.Operations].
func (t *Target[Obj]) Update(ctx context.Context, _ statedb.ReadTxn, rev statedb.Revision, obj Obj) error {
	return t.update(ctx, rev, obj, 0)
}

// Delete implements [reconciler.Operations].
func (t *Target[Obj]) Delete(ctx context.Context, _ statedb.ReadTxn, rev statedb.Revision, obj Obj) error {
	return t.delete(ctx, rev, obj, 0)
}

func (t *Target[Obj]) update(ctx context.Context, rev statedb.Revision, obj Obj, batch int) error {
	c := Call{Op: OpUpdate, Key: t.key(obj), Revision: rev, Value: t.value(obj), Batch: batch, Err: ctx.Err()}
	id := t.begin(c)
	if c.Err == nil {
		t.mu.Lock()
		t.state[c.Key] = c.Value
		t.notify()
		t.mu.Unlock()
	}
	t.finish(id, c)
	return c.Err
}

func (t *Target[Obj]) delete(ctx context.Context, rev statedb.Revision, obj Obj, batch int) error {
	c := Call{Op: OpDelete, Key: t.key(obj), Revision: rev, Batch: batch, Err: ctx.Err()}
	id := t.begin(c)
	if c.Err == nil {
		t.mu.Lock()
		delete(t.state, c.Key)
		t.notify()
		t.mu.Unlock()
	}
	t.finish(id, c)
	return c.Err
}

// Prune implements [reconciler.Operations]: it removes every key that no
// object of objects has, and reports how many it removed as drift repaired
// ([reconciler.ReportRepaired]).
func (t *Target[Obj]) Prune(ctx context.Context, txn statedb.ReadTxn, objects iter.Seq2[Obj, statedb.Revision]) error {
	c := Call{Op: OpPrune, Txn: txn, Err: ctx.Err()}
	id := t.begin(c)
	want := map[string]bool{}
	for obj := range objects {
		want[t.key(obj)] = true
	}
	c.Desired = len(want)
	if c.Err == nil {
		t.mu.Lock()
		for k := range t.state {
			if !want[k] {
				c.Removed = append(c.Removed, k)
				delete(t.state, k)
			}
		}
		slices.Sort(c.Removed)
		t.notify()
		t.mu.Unlock()
		reconciler.ReportRepaired(ctx, len(c.Removed))
	}
	t.finish(id, c)
	return c.Err
}

// UpdateBatch implements [reconciler.BatchOperations]; each entry is
// recorded as an update with the batch's number.
func (t *Target[Obj]) UpdateBatch(ctx context.Context, _ statedb.ReadTxn, batch []reconciler.BatchEntry[Obj]) {
	n := t.nextBatch()
	for i := range batch {
		batch[i].Result = t.update(ctx, batch[i].Revision, batch[i].Object, n)
	}
}

// DeleteBatch implements [reconciler.BatchOperations]; each entry is
// recorded as a delete with the batch's number.
func (t *Target[Obj]) DeleteBatch(ctx context.Context, _ statedb.ReadTxn, batch []reconciler.BatchEntry[Obj]) {
	n := t.nextBatch()
	for i := range batch {
		batch[i].Result = t.delete(ctx, batch[i].Revision, batch[i].Object, n)
	}
}

// State returns a copy of what the target holds, key to value.
func (t *Target[Obj]) State() map[string]string {
	s, _ := t.StateWatch()
	return s
}

// StateWatch returns a copy of what the target holds and a channel that is
// closed at its next change.
func (t *Target[Obj]) StateWatch() (map[string]string, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.state), t.changed
}

// Keys implements [TargetReader]: it returns the keys the target holds,
// sorted. The error is always nil.
func (t *Target[Obj]) Keys() ([]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Sorted(maps.Keys(t.state)), nil
}

// Get implements [TargetReader]: it returns the value the target holds
// under key, and whether it holds key. The error is always nil.
func (t *Target[Obj]) Get(key string) (string, bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.state[key]
	return v, ok, nil
}

// Set implements [TargetWriter]: it stores value under key behind the
// reconciler's back, to simulate drift or leftovers in the target. It is
// not recorded as a call.
func (t *Target[Obj]) Set(key, value string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.state[key] = value
	t.notify()
}

// Remove implements [TargetWriter]: it deletes key behind the reconciler's
// back. It is not recorded as a call.
func (t *Target[Obj]) Remove(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.state, key)
	t.notify()
}

// Diff compares the target with the objects of table in txn: the target
// equals the table when it holds exactly key(obj) = value(obj) for every
// object. Diff returns "" if they are equal, and otherwise one sorted line
// per difference:
//
//	missing a=1          in the table, not in the target
//	extra stray=x        in the target, not in the table
//	differs b: target 1, table 2
//
// Every object counts, whatever its status; an object that failed
// terminally is a difference.
func (t *Target[Obj]) Diff(txn statedb.ReadTxn, table statedb.Table[Obj]) string {
	want := map[string]string{}
	for obj := range table.All(txn) {
		want[t.key(obj)] = t.value(obj)
	}
	return diffState(t.State(), want)
}

// diffState lists the differences between got (the target) and want (the
// table) as sorted lines, "" if none.
func diffState(got, want map[string]string) string {
	var lines []string
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			lines = append(lines, fmt.Sprintf("missing %s=%s", k, w))
		case g != w:
			lines = append(lines, fmt.Sprintf("differs %s: target %s, table %s", k, g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			lines = append(lines, fmt.Sprintf("extra %s=%s", k, g))
		}
	}
	slices.SortFunc(lines, func(a, b string) int {
		return strings.Compare(lineKey(a), lineKey(b))
	})
	return strings.Join(lines, "\n")
}

// lineKey sorts diff lines by key rather than by kind of difference.
func lineKey(line string) string {
	_, rest, _ := strings.Cut(line, " ")
	return rest
}

// formatState renders a state as sorted "key=value" words.
func formatState(state map[string]string) string {
	words := make([]string, 0, len(state))
	for k, v := range state {
		words = append(words, k+"="+v)
	}
	slices.Sort(words)
	return strings.Join(words, " ")
}

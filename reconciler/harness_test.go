package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// item is the object reconciled by the script tests. Status serves a single
// reconciler; Statuses serves reconcilers named in it.
type item struct {
	ID       string        `json:"id" yaml:"id"`
	Value    string        `json:"value" yaml:"value"`
	Status   status.Status `json:"status" yaml:"status"`
	Statuses status.Set    `json:"statuses" yaml:"statuses"`
}

func (it *item) clone() *item { c := *it; return &c }

func (it *item) getStatus() status.Status { return it.Status }

func (it *item) setStatus(s status.Status) *item { it.Status = s; return it }

func (it *item) TableHeader() []string {
	return []string{"ID", "Value", "StatusKind", "StatusError", "A", "B"}
}

func (it *item) TableRow() []string {
	return []string{
		it.ID, it.Value, it.Status.Kind.String(), it.Status.Error,
		it.Statuses.Get("a").Kind.String(), it.Statuses.Get("b").Kind.String(),
	}
}

var itemID = statedb.Index[*item, string]{
	Name:       "id",
	FromObject: func(it *item) index.KeySet { return index.NewKeySet(index.String(it.ID)) },
	FromKey:    index.String,
	FromString: index.FromString,
	Unique:     true,
}

// fault is how the target treats operations on a key.
type fault struct {
	mode  string // "", "once", "error", "terminal", "panic", "retry-after", "block", "slow"
	after time.Duration
}

// target is an in-memory target system that records what it holds and the
// operations it saw. Its faults are set from scripts.
type target struct {
	mu      sync.Mutex
	data    map[string]string
	faults  map[string]fault // by key, "*" for every key
	calls   map[string]int   // by "op key"
	gates   map[string]chan struct{}
	changed chan struct{} // closed and replaced on every operation
}

func newTarget() *target {
	return &target{
		data:    map[string]string{},
		faults:  map[string]fault{},
		calls:   map[string]int{},
		gates:   map[string]chan struct{}{},
		changed: make(chan struct{}),
	}
}

// notify must be called with mu held.
func (t *target) notify() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// snapshot returns the target's contents and a channel closed on change.
func (t *target) snapshot() (map[string]string, map[string]int, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.data), maps.Clone(t.calls), t.changed
}

var errTarget = errors.New("target failure")

// enter records a call and applies the key's fault. It returns the error the
// operation should return, or ok=false if it should proceed.
func (t *target) enter(ctx context.Context, op, key string) error {
	t.mu.Lock()
	t.calls[op+" "+key]++
	f, ok := t.faults[key]
	if !ok {
		f = t.faults["*"]
	}
	gate := t.gates[key]
	if f.mode == "once" {
		delete(t.faults, key) // fail this call only
	}
	t.notify()
	t.mu.Unlock()

	switch f.mode {
	case "once":
		return fmt.Errorf("%s %s: failing once: %w", op, key, errTarget)
	case "error":
		return fmt.Errorf("%s %s: %w", op, key, errTarget)
	case "terminal":
		return reconciler.TerminalError(fmt.Errorf("%s %s: %w", op, key, errTarget))
	case "retry-after":
		return reconciler.RetryAfter(f.after, fmt.Errorf("%s %s: busy", op, key))
	case "panic":
		panic(fmt.Sprintf("%s %s: boom", op, key))
	case "block":
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	case "slow":
		select {
		case <-time.After(f.after):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (t *target) apply(fn func()) {
	t.mu.Lock()
	fn()
	t.notify()
	t.mu.Unlock()
}

func (t *target) Update(ctx context.Context, _ statedb.ReadTxn, _ statedb.Revision, it *item) error {
	if err := t.enter(ctx, "update", it.ID); err != nil {
		return err
	}
	t.apply(func() { t.data[it.ID] = it.Value })
	return nil
}

func (t *target) Delete(ctx context.Context, _ statedb.ReadTxn, _ statedb.Revision, it *item) error {
	if err := t.enter(ctx, "delete", it.ID); err != nil {
		return err
	}
	t.apply(func() { delete(t.data, it.ID) })
	return nil
}

func (t *target) Prune(ctx context.Context, _ statedb.ReadTxn, objs iter.Seq2[*item, statedb.Revision]) error {
	if err := t.enter(ctx, "prune", "*"); err != nil {
		return err
	}
	want := map[string]bool{}
	for it := range objs {
		want[it.ID] = true
	}
	t.apply(func() {
		for k := range t.data {
			if !want[k] {
				delete(t.data, k)
			}
		}
	})
	return nil
}

// batchTarget gives target the BatchOperations interface.
type batchTarget struct{ *target }

func (b batchTarget) UpdateBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	b.enter(ctx, "update-batch", "*")
	for i := range batch {
		batch[i].Result = b.Update(ctx, txn, batch[i].Revision, batch[i].Object)
	}
}

func (b batchTarget) DeleteBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	b.enter(ctx, "delete-batch", "*")
	for i := range batch {
		batch[i].Result = b.Delete(ctx, txn, batch[i].Revision, batch[i].Object)
	}
}

// describe renders target contents as sorted "key=value" words.
func describe(data map[string]string) string {
	words := make([]string, 0, len(data))
	for k, v := range data {
		words = append(words, k+"="+v)
	}
	slices.Sort(words)
	return strings.Join(words, " ")
}

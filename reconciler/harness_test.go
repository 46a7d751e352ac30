package reconciler_test

import (
	"context"
	"iter"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"

	"github.com/converge-go/converge/status"
)

// item is the object reconciled by the script tests and most others. Status serves a single
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

// target is an in-memory target system holding what Update wrote, for
// tests that need operations but no faults (the scripts use
// reconcilertest's).
type target struct {
	mu   sync.Mutex
	data map[string]string
}

func newTarget() *target { return &target{data: map[string]string{}} }

func (t *target) Update(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, it *item) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.data[it.ID] = it.Value
	return nil
}

func (t *target) Delete(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, it *item) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.data, it.ID)
	return nil
}

func (t *target) Prune(_ context.Context, _ statedb.ReadTxn, objs iter.Seq2[*item, statedb.Revision]) error {
	want := map[string]bool{}
	for it := range objs {
		want[it.ID] = true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.data {
		if !want[k] {
			delete(t.data, k)
		}
	}
	return nil
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

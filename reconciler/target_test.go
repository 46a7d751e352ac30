package reconciler_test

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"testing"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
)

// target is the tests' target: a reconcilertest.Target, which keeps what
// is applied and records every call, whose operations a test can hold at
// a precise point (hold, holdAfterApply) and hook. Faults come from
// wrapping it in a reconcilertest.FaultyOps. Set the hooks before the hive
// starts, or later holding mu. It is BatchOperations too, entry by entry.
type target struct {
	*reconcilertest.Target[*item] // nil in TestScale: nothing is kept

	mu sync.Mutex
	hooks
	holds   map[string]*hold // by key; pruneKey for the next prune
	prunes  int              // prunes that returned
	changed chan struct{}    // closed and replaced when a prune returns
}

// hooks run in a target's operations. update, delete and prune run first:
// an error they return is the operation's, with nothing applied. updated
// and deleted run once the object is applied, and may fail it then;
// pruned runs once a prune has removed what the table lacks.
type hooks struct {
	update, delete, updated, deleted func(ctx context.Context, it *item) error
	prune                            func(ctx context.Context) error
	pruned                           func()
}

// pruneKey is the key of a hold on the next prune.
const pruneKey = "(prune)"

func newTarget() *target {
	return &target{Target: reconcilertest.NewTarget(itemKey, itemValue), holds: map[string]*hold{}, changed: make(chan struct{})}
}

// hold is an operation held by a target until let go: see target.hold.
type hold struct {
	afterApply    bool
	succeedAtStop bool       // the held update reports success when its context ends
	started       chan *item // receives the object (nil for a prune) when the operation blocks
	release       chan struct{}
	once          sync.Once
}

// hold holds the next operation on key (pruneKey: the next prune) before
// it applies anything, until let go or its context ends.
func (tg *target) hold(key string) *hold { return tg.setHold(key, false, false) }

// holdAfterApply holds the next update of key once it has applied its
// object; with succeedAtStop it returns success if its context ends.
func (tg *target) holdAfterApply(key string, succeedAtStop bool) *hold {
	return tg.setHold(key, true, succeedAtStop)
}

func (tg *target) setHold(key string, afterApply, succeedAtStop bool) *hold {
	h := &hold{afterApply: afterApply, succeedAtStop: succeedAtStop, started: make(chan *item, 1), release: make(chan struct{})}
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.holds[key] = h
	return h
}

// wait waits until the held operation blocks, and returns its object.
func (h *hold) wait(t testing.TB) *item {
	t.Helper()
	return recv(t, h.started, "the held operation to start")
}

// let lets the held operation, if any, go on. It may be called again.
func (h *hold) let() { h.once.Do(func() { close(h.release) }) }

// block blocks the operation on key if a hold for this point is set.
func (tg *target) block(ctx context.Context, key string, it *item, afterApply bool) error {
	tg.mu.Lock()
	h := tg.holds[key]
	if h == nil || h.afterApply != afterApply {
		tg.mu.Unlock()
		return nil
	}
	delete(tg.holds, key)
	tg.mu.Unlock()
	h.started <- it
	select {
	case <-h.release:
		return nil
	case <-ctx.Done():
		if h.succeedAtStop {
			return nil
		}
		return ctx.Err()
	}
}

// hooked returns the hooks, read under mu.
func (tg *target) hooked() hooks {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.hooks
}

// call calls h if it is set.
func call(h func(context.Context, *item) error, ctx context.Context, it *item) error {
	if h == nil {
		return nil
	}
	return h(ctx, it)
}

func (tg *target) Update(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, it *item) error {
	h := tg.hooked()
	if err := call(h.update, ctx, it); err != nil {
		return err
	}
	if err := tg.block(ctx, it.ID, it, false); err != nil {
		return err
	}
	if tg.Target != nil {
		if err := tg.Target.Update(ctx, txn, rev, it); err != nil {
			return err
		}
	}
	if err := call(h.updated, ctx, it); err != nil {
		return err
	}
	return tg.block(ctx, it.ID, it, true)
}

func (tg *target) Delete(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, it *item) error {
	h := tg.hooked()
	if err := call(h.delete, ctx, it); err != nil {
		return err
	}
	if err := tg.block(ctx, it.ID, it, false); err != nil {
		return err
	}
	if tg.Target != nil {
		if err := tg.Target.Delete(ctx, txn, rev, it); err != nil {
			return err
		}
	}
	return call(h.deleted, ctx, it)
}

func (tg *target) Prune(ctx context.Context, txn statedb.ReadTxn, objs iter.Seq2[*item, statedb.Revision]) error {
	h := tg.hooked()
	defer func() {
		tg.mu.Lock()
		tg.prunes++
		close(tg.changed)
		tg.changed = make(chan struct{})
		tg.mu.Unlock()
	}()
	if h.prune != nil {
		if err := h.prune(ctx); err != nil {
			return err
		}
	}
	if err := tg.block(ctx, pruneKey, nil, false); err != nil {
		return err
	}
	if tg.Target != nil {
		if err := tg.Target.Prune(ctx, txn, objs); err != nil {
			return err
		}
	}
	if h.pruned != nil {
		h.pruned()
	}
	return nil
}

func (tg *target) UpdateBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	for i := range batch {
		batch[i].Result = tg.Update(ctx, txn, batch[i].Revision, batch[i].Object)
	}
}

func (tg *target) DeleteBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	for i := range batch {
		batch[i].Result = tg.Delete(ctx, txn, batch[i].Revision, batch[i].Object)
	}
}

// pruneNow asks f's reconciler for a prune and waits until a prune has
// returned after the request.
func (tg *target) pruneNow(f *fixture) {
	f.t.Helper()
	tg.mu.Lock()
	before := tg.prunes
	tg.mu.Unlock()
	f.rec.Prune()
	tg.waitPrunes(f.t, before+1)
}

// waitPrunes waits until n prunes have returned.
func (tg *target) waitPrunes(t testing.TB, n int) {
	t.Helper()
	waitUntil(t, fmt.Sprint("prune ", n), func() (bool, <-chan struct{}) {
		tg.mu.Lock()
		defer tg.mu.Unlock()
		return tg.prunes >= n, tg.changed
	})
}

// has reports whether the target holds key=value.
func (tg *target) has(key, value string) bool {
	v, ok, _ := tg.Get(key)
	return ok && v == value
}

// count returns how many calls of op on key (on any key if "") tr
// recorded, and how many of them succeeded.
func count(tr reconcilertest.CallRecorder, op reconcilertest.Op, key string) (all, ok int) {
	for _, c := range tr.Calls() {
		if c.Op == op && (key == "" || c.Key == key) {
			all++
			if c.Err == nil {
				ok++
			}
		}
	}
	return all, ok
}

// applied returns the updates and deletes the target applied, in order,
// as "update key=value" and "delete key".
func (tg *target) applied() []string {
	var words []string
	for _, c := range tg.Calls() {
		switch {
		case c.Err != nil:
		case c.Op == reconcilertest.OpUpdate:
			words = append(words, "update "+c.Key+"="+c.Value)
		case c.Op == reconcilertest.OpDelete:
			words = append(words, "delete "+c.Key)
		}
	}
	return words
}

// waitCalls waits until tr has recorded n successful calls of op on key.
func waitCalls(t testing.TB, tr reconcilertest.CallRecorder, op reconcilertest.Op, key string, n int) {
	t.Helper()
	waitUntil(t, fmt.Sprint(n, " calls of ", op, " on ", key), func() (bool, <-chan struct{}) {
		_, changed := tr.CallsWatch()
		_, ok := count(tr, op, key)
		return ok >= n, changed
	})
}

package reconciler_test

import (
	"context"
	"iter"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
)

// target is the one target of these tests: a reconcilertest.Target, which
// holds the key→value pairs the reconciler applied and records every call,
// with two things the kit cannot do. A test can hold the next operation on
// a key, or the next prune, at a precise point (before it applies its
// object, or after) until it lets it go; and it can run code of its own
// first in every operation, with the hooks. Faults come from wrapping a
// target in a reconcilertest.FaultyOps.
//
// Set the hooks before the hive starts, or later holding mu. A target is
// also BatchOperations, entry by entry.
type target struct {
	*reconcilertest.Target[*item] // nil in TestScale: nothing is kept

	mu sync.Mutex
	// update, delete and prune, if set, run first in every operation; an
	// error they return is the operation's, with nothing applied.
	update func(ctx context.Context, it *item) error
	delete func(ctx context.Context, it *item) error
	prune  func(ctx context.Context) error
	// updated and deleted run once an update or delete has applied its
	// object, and may fail it then; pruned runs once a prune has removed
	// what the table lacks.
	updated, deleted func(ctx context.Context, it *item) error
	pruned           func()

	// reverse makes UpdateBatch and DeleteBatch reverse their entries
	// first, as a BatchOperations may reorder them.
	reverse bool

	holds   map[string]*hold // by key; pruneKey for the next prune
	prunes  int              // prunes that returned
	changed chan struct{}    // closed and replaced when a prune returns
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

// hold holds the next operation on key (update or delete; pruneKey for
// the next prune) before it applies anything, until the hold is let go or
// the operation's context ends.
func (tg *target) hold(key string) *hold { return tg.setHold(key, false, false) }

// holdAfterApply holds the next update of key once it has applied its
// object. With succeedAtStop, the update reports success, not its
// context's error, if that context ends while it is held (a stop).
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

// hooks returns the hooks, read under mu.
func (tg *target) hooks() (update, del func(context.Context, *item) error, prune func(context.Context) error, updated, deleted func(context.Context, *item) error, pruned func()) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.update, tg.delete, tg.prune, tg.updated, tg.deleted, tg.pruned
}

func (tg *target) Update(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, it *item) error {
	hook, _, _, updated, _, _ := tg.hooks()
	if hook != nil {
		if err := hook(ctx, it); err != nil {
			return err
		}
	}
	if err := tg.block(ctx, it.ID, it, false); err != nil {
		return err
	}
	if tg.Target != nil {
		if err := tg.Target.Update(ctx, txn, rev, it); err != nil {
			return err
		}
	}
	if updated != nil {
		if err := updated(ctx, it); err != nil {
			return err
		}
	}
	return tg.block(ctx, it.ID, it, true)
}

func (tg *target) Delete(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, it *item) error {
	_, hook, _, _, deleted, _ := tg.hooks()
	if hook != nil {
		if err := hook(ctx, it); err != nil {
			return err
		}
	}
	if err := tg.block(ctx, it.ID, it, false); err != nil {
		return err
	}
	if tg.Target != nil {
		if err := tg.Target.Delete(ctx, txn, rev, it); err != nil {
			return err
		}
	}
	if deleted != nil {
		return deleted(ctx, it)
	}
	return nil
}

func (tg *target) Prune(ctx context.Context, txn statedb.ReadTxn, objs iter.Seq2[*item, statedb.Revision]) (err error) {
	_, _, hook, _, _, pruned := tg.hooks()
	defer func() {
		tg.mu.Lock()
		tg.prunes++
		close(tg.changed)
		tg.changed = make(chan struct{})
		tg.mu.Unlock()
	}()
	if hook != nil {
		if err := hook(ctx); err != nil {
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
	if pruned != nil {
		pruned()
	}
	return nil
}

func (tg *target) UpdateBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	if tg.reverse {
		slices.Reverse(batch)
	}
	for i := range batch {
		batch[i].Result = tg.Update(ctx, txn, batch[i].Revision, batch[i].Object)
	}
}

func (tg *target) DeleteBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	if tg.reverse {
		slices.Reverse(batch)
	}
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
	deadline := time.After(timeout)
	for {
		tg.mu.Lock()
		done, changed := tg.prunes >= n, tg.changed
		tg.mu.Unlock()
		if done {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("timed out waiting for prune %d", n)
		}
	}
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

// waitInFlight waits until at least n calls of tr are in flight, and
// returns them.
func waitInFlight(t testing.TB, tr reconcilertest.CallRecorder, n int) []reconcilertest.Call {
	t.Helper()
	deadline := time.After(timeout)
	for {
		calls, changed := tr.InFlightWatch()
		if len(calls) >= n {
			return calls
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("timed out waiting for %d calls in flight (%d are)", n, len(calls))
		}
	}
}

// waitCalls waits until tr has recorded n successful calls of op on key.
func waitCalls(t testing.TB, tr reconcilertest.CallRecorder, op reconcilertest.Op, key string, n int) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		_, changed := tr.CallsWatch()
		if _, ok := count(tr, op, key); ok >= n {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("timed out waiting for %d calls of %s on %s", n, op, key)
		}
	}
}

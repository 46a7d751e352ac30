package reconciler_test

import (
	"context"
	"errors"
	"iter"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/hive/hivetest"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// pruneTarget is a key→value target whose update of one key applies its
// value first and then blocks (until released, or until its context ends
// if returnAtStop is set, and then reports success), and whose prune
// removes every key the table lacks.
type pruneTarget struct {
	key          string
	returnAtStop bool
	failFirst    bool // the first update of key fails, unapplied
	failed       atomic.Bool
	heldOnce     atomic.Bool

	mu       sync.Mutex
	data     map[string]string
	held     chan struct{} // receives when the update of key blocks
	release  chan struct{}
	pruned   chan struct{}   // receives when a prune has finished
	onPrune  func()          // if set, called by Prune once it has removed what the table lacks
	onUpdate func(id string) // if set, called by Update once it has applied its object
	deletes  atomic.Int32    // Delete calls
}

func newPruneTarget(key string) *pruneTarget {
	return &pruneTarget{
		key:     key,
		data:    map[string]string{},
		held:    make(chan struct{}, 1),
		release: make(chan struct{}),
		pruned:  make(chan struct{}, 1),
	}
}

func (p *pruneTarget) Update(ctx context.Context, _ statedb.ReadTxn, _ statedb.Revision, it *item) error {
	if it.ID == p.key && p.failFirst && p.failed.CompareAndSwap(false, true) {
		return errors.New("first update fails")
	}
	p.mu.Lock()
	p.data[it.ID] = it.Value
	p.mu.Unlock()
	if p.onUpdate != nil {
		p.onUpdate(it.ID)
	}
	if it.ID != p.key {
		return nil
	}
	if !p.heldOnce.CompareAndSwap(false, true) {
		return nil // only the first update of key is held
	}
	p.held <- struct{}{}
	select {
	case <-p.release:
	case <-ctx.Done():
		if !p.returnAtStop {
			return ctx.Err()
		}
	}
	return nil
}

func (p *pruneTarget) Delete(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, it *item) error {
	p.deletes.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.data, it.ID)
	return nil
}

func (p *pruneTarget) Prune(_ context.Context, _ statedb.ReadTxn, objs iter.Seq2[*item, statedb.Revision]) error {
	want := map[string]bool{}
	for obj := range objs {
		want[obj.ID] = true
	}
	p.mu.Lock()
	for k := range p.data {
		if !want[k] {
			delete(p.data, k)
		}
	}
	p.mu.Unlock()
	if p.onPrune != nil {
		p.onPrune()
	}
	select {
	case p.pruned <- struct{}{}:
	default:
	}
	return nil
}

func (p *pruneTarget) get(key string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.data[key]
	return v, ok
}

// Bug 3: a's update is in flight when a is deleted, and a prune then
// removes a from the target. A writer puts a back as it was read (status
// identity included) after the round that commits the update has read its
// changes and before that commit: here the status setter, called as the
// commit prepares a's Done, writes it. The object put back is new work: the
// delete parked behind the update must not run after it, and a must end
// applied and Done.
func TestReviewBug3WriteBackBeforeTheCommitAfterAPrune(t *testing.T) {
	tg := newPruneTarget("a")
	var f *fixture
	var armed atomic.Bool
	var read *item
	wroteBack := make(chan struct{})
	setter := func(it *item, st status.Status) *item {
		if it.ID == "a" && st.Kind == status.KindDone && armed.CompareAndSwap(true, false) {
			// A writer woken here commits before the reconciler's
			// commit. Waited for with a deadline: a reconciler that
			// calls the setter inside its write transaction makes the
			// writer wait for the commit instead.
			go func() {
				f.insertAs(read)
				close(wroteBack)
			}()
			select {
			case <-wroteBack:
			case <-time.After(2 * time.Second):
			}
		}
		it.Status = st
		return it
	}
	f = startFixture(t, tg, &with{setStatus: setter}, reconciler.WithConcurrency(2), reconciler.WithPruning(0))

	read = deleteAndPruneWhileHeld(t, f, tg)

	armed.Store(true)
	close(tg.release)
	recv(t, wroteBack, "the write-back")

	waitApplied(t, f, tg.get, "a", "v1")
}

// Bug 4: as bug 3, but the write-back is read while the update runs, so the
// object is to be applied again after it; then the hive stops, and the
// update returns success as it does. The re-apply must survive the stop:
// after the start the target holds a again.
func TestReviewBug4StopKeepsTheReapplyOfAPrunedFlight(t *testing.T) {
	tg := newPruneTarget("a")
	tg.returnAtStop = true
	f := startFixture(t, tg, nil, reconciler.WithConcurrency(2), reconciler.WithPruning(0))

	read := deleteAndPruneWhileHeld(t, f, tg)
	f.insertAs(read)
	f.settle(2) // the write-back is read while the update runs

	log := hivetest.Logger(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, f.hive.Stop(log, ctx)) // the update returns success
	require.NoError(t, f.hive.Start(log, ctx))

	waitApplied(t, f, tg.get, "a", "v1")
}

// Found by the chaos test after the redesign: as bug 3, but what runs when
// a is deleted is a retry, and what is written back is a as read while it
// ran, with the Error status the retry answers. That write-back is new work
// after the delete, not the retry's own status: the delete parked behind
// the retry must give way to it, and a must end applied and Done.
func TestErrorWrittenBackAfterADeleteWhileItsRetryRuns(t *testing.T) {
	tg := newPruneTarget("a")
	tg.failFirst = true
	f := startFixture(t, tg, nil, reconciler.WithConcurrency(2), reconciler.WithPruning(0),
		reconciler.WithRetry(time.Millisecond, time.Millisecond))

	f.upsert(&item{ID: "a", Value: "v1"})
	recv(t, tg.held, "the retry of a")
	read, ok := f.get("a")
	require.True(t, ok)
	require.Equal(t, status.KindError, read.Status.Kind)
	f.remove("a")
	f.settle(1)
	f.rec.Prune()
	recv(t, tg.pruned, "the prune")
	f.insertAs(read)
	f.settle(2) // the write-back is read while the retry runs
	close(tg.release)

	waitApplied(t, f, tg.get, "a", "v1")
}

// deleteAndPruneWhileHeld writes a=v1, and while its update is held (v1
// applied already) deletes a and has a prune remove it from the target.
// It returns a as read while its update was held.
func deleteAndPruneWhileHeld(t *testing.T, f *fixture, tg *pruneTarget) *item {
	t.Helper()
	f.upsert(&item{ID: "a", Value: "v1"})
	recv(t, tg.held, "the update of a")
	read, ok := f.get("a")
	require.True(t, ok)
	f.remove("a")
	f.settle(1) // the delete is read while the update runs
	f.rec.Prune()
	recv(t, tg.pruned, "the prune")
	_, applied := tg.get("a")
	require.False(t, applied, "the prune left a in the target")
	return read
}

// waitApplied waits for the reconciler to have handled every change so
// far and for key to be Done, and checks that the target holds key=value.
func waitApplied(t *testing.T, f *fixture, target func(string) (string, bool), key, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, _, err := f.rec.WaitUntilReconciled(ctx, f.table.Revision(f.db.ReadTxn()))
	require.NoError(t, err)
	f.waitReconciled()
	obj := f.waitKind(key, status.KindDone)
	assert.Equal(t, value, obj.Value)
	got, ok := target(key)
	assert.True(t, ok, "the table says Done, the target lacks %s", key)
	assert.Equal(t, value, got)
}

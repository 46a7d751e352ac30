package reconciler_test

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// gatedTarget is a target whose updates of one key block until released,
// so that a test can change that object while its update is in flight.
type gatedTarget struct {
	key        string
	applyFirst bool // apply the gated update, then wait
	mu         sync.Mutex
	data       map[string]string
	entered    chan string // receives the value of each gated update as it starts
	release    chan struct{}
}

func newGatedTarget(key string) *gatedTarget {
	return &gatedTarget{
		key:     key,
		data:    map[string]string{},
		entered: make(chan string, 16),
		release: make(chan struct{}),
	}
}

func (g *gatedTarget) ops() *funcOps {
	return &funcOps{
		update: func(ctx context.Context, _ statedb.Revision, it *item) error {
			if it.ID == g.key {
				if g.applyFirst {
					g.mu.Lock()
					g.data[it.ID] = it.Value
					g.mu.Unlock()
				}
				g.entered <- it.Value
				select {
				case <-g.release:
				case <-ctx.Done():
					return ctx.Err()
				}
				if g.applyFirst {
					return nil
				}
			}
			g.mu.Lock()
			g.data[it.ID] = it.Value
			g.mu.Unlock()
			return nil
		},
		delete: func(_ context.Context, _ statedb.Revision, it *item) error {
			g.mu.Lock()
			delete(g.data, it.ID)
			g.mu.Unlock()
			return nil
		},
	}
}

func (g *gatedTarget) get(key string) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	v, ok := g.data[key]
	return v, ok
}

func waitEntered(t *testing.T, g *gatedTarget, want string) {
	t.Helper()
	select {
	case v := <-g.entered:
		require.Equal(t, want, v, "the gated update started for another value")
	case <-time.After(20 * time.Second):
		t.Fatalf("the update of %s=%s never started", g.key, want)
	}
}

// TestObjectChangedBackWhileInFlight changes an object whose update is in
// flight and then writes back the very object value that is being applied
// (same status identity). Whatever happened in between (a delete, a newer
// version) must not be applied after it: once the table is quiet, the
// target holds exactly what the table holds.
func TestObjectChangedBackWhileInFlight(t *testing.T) {
	for _, workers := range []int{1, 4} {
		for _, between := range []string{"delete", "newer version", "newer version, unsettled"} {
			t.Run(fmt.Sprintf("workers=%d/%s", workers, between), func(t *testing.T) {
				g := newGatedTarget("a")
				f := startFixture(t, g.ops(), nil, reconciler.WithConcurrency(workers))
				settle := func(n int) {
					if workers > 1 { // with one worker the loop is blocked too
						f.settle(n)
					}
				}

				f.upsert(&item{ID: "a", Value: "v1"})
				waitEntered(t, g, "v1")
				inFlight, ok := f.get("a")
				require.True(t, ok)

				if between == "delete" {
					f.remove("a")
				} else {
					f.upsert(&item{ID: "a", Value: "v2"})
				}
				settle(1)
				f.insertAs(inFlight) // back to the value being applied
				if between != "newer version, unsettled" {
					// Else the change back may still be unread when the
					// update in flight is committed.
					settle(2)
				}
				close(g.release)
				f.waitReconciled()
				last := f.upsert()
				_, _, err := f.rec.WaitUntilReconciled(context.Background(), last)
				require.NoError(t, err)

				obj, ok := f.get("a")
				require.True(t, ok)
				assert.Equal(t, "v1", obj.Value)
				assert.Equal(t, status.KindDone, obj.Status.Kind)
				got, ok := g.get("a")
				assert.True(t, ok, "the table holds a=v1 Done, the target nothing")
				assert.Equal(t, "v1", got, "the table holds a=v1 Done")
			})
		}
	}
}

// prunedGatedTarget is a gatedTarget whose Prune removes what the desired
// set lacks, and reports each prune on pruned.
type prunedGatedTarget struct {
	*gatedTarget
	pruned chan struct{}
}

func (g *prunedGatedTarget) Prune(_ context.Context, _ statedb.ReadTxn, objs iter.Seq2[*item, statedb.Revision]) error {
	want := map[string]bool{}
	for it := range objs {
		want[it.ID] = true
	}
	g.mu.Lock()
	for k := range g.data {
		if !want[k] {
			delete(g.data, k)
		}
	}
	g.mu.Unlock()
	g.pruned <- struct{}{}
	return nil
}

func (g *prunedGatedTarget) Update(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, it *item) error {
	return g.ops().Update(ctx, txn, rev, it)
}

func (g *prunedGatedTarget) Delete(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, it *item) error {
	return g.ops().Delete(ctx, txn, rev, it)
}

// A prune that runs while an update is in flight for an object deleted
// meanwhile may remove what the update applies; if the object then comes
// back as that very version, it must be applied again, not taken as done.
func TestPruneWhileInFlightThenChangedBack(t *testing.T) {
	g := &prunedGatedTarget{gatedTarget: newGatedTarget("a"), pruned: make(chan struct{}, 10)}
	g.applyFirst = true // a is in the target while its update is in flight
	f := startFixture(t, g, nil, reconciler.WithConcurrency(4))
	<-g.pruned // the first prune, once the table is initialized

	f.upsert(&item{ID: "a", Value: "v1"})
	waitEntered(t, g.gatedTarget, "v1")
	inFlight, _ := f.get("a")
	f.remove("a")
	f.settle(1)
	f.rec.Prune()
	select {
	case <-g.pruned:
	case <-time.After(20 * time.Second):
		t.Fatal("no prune")
	}
	f.insertAs(inFlight) // back to the version in flight
	f.settle(2)
	_, present := g.get("a")
	require.False(t, present, "the prune removed a while its update was in flight")
	close(g.release)
	f.waitReconciled()
	last := f.upsert()
	_, _, err := f.rec.WaitUntilReconciled(context.Background(), last)
	require.NoError(t, err)

	obj, _ := f.get("a")
	assert.Equal(t, status.KindDone, obj.Status.Kind)
	got, ok := g.get("a")
	assert.True(t, ok && got == "v1", "the table holds a=v1 Done; the target has %q (present: %v)", got, ok)
}

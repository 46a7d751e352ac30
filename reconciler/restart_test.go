package reconciler_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/cilium/hive/hivetest"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// Stopping a hive and starting the same hive again (as the "hive stop" and
// "hive start" script commands do) restarts the reconciler's job. Work it
// had collected but not committed when stopped, including an update cut
// short in flight, and changes made while it was stopped, including
// deletes, all converge after the start.
func TestStopAndStartTheSameHive(t *testing.T) {
	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			g := newGatedTarget("held")
			f := startFixture(t, g.ops(), nil, reconciler.WithConcurrency(workers))
			f.upsert(&item{ID: "a", Value: "1"}, &item{ID: "b", Value: "1"})
			f.waitReconciled()
			f.upsert(&item{ID: "held", Value: "1"})
			waitEntered(t, g, "1") // its update is in flight when the hive stops

			log := hivetest.Logger(t)
			require.NoError(t, f.hive.Stop(log, context.Background()))
			f.remove("a")
			f.upsert(&item{ID: "c", Value: "1"}, &item{ID: "b", Value: "2"})
			close(g.release)
			require.NoError(t, f.hive.Start(log, context.Background()))

			f.waitReconciled()
			last := f.upsert()
			_, _, err := f.rec.WaitUntilReconciled(context.Background(), last)
			require.NoError(t, err)
			for id, want := range map[string]string{"b": "2", "c": "1", "held": "1"} {
				got, ok := g.get(id)
				assert.True(t, ok && got == want, "target %s=%q (present: %v), want %q", id, got, ok, want)
				obj, _ := f.get(id)
				assert.Equal(t, status.KindDone, obj.Status.Kind, id)
			}
			_, ok := g.get("a")
			assert.False(t, ok, "a was deleted while the hive was stopped")
		})
	}
}

// Work carried over a stop is superseded by a change of the same object
// read after the start, also one that waits its turn as a refresh: a
// refresh carried over, then written again with the same Refreshing status
// while the hive was stopped, is applied once, not once as carried work and
// once as the new change.
func TestCarriedRefreshWrittenAgainIsAppliedOnce(t *testing.T) {
	g := newGatedTarget("held")
	var mu sync.Mutex
	updates := map[string]int{}
	ops := g.ops()
	gated := ops.update
	ops.update = func(ctx context.Context, rev statedb.Revision, it *item) error {
		err := gated(ctx, rev, it)
		if err == nil {
			mu.Lock()
			updates[it.ID]++
			mu.Unlock()
		}
		return err
	}
	f := startFixture(t, ops, nil)

	// One round takes both: held first, as a fresh change, then x, as a
	// refresh. held's update is in flight when the hive stops, so x is
	// carried over without having run.
	x := &item{ID: "x", Value: "1", Status: status.Refreshing()}
	wtxn := f.db.WriteTxn(f.table)
	_, _, err := f.table.Insert(wtxn, &item{ID: "held", Value: "1", Status: status.Pending()})
	require.NoError(t, err)
	_, _, err = f.table.Insert(wtxn, x)
	require.NoError(t, err)
	wtxn.Commit()
	waitEntered(t, g, "1")

	log := hivetest.Logger(t)
	require.NoError(t, f.hive.Stop(log, context.Background()))
	f.insertAs(x.clone()) // the same version and status, a new revision
	close(g.release)
	require.NoError(t, f.hive.Start(log, context.Background()))

	f.waitReconciled()
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 1, updates["x"], "updates of x")
	assert.Equal(t, 1, updates["held"], "updates of held")
}

package sets_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/sets"
	"github.com/converge-go/converge/status"
)

// waitTableAsync runs st.Wait on a goroutine of its own.
func waitTableAsync(c context.Context, st *sets.Table[*node], names []string, opts ...sets.WaitOption) <-chan error {
	out := make(chan error, 1)
	go func() { out <- st.Wait(c, names, opts...) }()
	return out
}

func receiveErr(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(timeout):
		t.Fatal("timed out waiting for Table.Wait")
		return nil
	}
}

// notYet fails the test if ch already has an outcome.
func notYet(t *testing.T, ch <-chan error, why string) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("Wait returned (%v) although %s", err, why)
	default:
	}
}

func TestWaitWaitsForEveryNameOfTheSnapshot(t *testing.T) {
	db, tbl, st := newTable(t)
	fill(t, db, tbl, 3, func() status.Set { return status.NewSet().Pending("b").Set("a", status.Done()) })
	out := waitTableAsync(ctx(t), st, []string{"a", "b"}, sets.Snapshot(db.ReadTxn()))

	insert(t, db, tbl, &node{Name: "later", Statuses: status.NewSet().Pending("a", "b")})
	writeStatus(t, db, tbl, "n0000", "b", status.Done())
	writeStatus(t, db, tbl, "n0001", "b", status.Error(errors.New("retry me")))
	notYet(t, out, "a retryable Error is not settled without DoneOrError")
	writeStatus(t, db, tbl, "n0001", "b", status.Done())
	wtxn := db.WriteTxn(tbl)
	_, _, err := tbl.Delete(wtxn, &node{Name: "n0002"})
	require.NoError(t, err)
	wtxn.Commit()
	require.NoError(t, receiveErr(t, out), "n0002 deleted counts, and the object inserted later is not waited for")
}

func TestWaitReturnsTheObjectsInError(t *testing.T) {
	db, tbl, st := newTable(t)
	fill(t, db, tbl, 2, func() status.Set { return status.NewSet().Pending("b").Set("a", status.Done()) })

	out := waitTableAsync(ctx(t), st, []string{"a", "b"}, sets.DoneOrError())
	writeStatus(t, db, tbl, "n0000", "b", status.Error(errors.New("disk full")))
	writeStatus(t, db, tbl, "n0001", "b", status.Done())
	err := receiveErr(t, out)
	require.ErrorIs(t, err, reconciler.ErrObjectFailed)
	assert.Contains(t, err.Error(), "1 object(s) failed: n0000 (b: Error: disk full)")

	// Without DoneOrError, a terminal Error settles (it is not retried).
	writeStatus(t, db, tbl, "n0000", "b", status.TerminalError(errors.New("bad config")))
	err = st.Wait(ctx(t), []string{"a", "b"})
	require.ErrorIs(t, err, reconciler.ErrObjectFailed)
	assert.Contains(t, err.Error(), "n0000 (b: Error (terminal): bad config)")
}

// TestWaitReadsAMissingNameAsPending: a name that joins is waited for
// until its reconciler has written every object.
func TestWaitReadsAMissingNameAsPending(t *testing.T) {
	db, tbl, st := newTable(t)
	fill(t, db, tbl, 12, func() status.Set { return status.NewSet().Set("a", status.Done()) })
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := st.Wait(short, []string{"a", "c"})
	require.ErrorIs(t, err, sets.ErrNotSettled)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "12 object(s) not settled: n0000 (c: Pending), n0001 (c: Pending)")
	assert.Contains(t, err.Error(), "n0009 (c: Pending) and 2 more object(s)")

	require.NoError(t, st.Wait(ctx(t), []string{"a"}))
}

func TestWaitRefusesBadInput(t *testing.T) {
	_, _, st := newTable(t)
	for _, names := range [][]string{nil, {""}, {"a", "a"}, {"a b"}} {
		require.ErrorIs(t, st.Wait(ctx(t), names), reconciler.ErrInvalidConfig, "%q", names)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, st.Wait(done, []string{"a"}), context.Canceled)
}

// TestNamesJoinLeaveAndRefreshWithReconcilers runs real reconcilers: b
// joins a table a has reconciled, a refresh of b applies each object again
// for b only, failures are returned, and a name retired no longer holds up
// a wait over the set.
func TestNamesJoinLeaveAndRefreshWithReconcilers(t *testing.T) {
	w := startWorld(t, []string{"a"}, nil)
	const n = 50
	fill(t, w.db, w.nodes, n, func() status.Set { return status.NewSet().Pending("a") })
	require.NoError(t, w.set.Wait(ctx(t), []string{"a"}))
	require.Equal(t, n, w.ops.count("a"))

	// b joins: it reads its missing entry as Pending.
	require.NoError(t, w.register("b", nil))
	require.NoError(t, w.set.Wait(ctx(t), []string{"a", "b"}))
	assert.Equal(t, n, w.ops.count("b"), "b applied every object once")
	assert.Equal(t, n, w.ops.count("a"), "b's statuses made a redo nothing")

	// Refresh b, with one object failing.
	w.ops.failing("b", "n0007", errors.New("no route"))
	m, err := w.set.Refresh(ctx(t), "b")
	require.NoError(t, err)
	r, err := m.Wait(ctx(t))
	require.NoError(t, err)
	assert.Equal(t, n-1, r.Done)
	require.Len(t, r.Failed, 1)
	assert.Equal(t, "n0007", r.Failed[0].Key)
	assert.Equal(t, "no route", r.Failed[0].Status.Error)
	assert.GreaterOrEqual(t, w.ops.count("b"), 2*n)
	assert.Equal(t, n, w.ops.count("a"), "a is not refreshed")

	// c is registered, runs, then leaves for good: its entries are retired
	// and a wait over the set no longer holds for it.
	insert(t, w.db, w.nodes, &node{Name: "x", Statuses: status.NewSet().Pending("a", "b", "c")})
	changed, err := w.set.Retire(ctx(t), "c")
	require.NoError(t, err)
	assert.Equal(t, 1, changed)
	w.ops.failing("b", "n0007", nil)
	require.NoError(t, w.set.Wait(ctx(t), []string{"a", "b"}))
	for obj := range w.nodes.All(w.db.ReadTxn()) {
		require.False(t, obj.Statuses.IsPendingOrRefreshing(), "%s: %s", obj.Name, obj.Statuses)
	}
}

// TestRefreshWithADriftCheck: objects in sync are written Done without an
// Update; the refresh's wait counts them.
func TestRefreshWithADriftCheck(t *testing.T) {
	w := startWorld(t, []string{"a", "b"}, func(name string) []reconciler.Option {
		if name != "b" {
			return nil
		}
		return []reconciler.Option{reconciler.WithDriftCheck(func(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, n *node) (bool, error) {
			return n.Name != "n0003", nil // n0003 drifted
		})}
	})
	const n = 20
	fill(t, w.db, w.nodes, n, func() status.Set { return status.NewSet().Pending("a", "b") })
	require.NoError(t, w.set.Wait(ctx(t), []string{"a", "b"}))
	before := w.ops.count("b")

	m, err := w.set.Refresh(ctx(t), "b")
	require.NoError(t, err)
	r, err := m.Wait(ctx(t))
	require.NoError(t, err)
	assert.Equal(t, n, r.Done)
	assert.Empty(t, r.Failed)
	assert.Equal(t, before+1, w.ops.count("b"), "only the drifted object was updated")
	require.NoError(t, w.set.Wait(ctx(t), []string{"a", "b"}))
	assert.Equal(t, fmt.Sprint(n), fmt.Sprint(w.ops.count("a")), "a not refreshed")
}

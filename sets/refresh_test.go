package sets_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/sets"
	"github.com/converge-go/converge/status"
)

// waitAsync runs m.Wait on a goroutine of its own; the test reads its
// outcome from the channel.
func waitAsync(c context.Context, m *sets.Marked[*node]) <-chan waited {
	out := make(chan waited, 1)
	go func() {
		r, err := m.Wait(c)
		out <- waited{r, err}
	}()
	return out
}

type waited struct {
	r   sets.Result
	err error
}

// receive reads what a waitAsync gave, failing the test after timeout.
func receive(t *testing.T, ch <-chan waited) waited {
	t.Helper()
	select {
	case w := <-ch:
		return w
	case <-time.After(timeout):
		t.Fatal("timed out waiting for Marked.Wait")
		return waited{}
	}
}

func TestRefreshMarksAndWaitCountsEachAttempt(t *testing.T) {
	db, tbl, st := newTable(t)
	fill(t, db, tbl, 5, func() status.Set { return status.NewSet().Set("a", status.Done()).Set("b", status.Done()) })
	aBefore := get(t, db, tbl, "n0000").Statuses.Get("a")

	m, err := st.Refresh(ctx(t), "b")
	require.NoError(t, err)
	require.Equal(t, 5, m.Len())
	for obj := range tbl.All(db.ReadTxn()) {
		require.Equal(t, status.KindRefreshing, obj.Statuses.Get("b").Kind, obj.Name)
	}
	assert.Equal(t, aBefore.ID(), get(t, db, tbl, "n0000").Statuses.Get("a").ID(), "a's status is left as it was")

	out := waitAsync(ctx(t), m)
	writeStatus(t, db, tbl, "n0000", "b", status.Done())
	writeStatus(t, db, tbl, "n0001", "b", status.Done())
	writeStatus(t, db, tbl, "n0002", "b", status.Error(errors.New("disk full")))
	wtxn := db.WriteTxn(tbl)
	_, _, err = tbl.Delete(wtxn, &node{Name: "n0003"})
	require.NoError(t, err)
	wtxn.Commit()
	// The user changes n0004: the attempt of the new version counts.
	n4 := get(t, db, tbl, "n0004").clone()
	n4.Value, n4.Statuses = "2", n4.Statuses.Pending()
	insert(t, db, tbl, n4)
	select {
	case w := <-out:
		t.Fatalf("Wait returned before n0004's new version was attempted: %+v", w)
	default:
	}
	writeStatus(t, db, tbl, "n0004", "b", status.Done())

	w := receive(t, out)
	require.NoError(t, w.err)
	assert.Equal(t, 3, w.r.Done)
	assert.Equal(t, 1, w.r.Deleted)
	require.Len(t, w.r.Failed, 1)
	assert.Equal(t, "n0002", w.r.Failed[0].Key)
	assert.Equal(t, "b", w.r.Failed[0].Name)
	assert.Equal(t, "disk full", w.r.Failed[0].Status.Error)
	require.ErrorIs(t, w.r.Err(), reconciler.ErrObjectFailed)
	assert.Contains(t, w.r.Err().Error(), "n0002 (b: Error: disk full)")

	// A second Wait returns the same, at once.
	again, err := m.Wait(ctx(t))
	require.NoError(t, err)
	assert.Equal(t, w.r, again)
}

// TestRefreshGivesPendingAFreshPending: a new version not yet applied stays
// Pending (a drift check must not skip it), with a new identity, so an
// attempt under way at the mark does not count.
func TestRefreshGivesPendingAFreshPending(t *testing.T) {
	db, tbl, st := newTable(t)
	fill(t, db, tbl, 1, func() status.Set { return status.NewSet().Pending("b") })
	before := get(t, db, tbl, "n0000").Statuses.Get("b")
	_, err := st.Refresh(ctx(t), "b")
	require.NoError(t, err)
	after := get(t, db, tbl, "n0000").Statuses.Get("b")
	assert.Equal(t, status.KindPending, after.Kind)
	assert.NotEqual(t, before.ID(), after.ID())
}

func TestRefreshSelectsWithQueriesEachObjectOnce(t *testing.T) {
	db, tbl, st := newTable(t)
	fill(t, db, tbl, 6, func() status.Set { return status.NewSet().Set("b", status.Done()) })
	n := get(t, db, tbl, "n0001").clone()
	n.Value = "2"
	insert(t, db, tbl, n)

	m, err := st.Refresh(ctx(t), "b", nodeValue.Query("2"), nodeName.Query("n0001"), nodeName.Query("n0002"))
	require.NoError(t, err)
	assert.Equal(t, 2, m.Len(), "n0001 and n0002, n0001 once")
	for obj := range tbl.All(db.ReadTxn()) {
		want := status.KindDone
		if obj.Name == "n0001" || obj.Name == "n0002" {
			want = status.KindRefreshing
		}
		assert.Equal(t, want, obj.Statuses.Get("b").Kind, obj.Name)
	}
}

func TestRefreshRefusesBadInput(t *testing.T) {
	db, tbl, st := newTable(t)
	fill(t, db, tbl, 2, func() status.Set { return status.NewSet().Set("b", status.Done()) })
	for _, name := range []string{"", "b c"} {
		_, err := st.Refresh(ctx(t), name)
		require.ErrorIs(t, err, reconciler.ErrInvalidConfig, "%q", name)
	}
	other := statedb.Index[*node, string]{Name: "other", FromObject: func(n *node) index.KeySet { return index.NewKeySet(index.String(n.Name)) }, FromKey: index.String}
	_, err := st.Refresh(ctx(t), "b", other.Query("x"))
	require.ErrorIs(t, err, reconciler.ErrInvalidConfig, "a query on no index of the table")

	done, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = st.Refresh(done, "b")
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, status.KindDone, get(t, db, tbl, "n0000").Statuses.Get("b").Kind, "nothing marked")

	var nilMarked *sets.Marked[*node]
	_, err = nilMarked.Wait(ctx(t))
	require.ErrorIs(t, err, reconciler.ErrInvalidConfig)

	panicky, err := sets.Of(db, tbl, (*node).clone, getSet, setSet)
	require.NoError(t, err)
	m, err := panicky.Refresh(ctx(t), "b")
	require.NoError(t, err)
	broken, err := sets.Of(db, tbl, (*node).clone, func(*node) status.Set { panic("get") }, setSet)
	require.NoError(t, err)
	_, err = broken.Refresh(ctx(t), "b")
	require.ErrorIs(t, err, sets.ErrFuncPanicked)
	require.Equal(t, 2, m.Len())
}

func TestMarkedWaitListsWhatIsLeftWhenCtxEnds(t *testing.T) {
	db, tbl, st := newTable(t)
	fill(t, db, tbl, 15, func() status.Set { return status.NewSet().Set("b", status.Done()) })
	m, err := st.Refresh(ctx(t), "b")
	require.NoError(t, err)

	short, cancel := context.WithCancel(context.Background())
	cancel()
	r, err := m.Wait(short)
	require.ErrorIs(t, err, sets.ErrNotSettled)
	require.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), "15 of 15 object(s) not attempted: n0000 (b: Refreshing), n0001 (b: Refreshing)")
	assert.Contains(t, err.Error(), "n0009 (b: Refreshing) and 5 more object(s)")
	assert.NotContains(t, err.Error(), "n0010")
	assert.Zero(t, r.Done)

	for i := range 15 {
		writeStatus(t, db, tbl, fmt.Sprintf("n%04d", i), "b", status.Done())
	}
	r, err = m.Wait(ctx(t))
	require.NoError(t, err)
	assert.Equal(t, 15, r.Done)
}

func TestMarkedWaitReturnsAPanicOfGet(t *testing.T) {
	db := statedb.New()
	tbl, err := statedb.NewTable(db, "nodes", nodeName)
	require.NoError(t, err)
	var broken bool
	st, err := sets.Of(db, tbl, (*node).clone, func(n *node) status.Set {
		if broken {
			panic("get broke")
		}
		return n.Statuses
	}, setSet)
	require.NoError(t, err)
	fill(t, db, tbl, 3, func() status.Set { return status.NewSet().Set("b", status.Done()) })
	m, err := st.Refresh(ctx(t), "b")
	require.NoError(t, err)
	broken = true
	_, err = m.Wait(ctx(t))
	require.ErrorIs(t, err, sets.ErrFuncPanicked)
	assert.True(t, strings.Contains(err.Error(), "get broke"), err.Error())
}

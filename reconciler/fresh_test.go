package reconciler_test

// New versions and deletes are taken before retries, refresh marks and the
// backlog, so those never delay a later write by more than a round, however
// many there are.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
)

// updatedKeys returns the keys of fo's update calls from the n-th on.
func updatedKeys(fo *reconcilertest.FaultyOps[*item], n int) []string {
	var keys []string
	for _, c := range fo.Calls()[n:] {
		if c.Op == reconcilertest.OpUpdate {
			keys = append(keys, c.Key)
		}
	}
	return keys
}

// A fresh write waits at most one round behind refresh marks, however many
// there are: the first refresh is held, and its round with it, while the
// write is made; the held refresh, the rest of its round (at most round-1
// objects), and then the fresh object are applied. Every refresh still
// runs, once.
func TestFreshWriteOvertakesRefreshes(t *testing.T) {
	const n, round = 5000, 100
	fo := reconcilertest.NewFaultyOps(itemKey, newTarget(), nil)
	f := startFixture(t, fo, nil, reconciler.WithRoundLimits(round, nil))
	objs := make([]*item, n)
	for i := range objs {
		objs[i] = &item{ID: fmt.Sprintf("o%04d", i)}
	}
	f.upsert(objs...)
	f.waitReconciled()

	require.NoError(t, fo.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay, Op: reconcilertest.OpUpdate, Next: 1}))
	marked := len(fo.Calls())
	wtxn := f.db.WriteTxn(f.table)
	for obj := range f.table.All(wtxn) {
		_, _, err := f.table.Insert(wtxn, obj.clone().setStatus(status.Refreshing()))
		require.NoError(t, err)
	}
	wtxn.Commit()
	waitInFlight(t, fo, 1) // the first refresh's round runs
	f.upsert(&item{ID: "fresh"})
	fo.Clear("")
	f.waitReconciled()

	order := updatedKeys(fo, marked)
	at := slices.Index(order, "fresh")
	require.GreaterOrEqual(t, at, 0, "the fresh object was never updated")
	assert.LessOrEqual(t, at, round, "the fresh write waited behind %d refreshes", at)
	assert.Len(t, order, n+1, "every refresh still ran, once")
}

// A backlog larger than any internal cap (the table's content when the
// reconciler starts) does not hold a fresh write back by more than a
// round: the backlog's first update is held, and its round with it, while
// the write is made. Found by the second review (bug 10).
func TestFreshWriteOvertakesAHugeBacklog(t *testing.T) {
	const backlog = 140_000 // more than the 1<<17 the deferred queue once held
	const round = 1000      // the default
	fo := reconcilertest.NewFaultyOps(itemKey, newTarget(), nil)
	require.NoError(t, fo.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay, Op: reconcilertest.OpUpdate, Next: 1}))
	f := startFixture(t, fo, &with{setup: func(f *fixture) []reconciler.Option {
		wtxn := f.db.WriteTxn(f.table)
		for i := range backlog {
			_, _, err := f.table.Insert(wtxn, &item{ID: fmt.Sprintf("k%06d", i), Status: status.Pending()})
			require.NoError(t, err)
		}
		wtxn.Commit()
		return nil
	}})
	waitInFlight(t, fo, 1) // the backlog's first round runs
	f.upsert(&item{ID: "fresh"})
	fo.Clear("")
	f.waitKind("fresh", status.KindDone)
	before := slices.Index(updatedKeys(fo, 0), "fresh")
	require.GreaterOrEqual(t, before, 0)
	assert.LessOrEqual(t, before, round, "%d backlog updates ran before the fresh write's", before)
	f.waitReconciled(3 * time.Minute) // with -race on a busy machine, 140,000 objects take a while
}

// Retries that are due every round do not starve refresh marks (nor
// objects marked by a dependency, nor the backlog found at start): they
// share the budget left after fresh changes.
func TestRefreshesAreNotStarvedByEndlessRetries(t *testing.T) {
	const healthy, failing, round = 50, 1000, 10
	var refreshed, failures atomic.Int32
	tg := newTarget()
	tg.update = func(_ context.Context, it *item) error {
		if strings.HasPrefix(it.ID, "fail") {
			failures.Add(1)
			return reconciler.RetryAfter(0, errors.New("always"))
		}
		if it.Status.Kind == status.KindRefreshing {
			refreshed.Add(1)
		}
		return nil
	}
	f := startFixture(t, tg, nil, reconciler.WithRoundLimits(round, nil))
	objs := make([]*item, healthy)
	for i := range objs {
		objs[i] = &item{ID: fmt.Sprintf("ok%02d", i)}
	}
	f.upsert(objs...)
	f.waitReconciled()
	objs = make([]*item, failing)
	for i := range objs {
		objs[i] = &item{ID: fmt.Sprintf("fail%04d", i)}
	}
	f.upsert(objs...)
	// Once every failing object has failed twice, due retries are more than
	// a round can take, for as long as the test runs.
	require.Eventually(t, func() bool { return failures.Load() >= 2*failing }, timeout, time.Millisecond)

	wtxn := f.db.WriteTxn(f.table)
	for i := range healthy {
		obj, _, _ := f.table.Get(wtxn, itemID.Query(fmt.Sprintf("ok%02d", i)))
		_, _, err := f.table.Insert(wtxn, obj.clone().setStatus(status.Refreshing()))
		require.NoError(t, err)
	}
	wtxn.Commit()
	require.Eventually(t, func() bool { return refreshed.Load() >= healthy }, timeout, time.Millisecond,
		"only %d of %d refreshes while %d objects fail endlessly", refreshed.Load(), healthy, failing)
}

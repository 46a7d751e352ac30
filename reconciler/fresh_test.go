package reconciler_test

// New versions and deletes are taken before retries, refresh marks and the
// backlog, so those never delay a later write by more than a round, however
// many there are: testdata/fresh_*.txtar. Here, retries do not starve
// refreshes either.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

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

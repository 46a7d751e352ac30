package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// Scripts written for the StateDB reconciler match its "N error(s)" wording.
func TestHealthSaysErrorsLikeTheStateDBReconciler(t *testing.T) {
	failing := map[string]bool{"a": true, "b": true}
	ops := &funcOps{update: func(_ context.Context, _ statedb.Revision, it *item) error {
		if failing[it.ID] {
			return errors.New("disk full")
		}
		return nil
	}}
	f := startFixture(t, ops, nil, reconciler.WithRetry(time.Hour, time.Hour))
	f.upsert(&item{ID: "a"}, &item{ID: "b"}, &item{ID: "c"})
	f.waitReconciled()
	upstream := regexp.MustCompile(`^2 error\(s\)`)
	f.waitHealth(func(level cell.Level, msg string) bool {
		return level == cell.StatusDegraded && upstream.MatchString(msg) &&
			strings.Contains(msg, "2 object(s) failing")
	})
}

// Health lists the failing objects whose next attempt comes first, in that
// order, and counts the rest.
func TestHealthListsEarliestRetriesFirst(t *testing.T) {
	const n = 15
	ops := &funcOps{update: func(_ context.Context, _ statedb.Revision, it *item) error {
		var i int
		fmt.Sscanf(it.ID, "k%d", &i)
		// Later keys retry sooner, so insertion order is not retry order.
		return reconciler.RetryAfter(time.Duration(n-i)*time.Hour, errors.New("busy"))
	}}
	f := startFixture(t, ops, nil)
	objs := make([]*item, n)
	for i := range objs {
		objs[i] = &item{ID: fmt.Sprintf("k%02d", i)}
	}
	f.upsert(objs...)
	f.waitReconciled()
	var msg string
	f.waitHealth(func(level cell.Level, m string) bool {
		msg = m
		return level == cell.StatusDegraded && strings.Contains(m, fmt.Sprintf("%d error(s)", n))
	})
	order := regexp.MustCompile(`k\d\d`).FindAllString(msg, -1)
	want := []string{"k14", "k13", "k12", "k11", "k10", "k09", "k08", "k07", "k06", "k05"}
	assert.Equal(t, want, order, "health: %s", msg)
	assert.Contains(t, msg, "5 more error(s) omitted")
}

// reconciliation_count counts rounds that ran operations, as documented,
// not every wake-up of the loop.
func TestReconciliationCountCountsRoundsWithOperations(t *testing.T) {
	m := metrics.NewUnpublishedExpVar()
	pruned := make(chan struct{}, 10)
	ops := &funcOps{prune: func(context.Context) error { pruned <- struct{}{}; return nil }}
	f := startFixture(t, ops, nil, reconciler.WithMetrics(m))
	rev := f.upsert(&item{ID: "a"})
	f.waitKind("a", status.KindDone)
	_, _, err := f.rec.WaitUntilReconciled(context.Background(), rev)
	require.NoError(t, err)
	count := func() string { return m.ReconciliationCountVar.String() }
	before := count()
	for range 5 {
		f.rec.Prune()
		select {
		case <-pruned:
		case <-time.After(20 * time.Second):
			t.Fatal("no prune")
		}
	}
	f.waitReconciled()
	assert.Equal(t, before, count(), "prune wake-ups ran no operations")
}

package reconciler_test

// The reconcile job's health.

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
	"golang.org/x/time/rate"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// Health lists the failing objects whose next attempt comes first, in that
// order, and counts the rest.
func TestHealthListsEarliestRetriesFirst(t *testing.T) {
	const n = 15
	tg := newTarget()
	tg.update = func(_ context.Context, it *item) error {
		var i int
		fmt.Sscanf(it.ID, "k%d", &i)
		// Later keys retry sooner, so insertion order is not retry order.
		return reconciler.RetryAfter(time.Duration(n-i)*time.Hour, errors.New("busy"))
	}
	f := startFixture(t, tg, nil)
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

// A round limiter that turns unusable while the reconciler runs (its owner
// set the burst to zero) neither stops the loop nor goes unnoticed: work
// goes on and health says why.
func TestRoundLimiterBrokenAtRunTimeDegradesHealth(t *testing.T) {
	lim := rate.NewLimiter(rate.Inf, 1)
	f := startFixture(t, newTarget(), nil, reconciler.WithRoundLimits(10, lim))
	f.upsert(&item{ID: "a"})
	f.waitKind("a", status.KindDone)

	lim.SetLimit(100)
	lim.SetBurst(0)
	f.upsert(&item{ID: "b"})
	f.waitKind("b", status.KindDone)
	f.waitHealth(func(level cell.Level, msg string) bool {
		return level == cell.StatusDegraded && strings.Contains(msg, "limiter")
	})
	f.remove("a")
	f.upsert(&item{ID: "c"})
	f.waitKind("c", status.KindDone)
}

// The health tree has the children the StateDB reconciler's has, named
// after the reconciler, refreshing off included, and one per dependency.
func TestHealthChildrenAreNamedLikeTheStateDBReconciler(t *testing.T) {
	for _, name := range []string{"", "foo"} {
		for _, refresh := range []bool{false, true} {
			t.Run(fmt.Sprintf("name=%q,refresh=%v", name, refresh), func(t *testing.T) {
				opts := []reconciler.Option{reconciler.WithName(name)}
				if name == "" {
					opts = nil
				}
				if refresh {
					opts = append(opts, reconciler.WithRefreshing(time.Hour, nil))
				}
				f := startFixture(t, newTarget(), withDeps(t, new(statedb.RWTable[*item]), sameID), opts...)
				f.upsert(&item{ID: "a", Value: "1"})
				f.caughtUp()
				suffix := ""
				if name != "" {
					suffix = "-" + name
				}
				for _, child := range []string{"job-reconcile" + suffix, "job-refresh" + suffix, "job-dependency-deps" + suffix} {
					f.waitHealth(func(cell.Level, string) bool { return true }, child)
				}
			})
		}
	}
}

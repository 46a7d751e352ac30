package reconciler_test

// The reconcile job's health. (Failing objects listed earliest retry
// first: testdata/health_order.txtar.)

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"golang.org/x/time/rate"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

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

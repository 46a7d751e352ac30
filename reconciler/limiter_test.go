package reconciler_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// A limiter whose Wait can never succeed would stop the loop for good, so
// Register refuses it.
func TestRegisterRefusesLimitersThatNeverAllow(t *testing.T) {
	db := statedb.New()
	table, err := statedb.NewTable(db, "items", itemID)
	require.NoError(t, err)
	params := reconciler.Params{Log: slog.Default(), DB: db, JobGroup: &fakeGroup{}}
	cases := map[string]reconciler.Option{
		"round burst 0":   reconciler.WithRoundLimits(10, rate.NewLimiter(100, 0)),
		"round limit 0":   reconciler.WithRoundLimits(10, rate.NewLimiter(0, 5)),
		"refresh burst 0": reconciler.WithRefreshing(time.Minute, rate.NewLimiter(100, 0)),
		"refresh limit 0": reconciler.WithRefreshing(time.Minute, rate.NewLimiter(0, 5)),
	}
	for name, opt := range cases {
		t.Run(name, func(t *testing.T) {
			r, err := reconciler.Register(params, table, (*item).clone, (*item).setStatus, (*item).getStatus, newTarget(), nil, opt)
			require.ErrorIs(t, err, reconciler.ErrInvalidConfig)
			assert.Nil(t, r)
			assert.Contains(t, err.Error(), "limiter")
		})
	}
	t.Run("infinite limit with burst 0 is fine", func(t *testing.T) {
		_, err := reconciler.Register(params, table, (*item).clone, (*item).setStatus, (*item).getStatus, newTarget(), nil,
			reconciler.WithRoundLimits(10, rate.NewLimiter(rate.Inf, 0)))
		require.NoError(t, err)
	})
}

// A limiter that turns unusable while the reconciler runs (its owner set
// the burst to zero) must neither stop the loop nor go unnoticed: work goes
// on and health says why.
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

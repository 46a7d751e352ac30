package reconciler_test

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// fakeGroup records jobs instead of running them, for Register called
// outside a hive.
type fakeGroup struct{ jobs []job.Job }

func (g *fakeGroup) Add(jobs ...job.Job)                { g.jobs = append(g.jobs, jobs...) }
func (g *fakeGroup) Scoped(name string) job.ScopedGroup { return g }

// Register refuses a missing argument, an option out of range or a limiter
// that never allows, with an error wrapping ErrInvalidConfig that says
// which, and never panics.
func TestRegisterRejectsBadInput(t *testing.T) {
	db := statedb.New()
	table, err := statedb.NewTable(db, "items", itemID)
	require.NoError(t, err)
	tgt := newTarget()

	type args struct {
		params    reconciler.Params
		table     statedb.RWTable[*item]
		clone     func(*item) *item
		setStatus func(*item, status.Status) *item
		getStatus func(*item) status.Status
		ops       reconciler.Operations[*item]
		opts      []reconciler.Option
	}
	good := func() args {
		return args{
			params:    reconciler.Params{Log: slog.Default(), DB: db, JobGroup: &fakeGroup{}},
			table:     table,
			clone:     (*item).clone,
			setStatus: (*item).setStatus,
			getStatus: (*item).getStatus,
			ops:       tgt,
		}
	}
	with := func(o ...reconciler.Option) func(*args) { return func(a *args) { a.opts = o } }
	var noTable statedb.Table[*item]
	cases := []struct {
		name   string
		modify func(*args)
		want   string
	}{
		{"nil table", func(a *args) { a.table = nil }, "table must not be nil"},
		{"nil clone", func(a *args) { a.clone = nil }, "clone function must not be nil"},
		{"nil setStatus", func(a *args) { a.setStatus = nil }, "setStatus function must not be nil"},
		{"nil getStatus", func(a *args) { a.getStatus = nil }, "getStatus function must not be nil"},
		{"nil ops", func(a *args) { a.ops = nil }, "Operations must not be nil"},
		{"nil db", func(a *args) { a.params.DB = nil }, "Params.DB must not be nil"},
		{"nil job group", func(a *args) { a.params.JobGroup = nil }, "Params.JobGroup must not be nil"},
		{"nil option", with(nil), "nil Option"},
		{"zero round size", with(reconciler.WithRoundLimits(0, nil)), "round size must be positive"},
		{"negative round size", with(reconciler.WithRoundLimits(-1, rate.NewLimiter(1, 1))), "round size must be positive"},
		{"zero min backoff", with(reconciler.WithRetry(0, time.Second)), "minimum retry backoff must be positive"},
		{"max below min", with(reconciler.WithRetry(time.Second, time.Millisecond)), "below the minimum"},
		{"negative prune", with(reconciler.WithPruning(-time.Second)), "prune interval must not be negative"},
		{"negative refresh", with(reconciler.WithRefreshing(-time.Second, nil)), "refresh interval must not be negative"},
		{"jitter one", with(reconciler.WithRetryJitter(1)), "retry jitter must be in [0, 1)"},
		{"jitter negative", with(reconciler.WithRetryJitter(-0.1)), "retry jitter"},
		{"zero workers", with(reconciler.WithConcurrency(0)), "concurrency must be in [1, 65536]"},
		{"too many workers", with(reconciler.WithConcurrency(1 << 20)), "concurrency must be in [1, 65536]"},
		{"negative timeout", with(reconciler.WithOperationTimeout(-1)), "operation timeout must not be negative"},
		{"dependency on itself", with(reconciler.WithDependency(table, sameID)), "cannot be a dependency of itself"},
		{"nil dependency table", with(reconciler.WithDependency(noTable, sameID)), "needs a table and a mapper"},
		// A limiter whose Wait can never succeed would stop the loop for good.
		{"round burst 0", with(reconciler.WithRoundLimits(10, rate.NewLimiter(100, 0))), "limiter"},
		{"round limit 0", with(reconciler.WithRoundLimits(10, rate.NewLimiter(0, 5))), "limiter"},
		{"refresh burst 0", with(reconciler.WithRefreshing(time.Minute, rate.NewLimiter(100, 0))), "limiter"},
		{"refresh limit 0", with(reconciler.WithRefreshing(time.Minute, rate.NewLimiter(0, 5))), "limiter"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := good()
			tc.modify(&a)
			var r reconciler.Reconciler[*item]
			require.NotPanics(t, func() {
				r, err = reconciler.Register(a.params, a.table, a.clone, a.setStatus, a.getStatus, a.ops, nil, a.opts...)
			})
			require.Error(t, err)
			assert.Nil(t, r)
			assert.True(t, errors.Is(err, reconciler.ErrInvalidConfig), "error %q should wrap ErrInvalidConfig", err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}

	t.Run("all nil reports every problem", func(t *testing.T) {
		_, err := reconciler.Register[*item](reconciler.Params{}, nil, nil, nil, nil, nil, nil)
		require.ErrorIs(t, err, reconciler.ErrInvalidConfig)
		for _, want := range []string{"Params.DB", "table", "clone", "setStatus", "getStatus", "Operations"} {
			assert.Contains(t, err.Error(), want)
		}
	})

	t.Run("valid input registers jobs", func(t *testing.T) {
		a := good()
		g := &fakeGroup{}
		a.params.JobGroup = g
		r, err := reconciler.Register(a.params, a.table, a.clone, a.setStatus, a.getStatus, a.ops, nil,
			reconciler.WithName("x"), reconciler.WithRefreshing(time.Minute, nil),
			reconciler.WithRoundLimits(10, rate.NewLimiter(rate.Inf, 0))) // an infinite limit needs no burst
		require.NoError(t, err)
		require.NotNil(t, r)
		assert.Len(t, g.jobs, 2, "reconcile and refresh jobs")
	})
}

package reconciler_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/converge-go/converge/compat/reconciler"
	convergereconciler "github.com/converge-go/converge/reconciler"
)

// noopReconciler implements Reconciler with only the StateDB reconciler's
// two methods, as an agent does on a platform without the target.
type noopReconciler[Obj any] struct{}

func (noopReconciler[Obj]) Prune() {}

func (noopReconciler[Obj]) WaitUntilReconciled(_ context.Context, untilRevision statedb.Revision) (statedb.Revision, statedb.Revision, error) {
	return untilRevision, 0, nil
}

var (
	// An implementation with the StateDB reconciler's method set satisfies
	// Reconciler ...
	_ reconciler.Reconciler[*item] = noopReconciler[*item]{}
	// ... and so does every converge reconciler.
	_ reconciler.Reconciler[*item] = convergereconciler.Reconciler[*item](nil)
)

// Register returns converge's reconciler, which also has Pause and Resume.
func TestRegisterReturnsAConvergeReconciler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, newRecorder())
		full, ok := f.rec.(convergereconciler.Reconciler[*item])
		require.True(t, ok, "%T implements converge's Reconciler", f.rec)

		full.Pause()
		rev := f.insert(t, "a")
		time.Sleep(time.Second) // advance the fake clock
		synctest.Wait()
		assert.Empty(t, f.tgt.of("update", "a"), "paused")

		full.Resume()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		reached, low, err := f.rec.WaitUntilReconciled(ctx, rev)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, reached, rev)
		assert.Zero(t, low)
		assert.Len(t, f.tgt.of("update", "a"), 1)
	})
}

// Bad arguments and options get an error wrapping converge's
// ErrInvalidConfig and a nil Reconciler, not a nil pointer in an
// interface.
func TestRegisterRefusesBadInput(t *testing.T) {
	var (
		params reconciler.Params
		table  statedb.RWTable[*item]
	)
	h := hive.New(
		statedb.Cell,
		job.Cell,
		cell.Provide(cell.NewSimpleHealth),
		cell.Module("test", "Test module",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(db *statedb.DB, p reconciler.Params) (err error) {
				params = p
				table, err = statedb.NewTable(db, "items", itemID)
				return err
			}),
		),
	)
	require.NoError(t, h.Populate(hivetest.Logger(t)))

	for name, opts := range map[string][]reconciler.Option{
		"retry":          {reconciler.WithRetry(0, time.Second)},
		"round size":     {reconciler.WithRoundLimits(0, nil)},
		"round limiter":  {reconciler.WithRoundLimits(1, rate.NewLimiter(0, 1))},
		"prune interval": {reconciler.WithPruning(-time.Second)},
		"refresh":        {reconciler.WithRefreshing(-time.Second, nil)},
		"nil option":     {nil},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := reconciler.Register(params, table, (*item).clone, (*item).setStatus, (*item).getStatus, newRecorder(), nil, opts...)
			require.ErrorIs(t, err, convergereconciler.ErrInvalidConfig)
			assert.Nil(t, r)
		})
	}
	t.Run("nil table", func(t *testing.T) {
		r, err := reconciler.Register(params, nil, (*item).clone, (*item).setStatus, (*item).getStatus, newRecorder(), nil)
		require.ErrorIs(t, err, convergereconciler.ErrInvalidConfig)
		assert.Nil(t, r)
	})
}

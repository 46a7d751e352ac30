package reconciler_test

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// Register refuses a guard with no bound, a bound out of range, no plan,
// a plan of another object type, or a reconciler that cannot prune.
func TestPruneGuardConfig(t *testing.T) {
	db := statedb.New()
	table, err := statedb.NewTable(db, "items", itemID)
	require.NoError(t, err)
	tg := newTarget()
	register := func(ops reconciler.Operations[*item], batch reconciler.BatchOperations[*item], opts ...reconciler.Option) error {
		p := reconciler.Params{Log: slog.Default(), DB: db, JobGroup: &fakeGroup{}}
		var err error
		require.NotPanics(t, func() {
			_, err = reconciler.Register(p, table, (*item).clone, (*item).setStatus, (*item).getStatus, ops, batch, opts...)
		})
		return err
	}
	plan := tg.PlanPrune
	otherPlan := func(context.Context, statedb.ReadTxn, iter.Seq2[string, statedb.Revision]) (int, int, error) {
		return 0, 0, nil
	}
	for name, c := range map[string]struct {
		opt  reconciler.Option
		want string
	}{
		"no bound":         {reconciler.WithPruneGuard(0, 0, plan), "set maxRemove or maxShare"},
		"negative count":   {reconciler.WithPruneGuard(-1, 0.5, plan), "maxRemove must not be negative"},
		"share above one":  {reconciler.WithPruneGuard(0, 1.5, plan), "maxShare must be in [0, 1]"},
		"negative share":   {reconciler.WithPruneGuard(3, -0.1, plan), "maxShare must be in [0, 1]"},
		"share NaN":        {reconciler.WithPruneGuard(3, math.NaN(), plan), "maxShare must be in [0, 1]"},
		"nil plan":         {reconciler.WithPruneGuard[*item](3, 0, nil), "plan must not be nil"},
		"plan of strings":  {reconciler.WithPruneGuard(3, 0, otherPlan), "plan is for objects of type string"},
		"share infinite":   {reconciler.WithPruneGuard(0, math.Inf(1), plan), "maxShare must be in [0, 1]"},
		"share NaN alone":  {reconciler.WithPruneGuard(0, math.NaN(), plan), "maxShare must be in [0, 1]"},
		"negative, shared": {reconciler.WithPruneGuard(-5, 0, plan), "maxRemove must not be negative"},
	} {
		t.Run(name, func(t *testing.T) {
			err := register(tg, nil, c.opt)
			require.ErrorIs(t, err, reconciler.ErrInvalidConfig)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	t.Run("cannot prune", func(t *testing.T) {
		err := register(nil, batchOnly{tg}, reconciler.WithPruning(0), reconciler.WithPruneGuard(1, 0, plan))
		require.ErrorIs(t, err, reconciler.ErrInvalidConfig)
		assert.Contains(t, err.Error(), "cannot prune")
	})
	for _, opt := range []reconciler.Option{
		reconciler.WithPruneGuard(1, 0, plan),
		reconciler.WithPruneGuard(0, 1, plan),
		reconciler.WithPruneGuard(0, 0.5, plan),
		reconciler.WithPruneGuard(10, 0.01, plan),
	} {
		require.NoError(t, register(tg, nil, opt))
	}
	// With pruning only on request, the guard guards those prunes.
	require.NoError(t, register(tg, nil, reconciler.WithPruning(0), reconciler.WithPruneGuard(1, 0, plan)))
}

// guardFixture starts a reconciler over a target holding held entries
// a reconciler of an earlier run applied, with an empty table and the
// guard's bounds; plan counts its calls.
func guardFixture(t *testing.T, maxRemove int, maxShare float64, plan func(context.Context, statedb.ReadTxn, iter.Seq2[*item, statedb.Revision]) (int, int, error), held ...string) (*fixture, *target) {
	tg := newTarget()
	for _, k := range held {
		tg.Set(k, "1")
	}
	if plan == nil {
		plan = tg.PlanPrune
	}
	f := startFixture(t, tg, &with{tables: true}, reconciler.WithPruning(0), reconciler.WithRetry(time.Millisecond, 5*time.Millisecond),
		reconciler.WithPruneGuard(maxRemove, maxShare, plan))
	return f, tg
}

// The hold itself: a prune over a bound calls no Prune and says so in
// health and the reconcilers table, whichever bound it exceeds; one
// within both runs.
func TestPruneGuardHolds(t *testing.T) {
	for _, c := range []struct {
		name      string
		maxRemove int
		maxShare  float64
		strays    int // of 4 entries in the target, 4-strays in the table
		held      bool
		bound     string
	}{
		{"count, over", 1, 0, 2, true, "at most 1)"},
		{"count, at", 2, 0, 2, false, ""},
		{"share, over", 0, 0.5, 3, true, "at most 50% of the target"},
		{"share, at", 0, 0.5, 2, false, ""},
		{"share one never holds", 0, 1, 4, false, ""},
		{"both, count over", 1, 1, 2, true, "at most 1 and 100% of the target"},
		{"both, share over", 3, 0.25, 2, true, "at most 3 and 25% of the target"},
	} {
		t.Run(c.name, func(t *testing.T) {
			keys := []string{"a", "b", "c", "d"}
			f, tg := guardFixture(t, c.maxRemove, c.maxShare, nil, keys...)
			var objs []*item
			for _, k := range keys[c.strays:] {
				objs = append(objs, &item{ID: k, Value: "1"})
			}
			f.reconciledTo(f.upsert(objs...))
			f.rec.Prune()
			if !c.held {
				tg.waitPrunes(t, 1)
				f.waitInfo("no prune held", func(i *tables.Info) bool { return !i.PruneHeld && !i.LastPrune.IsZero() })
				assert.Equal(t, 4-c.strays, len(tg.State()), "the prune within bounds ran")
				return
			}
			info := f.waitInfo("a prune held", func(i *tables.Info) bool { return i.PruneHeld })
			assert.Equal(t, c.strays, info.PruneHeldRemove)
			assert.Equal(t, 4, info.PruneHeldOf)
			assert.Equal(t, tables.StateDegraded, info.State)
			assert.True(t, info.LastPrune.IsZero(), "no prune ran")
			f.waitHealth(func(l cell.Level, msg string) bool {
				return l == cell.StatusDegraded && strings.Contains(msg, "prune held") && strings.Contains(msg, c.bound)
			})
			tg.mu.Lock()
			assert.Zero(t, tg.returned, "Prune was not called")
			tg.mu.Unlock()
			assert.Len(t, tg.State(), 4, "nothing removed")
		})
	}
}

// ConfirmPrune runs the held prune once: the next prune over the bound is
// held again; a confirmation without a hold approves nothing; the
// desired set growing back releases a hold with no confirmation.
func TestPruneGuardConfirm(t *testing.T) {
	f, tg := guardFixture(t, 1, 0, nil, "a", "b", "c")
	f.rec.ConfirmPrune() // nothing held: nothing to do
	f.rec.Prune()
	f.waitInfo("the first prune held", func(i *tables.Info) bool { return i.PruneHeld && i.PruneHeldRemove == 3 })

	f.rec.ConfirmPrune()
	tg.waitPrunes(t, 1)
	assert.Empty(t, tg.State(), "the confirmed prune removed all")
	f.waitInfo("the hold over", func(i *tables.Info) bool { return !i.PruneHeld && !i.LastPrune.IsZero() })
	f.waitHealth(func(l cell.Level, _ string) bool { return l == cell.StatusOK })

	// A confirmation now is for no hold: the next mass prune is held.
	f.rec.ConfirmPrune()
	tg.Set("x", "1")
	tg.Set("y", "1")
	f.rec.Prune()
	f.waitInfo("the next prune held", func(i *tables.Info) bool { return i.PruneHeld && i.PruneHeldRemove == 2 })
	tg.mu.Lock()
	assert.Equal(t, 1, tg.returned, "the confirmation approved nothing to come")
	tg.mu.Unlock()

	// The desired set grows back: the round that applies it plans again.
	f.reconciledTo(f.upsert(&item{ID: "x", Value: "1"}))
	tg.waitPrunes(t, 2)
	f.waitInfo("released", func(i *tables.Info) bool { return !i.PruneHeld })
	assert.Equal(t, map[string]string{"x": "1"}, tg.State())
	f.waitHealth(func(l cell.Level, _ string) bool { return l == cell.StatusOK })
}

// A plan that fails, or panics, fails the prune: nothing is removed, the
// error is the last prune's, and it is retried after the backoff until
// the plan succeeds.
func TestPruneGuardPlanFails(t *testing.T) {
	var calls atomic.Int32
	tg := newTarget()
	tg.Set("stray", "1")
	plan := func(ctx context.Context, txn statedb.ReadTxn, objs iter.Seq2[*item, statedb.Revision]) (int, int, error) {
		switch calls.Add(1) {
		case 1:
			return 0, 0, errors.New("target unreadable")
		case 2:
			panic("plan bug")
		case 3:
			return -1, 0, nil
		}
		return tg.PlanPrune(ctx, txn, objs)
	}
	f := startFixture(t, tg, &with{tables: true}, reconciler.WithPruning(0), reconciler.WithRetry(time.Millisecond, 5*time.Millisecond),
		reconciler.WithPruneGuard(5, 0, plan))
	f.rec.Prune()
	tg.waitPrunes(t, 1)
	assert.GreaterOrEqual(t, calls.Load(), int32(4), "planned until it succeeded")
	assert.Empty(t, tg.State())
	f.waitInfo("the prune succeeded", func(i *tables.Info) bool { return i.LastPruneError == "" && !i.LastPrune.IsZero() })
}

// The first failure is the last prune's error, with nothing removed.
func TestPruneGuardPlanError(t *testing.T) {
	tg := newTarget()
	tg.Set("stray", "1")
	plan := func(context.Context, statedb.ReadTxn, iter.Seq2[*item, statedb.Revision]) (int, int, error) {
		return 0, 0, errors.New("target unreadable")
	}
	f := startFixture(t, tg, &with{tables: true}, reconciler.WithPruning(0), reconciler.WithPruneGuard(5, 0, plan))
	f.rec.Prune()
	f.waitInfo("the prune failed", func(i *tables.Info) bool {
		return strings.Contains(i.LastPruneError, "prune: plan: target unreadable") && !i.PruneHeld
	})
	f.waitHealth(func(l cell.Level, msg string) bool {
		return l == cell.StatusDegraded && strings.Contains(msg, "prune failed")
	})
	tg.mu.Lock()
	assert.Zero(t, tg.returned)
	tg.mu.Unlock()
	assert.Equal(t, map[string]string{"stray": "1"}, tg.State(), "nothing removed")
}

// ConfirmPrune and Prune from many goroutines, while prunes are held and
// run, never block (the race detector watches the guard's state), and
// every hold they confirm runs.
func TestPruneGuardConfirmConcurrent(t *testing.T) {
	f, tg := guardFixture(t, 1, 0, nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					f.rec.ConfirmPrune()
					f.rec.Prune()
				}
			}
		}()
	}
	for range 20 {
		tg.Set("s1", "1")
		tg.Set("s2", "1")
		waitUntil(t, "the strays pruned", func() (bool, <-chan struct{}) {
			state, watch := tg.StateWatch()
			return len(state) == 0, watch
		})
	}
	close(stop)
	wg.Wait()
}

// stubPlan is a prune plan that answers what it is set to, and counts its
// calls.
type stubPlan struct {
	mu           sync.Mutex
	remove, held int
	calls        int
}

func newStubPlan(remove, held int) *stubPlan { return &stubPlan{remove: remove, held: held} }

func (p *stubPlan) set(remove, held int) {
	p.mu.Lock()
	p.remove, p.held = remove, held
	p.mu.Unlock()
}

func (p *stubPlan) plan(context.Context, statedb.ReadTxn, iter.Seq2[*item, statedb.Revision]) (int, int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	return p.remove, p.held, nil
}

func (p *stubPlan) nCalls() int { p.mu.Lock(); defer p.mu.Unlock(); return p.calls }

// A plan that lies is not trusted at the edges: negative counts fail the
// prune with nothing removed; a removal from an empty target is over any
// share.
func TestPruneGuardPlanThatLies(t *testing.T) {
	for _, c := range []struct {
		name         string
		remove, held int
		hold         bool
	}{
		{"negative remove", -5, 10, false},
		{"negative held", 3, -10, false},
		{"remove from nothing", 1, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newStubPlan(c.remove, c.held)
			f, tg := guardFixture(t, 0, 0.5, p.plan, "x")
			f.rec.Prune()
			if c.hold {
				f.waitInfo("held", func(i *tables.Info) bool { return i.PruneHeld })
			} else {
				f.waitInfo("a failed prune", func(i *tables.Info) bool { return strings.Contains(i.LastPruneError, "plan returned") })
				f.eventually("planned again", func() bool { return p.nCalls() >= 2 })
			}
			assert.Zero(t, tg.prunes.Load())
			assert.True(t, tg.has("x", "1"), "nothing removed")
		})
	}
}

// A panicking plan fails the prune as the plan's error.
func TestPruneGuardPlanPanicIsThePlansError(t *testing.T) {
	plan := func(context.Context, statedb.ReadTxn, iter.Seq2[*item, statedb.Revision]) (int, int, error) {
		panic("plan panics")
	}
	f, tg := guardFixture(t, 5, 0, plan)
	f.rec.Prune()
	info := f.waitInfo("a failed prune", func(i *tables.Info) bool { return i.LastPruneError != "" })
	assert.Contains(t, info.LastPruneError, "prune: plan: ", "a panicking plan's error is labelled as the plan's")
	assert.Zero(t, tg.prunes.Load())
}

// A plan that outlives the operation timeout sees its ctx end: the prune
// fails with nothing removed, and is planned again.
func TestPruneGuardPlanTimesOut(t *testing.T) {
	var block atomic.Bool
	block.Store(true)
	tg := newTarget()
	plan := func(ctx context.Context, txn statedb.ReadTxn, objs iter.Seq2[*item, statedb.Revision]) (int, int, error) {
		if block.Load() {
			<-ctx.Done()
			return 0, 0, ctx.Err()
		}
		return tg.PlanPrune(ctx, txn, objs)
	}
	f := startFixture(t, tg, &with{tables: true}, reconciler.WithPruning(0), reconciler.WithRetry(time.Millisecond, 5*time.Millisecond),
		reconciler.WithPruneGuard(5, 0, plan), reconciler.WithOperationTimeout(10*time.Millisecond))
	f.rec.Prune()
	f.waitInfo("the prune failed", func(i *tables.Info) bool { return strings.Contains(i.LastPruneError, "plan") })
	assert.Zero(t, tg.prunes.Load())
	block.Store(false)
	tg.waitPrunes(t, 1)
}

// A hold lasts across a stop of the hive; the next run plans again.
func TestPruneGuardHoldAcrossAStop(t *testing.T) {
	p := newStubPlan(10, 10)
	f, tg := guardFixture(t, 5, 0, p.plan)
	f.rec.Prune()
	f.waitInfo("held", func(i *tables.Info) bool { return i.PruneHeld })
	f.stop()
	n := p.nCalls()
	p.set(0, 10)
	f.start()
	f.eventually("planned again and pruned", func() bool { return p.nCalls() > n && tg.prunes.Load() == 1 })
}

// A confirmed prune that fails is retried guarded again: the confirmation
// was for one prune.
func TestPruneGuardConfirmedPruneFailingIsGuardedAgain(t *testing.T) {
	p := newStubPlan(10, 10)
	f, tg := guardFixture(t, 5, 0, p.plan)
	tg.failWhen(errKitDown, func(op reconcilertest.Op, _ *item) bool { return op == reconcilertest.OpPrune })
	f.rec.Prune()
	f.waitInfo("held", func(i *tables.Info) bool { return i.PruneHeld })
	f.rec.ConfirmPrune()
	f.eventually("the confirmed prune ran", func() bool { return tg.prunes.Load() == 1 })
	tg.recover()
	f.eventually("the retry planned and held", func() bool { i := f.info(); return p.nCalls() >= 3 && i != nil && i.PruneHeld })
	assert.EqualValues(t, 1, tg.prunes.Load(), "the retry after a failed confirmed prune is guarded again")
}

// A held prune holds neither updates nor deletes; ConfirmPrune while
// paused runs on Resume, and many at once run one prune; the next prune
// plans again and is held. Periodic prunes re-plan and stay held.
func TestPruneGuardHeldPruneHoldsNothingElse(t *testing.T) {
	p := newStubPlan(10, 10)
	f, tg := guardFixture(t, 5, 0, p.plan)
	f.rec.Prune()
	f.waitInfo("held", func(i *tables.Info) bool { return i.PruneHeld })
	f.upsert(kititems("1", "a", "b")...)
	f.waitKind("a", status.KindDone)
	f.remove("b")
	f.caughtUp()
	assert.Equal(t, map[string]string{"a": "1"}, tg.State())
	f.waitInfo("held still", func(i *tables.Info) bool { return i.PruneHeld })

	f.rec.Pause()
	f.waitHealth(func(_ cell.Level, msg string) bool { return strings.Contains(msg, "Paused") })
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(f.rec.ConfirmPrune)
	}
	wg.Wait()
	assert.Zero(t, tg.prunes.Load(), "no prune while paused")
	f.rec.Resume()
	f.eventually("the confirmed prune ran", func() bool { return tg.prunes.Load() == 1 })
	// Requests made while one waits are one: count the plans from here.
	planned := p.nCalls()
	require.NoError(t, f.rec.Configure(reconciler.WithPruning(time.Millisecond)))
	f.eventually("held again over periodic plans", func() bool { i := f.info(); return i != nil && i.PruneHeld && p.nCalls() > planned+10 })
	assert.EqualValues(t, 1, tg.prunes.Load())
	f.waitHealth(func(l cell.Level, _ string) bool { return l == cell.StatusDegraded })
}

package reconciler_test

// WithPruneGuard. (A table that comes up empty held, health and the
// reconcilers row saying so, the desired set growing back releasing it,
// ConfirmPrune running one prune, a confirmation without a hold approving
// nothing, deletes never held: testdata/prune_guard.txtar, in every
// variant; under chaos: chaos_guard_test.go; Register's refusals:
// TestRegisterRejectsBadInput.)

import (
	"context"
	"errors"
	"iter"
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

type planFunc = func(context.Context, statedb.ReadTxn, iter.Seq2[*item, statedb.Revision]) (int, int, error)

// guardFixture starts a reconciler pruning on request only, with an empty
// table and the guard's bounds, over a target holding held (applied by an
// earlier run); plan makes the guard's plan of the target (nil: its
// PlanPrune).
func guardFixture(t *testing.T, maxRemove int, maxShare float64, plan func(*target) planFunc, held []string, opts ...reconciler.Option) (*fixture, *target) {
	tg := newTarget()
	for _, k := range held {
		tg.Set(k, "1")
	}
	p := tg.PlanPrune
	if plan != nil {
		p = plan(tg)
	}
	f := startFixture(t, tg, &with{tables: true}, append([]reconciler.Option{reconciler.WithPruning(0),
		reconciler.WithRetry(time.Millisecond, 5*time.Millisecond), reconciler.WithPruneGuard(maxRemove, maxShare, p)}, opts...)...)
	return f, tg
}

// stubPlan is a plan that would remove remove entries (10 unless set) of
// 10, counting its calls.
type stubPlan struct{ remove, calls atomic.Int32 }

func newStubPlan() *stubPlan { p := &stubPlan{}; p.remove.Store(10); return p }

func (p *stubPlan) of(*target) planFunc {
	return func(context.Context, statedb.ReadTxn, iter.Seq2[*item, statedb.Revision]) (int, int, error) {
		p.calls.Add(1)
		return int(p.remove.Load()), 10, nil
	}
}

// A prune over a bound calls no Prune and says so in health and the
// reconcilers table, whichever bound it exceeds; one within both runs.
func TestPruneGuardHolds(t *testing.T) {
	for _, c := range []struct {
		name      string
		maxRemove int
		maxShare  float64
		strays    int    // of 4 entries in the target, 4-strays in the table
		bound     string // of the health message; "": not held
	}{
		{"count, over", 1, 0, 2, "at most 1)"},
		{"count, at", 2, 0, 2, ""},
		{"share, over", 0, 0.5, 3, "at most 50% of the target"},
		{"share, at", 0, 0.5, 2, ""},
		{"share one never holds", 0, 1, 4, ""},
		{"both, count over", 1, 1, 2, "at most 1 and 100% of the target"},
		{"both, share over", 3, 0.25, 2, "at most 3 and 25% of the target"},
	} {
		t.Run(c.name, func(t *testing.T) {
			keys := []string{"a", "b", "c", "d"}
			f, tg := guardFixture(t, c.maxRemove, c.maxShare, nil, keys)
			f.reconciledTo(f.upsert(kititems("1", keys[c.strays:]...)...))
			f.rec.Prune()
			if c.bound == "" {
				tg.waitPrunes(t, 1)
				f.waitInfo("no prune held", func(i *tables.Info) bool { return !i.PruneHeld && !i.LastPrune.IsZero() })
				assert.Len(t, tg.State(), 4-c.strays, "the prune within bounds ran")
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
			assert.Zero(t, tg.prunes.Load(), "Prune was not called")
			assert.Len(t, tg.State(), 4, "nothing removed")
		})
	}
}

// A plan that fails, panics, outlives the operation timeout or returns
// negative counts fails the prune: nothing is removed, its error (a
// panic's labelled as the plan's) is the last prune's and health says the
// prune failed, and it is planned again after the backoff until the plan
// succeeds. A plan removing from an empty target is over any share.
func TestPruneGuardPlanFails(t *testing.T) {
	for name, c := range map[string]struct {
		plan func(ctx context.Context) (int, int, error)
		want string // "": held
	}{
		"error":               {func(context.Context) (int, int, error) { return 0, 0, errors.New("target unreadable") }, "prune: plan: target unreadable"},
		"panic":               {func(context.Context) (int, int, error) { panic("plan panics") }, "prune: plan: "},
		"timeout":             {func(ctx context.Context) (int, int, error) { <-ctx.Done(); return 0, 0, ctx.Err() }, "prune: plan: " + context.DeadlineExceeded.Error()},
		"negative remove":     {func(context.Context) (int, int, error) { return -5, 10, nil }, "plan returned"},
		"negative held":       {func(context.Context) (int, int, error) { return 3, -10, nil }, "plan returned"},
		"remove from nothing": {func(context.Context) (int, int, error) { return 1, 0, nil }, ""},
	} {
		t.Run(name, func(t *testing.T) {
			var healed atomic.Bool
			var calls atomic.Int32
			f, tg := guardFixture(t, 5, 1, func(tg *target) planFunc {
				return func(ctx context.Context, txn statedb.ReadTxn, objs iter.Seq2[*item, statedb.Revision]) (int, int, error) {
					calls.Add(1)
					if healed.Load() {
						return tg.PlanPrune(ctx, txn, objs)
					}
					return c.plan(ctx)
				}
			}, []string{"stray"}, reconciler.WithOperationTimeout(10*time.Millisecond))
			f.rec.Prune()
			if c.want == "" {
				f.waitInfo("held", func(i *tables.Info) bool { return i.PruneHeld })
			} else {
				f.waitInfo("the prune failed", func(i *tables.Info) bool { return strings.Contains(i.LastPruneError, c.want) && !i.PruneHeld })
				f.waitHealth(func(l cell.Level, msg string) bool {
					return l == cell.StatusDegraded && strings.Contains(msg, "prune failed")
				})
				f.eventually("planned again", func() bool { return calls.Load() >= 2 })
			}
			assert.Zero(t, tg.prunes.Load())
			assert.Equal(t, map[string]string{"stray": "1"}, tg.State(), "nothing removed")
			healed.Store(true)
			f.rec.ConfirmPrune() // runs the one held; approves nothing for the others
			tg.waitPrunes(t, 1)
			assert.Empty(t, tg.State())
			f.waitInfo("the prune succeeded", func(i *tables.Info) bool { return i.LastPruneError == "" && !i.LastPrune.IsZero() })
		})
	}
}

// ConfirmPrune and Prune from many goroutines, while prunes are held and
// run, never block (the race detector watches the guard's state), and
// every hold they confirm runs.
func TestPruneGuardConfirmConcurrent(t *testing.T) {
	f, tg := guardFixture(t, 1, 0, nil, nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					f.rec.ConfirmPrune()
					f.rec.Prune()
				}
			}
		})
	}
	for range 20 {
		tg.Set("s1", "1")
		tg.Set("s2", "1")
		waitUntil(t, "the strays pruned", func() (bool, <-chan struct{}) {
			state, watch := tg.StateWatch()
			return len(state) == 0, watch
		})
	}
}

// A hold lasts across a stop of the hive; the next run plans again.
func TestPruneGuardHoldAcrossAStop(t *testing.T) {
	p := newStubPlan()
	f, tg := guardFixture(t, 5, 0, p.of, nil)
	f.rec.Prune()
	f.waitInfo("held", func(i *tables.Info) bool { return i.PruneHeld })
	f.stop()
	n := p.calls.Load()
	p.remove.Store(0)
	f.start()
	f.eventually("planned again and pruned", func() bool { return p.calls.Load() > n && tg.prunes.Load() == 1 })
}

// A confirmed prune that fails is retried guarded again: the confirmation
// was for one prune.
func TestPruneGuardConfirmedPruneFailingIsGuardedAgain(t *testing.T) {
	p := newStubPlan()
	f, tg := guardFixture(t, 5, 0, p.of, nil)
	tg.failWhen(errKitDown, func(op reconcilertest.Op, _ *item) bool { return op == reconcilertest.OpPrune })
	f.rec.Prune()
	f.waitInfo("held", func(i *tables.Info) bool { return i.PruneHeld })
	f.rec.ConfirmPrune()
	f.eventually("the confirmed prune ran", func() bool { return tg.prunes.Load() == 1 })
	tg.recover()
	f.eventually("the retry planned and held", func() bool { i := f.info(); return p.calls.Load() >= 3 && i != nil && i.PruneHeld })
	assert.EqualValues(t, 1, tg.prunes.Load(), "the retry after a failed confirmed prune is guarded again")
}

// A held prune holds neither updates nor deletes; ConfirmPrune while
// paused runs on Resume, and many at once run one prune; the next prune
// plans again and is held. Periodic prunes re-plan and stay held.
func TestPruneGuardHeldPruneHoldsNothingElse(t *testing.T) {
	p := newStubPlan()
	f, tg := guardFixture(t, 5, 0, p.of, nil)
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
	planned := p.calls.Load() // requests made while one waits are one: count the plans from here
	require.NoError(t, f.rec.Configure(reconciler.WithPruning(time.Millisecond)))
	f.eventually("held again over periodic plans", func() bool { i := f.info(); return i != nil && i.PruneHeld && p.calls.Load() > planned+10 })
	assert.EqualValues(t, 1, tg.prunes.Load())
	f.waitHealth(func(l cell.Level, _ string) bool { return l == cell.StatusDegraded })
}

package reconciler_test

// Claim 2 of the guarantee review: a reconciler runs inside a
// testing/synctest bubble, with stops and starts, deletes while stopped,
// dependencies, refreshing and workers, and nothing it leaves behind kills
// the process when collected after the bubble ends, also when it was
// registered but never started.

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// o30CollectGarbage runs the garbage collector until cleanups of objects
// made unreachable before the call have had a chance to run: it waits for
// the cleanup of a sentinel, several times over, so that chains of
// cleanups (an object freed by another's cleanup) run too.
func o30CollectGarbage(t *testing.T) {
	t.Helper()
	for range 5 {
		done := make(chan struct{})
		sentinel := new([64]byte)
		runtime.AddCleanup(sentinel, func(ch chan struct{}) { close(ch) }, done)
		sentinel = nil
		_ = sentinel
		deadline := time.Now().Add(10 * time.Second)
		for {
			runtime.GC()
			select {
			case <-done:
			case <-time.After(10 * time.Millisecond):
				if time.Now().After(deadline) {
					t.Fatal("cleanup of the sentinel did not run within 10s")
				}
				continue
			}
			break
		}
	}
	// Give the cleanup goroutines (Go 1.25 runs several) time to finish
	// what they took before the sentinel's: one more round of sentinels.
	runtime.GC()
}

// The full life of a reconciler inside a bubble: workers, batches,
// a dependency, refreshing, pruning, stop and start with deletes and
// writes while stopped.
func TestGuaranteeSynctestFullLife(t *testing.T) {
	for _, v := range o30Variants {
		t.Run(v.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tgt := newO30Target()
				var deps statedb.RWTable[*o30Obj]
				cfg := o30Config{
					batch: v.batch,
					opts: []reconciler.Option{
						reconciler.WithConcurrency(v.workers),
						reconciler.WithRefreshing(time.Minute, nil),
						reconciler.WithPruning(10 * time.Minute),
						reconciler.WithRetry(time.Second, 10*time.Second),
					},
					setup: func(db *statedb.DB, _ statedb.RWTable[*o30Obj]) []reconciler.Option {
						var err error
						deps, err = o30NewTable(db, "o30-deps")
						require.NoError(t, err)
						return []reconciler.Option{reconciler.WithDependency(deps, func(d *o30Obj, _ bool) []statedb.Query[*o30Obj] {
							return []statedb.Query[*o30Obj]{o30ByID.Query(d.ID)}
						})}
					},
				}
				e := newO30Env(t, tgt, cfg)
				e.start()
				objs := o30Objs("k", 50, "1")
				e.put(objs...)
				e.settle()
				e.requireConverged("after the first writes")

				// A dependency change marks k-00003 and it is updated again.
				n := o30Updates(tgt, objs[3].ID)
				wtxn := e.db.WriteTxn(deps)
				_, _, err := deps.Insert(wtxn, &o30Obj{ID: objs[3].ID, Value: "dep"})
				require.NoError(t, err)
				wtxn.Commit()
				o30WaitUpdates(t, tgt, objs[3].ID, n+1)
				e.settle()

				// Refreshing: after the interval, objects are updated again.
				n = o30Updates(tgt, objs[10].ID)
				time.Sleep(2 * time.Minute) // fake time
				synctest.Wait()
				o30WaitUpdates(t, tgt, objs[10].ID, n+1)
				e.settle()

				// Stop, write and delete, start again.
				e.stop()
				e.del(o30IDs(objs[:20])...)
				e.put(o30Objs("k", 30, "2")[10:]...)
				wtxn = e.db.WriteTxn(deps)
				_, _, err = deps.Insert(wtxn, &o30Obj{ID: objs[40].ID, Value: "dep"})
				require.NoError(t, err)
				wtxn.Commit()
				e.start()
				e.settle()
				e.requireConverged("after the restart")
				for _, o := range objs[:10] {
					require.Positive(t, tgt.deleteCount(o.ID), o.ID)
				}
				e.stop()
			})
			o30CollectGarbage(t)
		})
	}
}

func o30Updates(tgt *o30Target, id string) int {
	tgt.mu.Lock()
	defer tgt.mu.Unlock()
	return tgt.updates[id]
}

func o30WaitUpdates(t *testing.T, tgt *o30Target, id string, n int) {
	t.Helper()
	deadline := time.NewTimer(time.Hour) // fake time inside a bubble
	defer deadline.Stop()
	for o30Updates(tgt, id) < n {
		select {
		case <-tgt.opCh:
		case <-deadline.C:
			t.Fatalf("%s: %d updates, want %d", id, o30Updates(tgt, id), n)
		}
	}
}

// Registered (the hive populated, so Register ran) but never started.
func TestGuaranteeSynctestRegisteredNeverStarted(t *testing.T) {
	for _, dep := range []bool{false, true} {
		t.Run(fmt.Sprintf("dependency=%v", dep), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := o30Config{opts: []reconciler.Option{reconciler.WithConcurrency(4)}}
				if dep {
					cfg.setup = o30DepSetup(t)
				}
				e := newO30Env(t, newO30Target(), cfg)
				require.NoError(t, e.hive.Populate(hivetest.Logger(t)))
				require.NotNil(t, e.rec)
				e.put(o30Objs("k", 10, "1")...)
				e.del("k-00001")
			})
			o30CollectGarbage(t)
		})
	}
}

func o30DepSetup(t *testing.T) func(db *statedb.DB, _ statedb.RWTable[*o30Obj]) []reconciler.Option {
	return func(db *statedb.DB, _ statedb.RWTable[*o30Obj]) []reconciler.Option {
		deps, err := o30NewTable(db, "o30-deps")
		require.NoError(t, err)
		return []reconciler.Option{reconciler.WithDependency(deps, func(d *o30Obj, _ bool) []statedb.Query[*o30Obj] {
			return []statedb.Query[*o30Obj]{o30ByID.Query(d.ID)}
		})}
	}
}

// hive.Start fails, then hive.Stop; all inside a bubble. The failing hook
// runs before the database starts ("first"), after the database started and
// before the reconciler's jobs ("afterDB"), or after the jobs ("last").
func TestGuaranteeSynctestStartFails(t *testing.T) {
	for _, where := range []string{"first", "afterDB", "last"} {
		for _, dep := range []bool{false, true} {
			t.Run(fmt.Sprintf("fails=%s,dependency=%v", where, dep), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					failHook := cell.Hook{OnStart: func(cell.HookContext) error { return errO30Hook }}
					cfg := o30Config{opts: []reconciler.Option{reconciler.WithConcurrency(4)}}
					if dep {
						cfg.setup = o30DepSetup(t)
					}
					switch where {
					case "first":
						cfg.first = []cell.Cell{cell.Invoke(func(lc cell.Lifecycle) { lc.Append(failHook) })}
					case "afterDB":
						cfg.first = []cell.Cell{cell.Invoke(func(_ *statedb.DB, lc cell.Lifecycle) { lc.Append(failHook) })}
					case "last":
						cfg.cells = []cell.Cell{cell.Invoke(func(lc cell.Lifecycle) { lc.Append(failHook) })}
					}
					e := newO30Env(t, newO30Target(), cfg)
					err := e.hive.Start(hivetest.Logger(t), context.Background())
					require.ErrorIs(t, err, errO30Hook)
					e.put(o30Objs("k", 10, "1")...)
					e.del("k-00001")
					require.NoError(t, e.hive.Stop(hivetest.Logger(t), context.Background()))
				})
				o30CollectGarbage(t)
			})
		}
	}
}

// Register after the hive stopped (its jobs cannot start: the job
// registry is stopped), inside a bubble whose database had started.
func TestGuaranteeSynctestRegisterAfterStop(t *testing.T) {
	for _, dep := range []bool{false, true} {
		t.Run(fmt.Sprintf("dependency=%v", dep), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newO30HookEnv(t, []string{"a"}, nil, nil)
				require.NoError(t, h.hive.Start(hivetest.Logger(t), context.Background()))
				require.NoError(t, h.hive.Stop(hivetest.Logger(t), context.Background()))
				var opts []reconciler.Option
				if dep {
					deps, err := o30NewTable(h.db, "o30-deps")
					require.NoError(t, err)
					opts = append(opts, reconciler.WithDependency(deps, func(d *o30Obj, _ bool) []statedb.Query[*o30Obj] {
						return []statedb.Query[*o30Obj]{o30ByID.Query(d.ID)}
					}))
				}
				require.NoError(t, h.register("a", opts...))
			})
			o30CollectGarbage(t)
		})
	}
}

// A reconciler registered after the start, then the hive stopped and
// started again (its jobs are not restarted by the job registry) and
// stopped, inside a bubble.
func TestGuaranteeSynctestRegisterAfterStartThenRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newO30HookEnv(t, []string{"a"}, nil, nil)
		log := hivetest.Logger(t)
		require.NoError(t, h.hive.Start(log, context.Background()))
		require.NoError(t, h.register("a"))
		h.putAndWait("a", "x", "1")
		require.NoError(t, h.hive.Stop(log, context.Background()))
		require.NoError(t, h.hive.Start(log, context.Background()))
		require.NoError(t, h.hive.Stop(log, context.Background()))
	})
	o30CollectGarbage(t)
}

// Register after the hive started, inside a bubble, then stop.
func TestGuaranteeSynctestRegisterAfterStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newO30HookEnv(t, []string{"a"}, nil, nil)
		require.NoError(t, h.hive.Start(hivetest.Logger(t), context.Background()))
		h.returned = true
		require.NoError(t, h.register("a", reconciler.WithConcurrency(4)))
		h.putAndWait("a", "x", "1")
		require.NoError(t, h.hive.Stop(hivetest.Logger(t), context.Background()))
		h.returned = false
	})
	o30CollectGarbage(t)
}

// Register from a start hook inside a bubble, a dependency given; stop.
func TestGuaranteeSynctestRegisterInStartHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h *o30HookEnv
		late := []cell.Cell{cell.Invoke(func(lc cell.Lifecycle, _ reconciler.Params) {
			lc.Append(cell.Hook{OnStart: func(cell.HookContext) error { return h.register("a") }})
		})}
		h = newO30HookEnv(t, []string{"a"}, nil, late)
		require.NoError(t, h.hive.Start(hivetest.Logger(t), context.Background()))
		h.returned = true
		h.putAndWait("a", "x", "1")
		obj, _, _ := h.tables["a"].Get(h.db.ReadTxn(), o30ByID.Query("x"))
		require.Equal(t, status.KindDone, obj.Status.Kind)
		require.NoError(t, h.hive.Stop(hivetest.Logger(t), context.Background()))
		h.returned = false
	})
	o30CollectGarbage(t)
}

// Inside a bubble: an operation in flight cut short by the stop, failures
// waiting for a retry over a stop, a pause held over a stop, timers of
// pruning and refreshing pending when the hive stops; then garbage
// collection after the bubble.
func TestGuaranteeSynctestCutShortAndRetries(t *testing.T) {
	for _, v := range o30Variants {
		t.Run(v.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tgt := newO30Target()
				entered := make(chan struct{}, 1)
				var failing, holding bool = true, true
				tgt.beforeUpdate = func(ctx context.Context, o *o30Obj) error {
					switch {
					case o.ID == "held" && holding:
						select {
						case entered <- struct{}{}:
						default:
						}
						<-ctx.Done()
						return ctx.Err()
					case o.ID == "fails" && failing:
						return fmt.Errorf("fails")
					}
					return nil
				}
				e := newO30Env(t, tgt, o30Config{batch: v.batch, opts: []reconciler.Option{
					reconciler.WithConcurrency(v.workers),
					reconciler.WithRetry(time.Second, time.Minute),
					reconciler.WithPruning(time.Minute),
					reconciler.WithRefreshing(time.Minute, nil),
					reconciler.WithOperationTimeout(time.Hour),
				}})
				e.start()
				e.put(o30Objs("k", 20, "1")...)
				e.put(&o30Obj{ID: "fails", Value: "1"})
				o30WaitKind(t, e, "fails", status.KindError)
				e.put(&o30Obj{ID: "held", Value: "1"})
				o30Wait(t, entered, "the held update")
				e.stop()
				holding = false
				e.del("k-00001")
				e.start()
				time.Sleep(3 * time.Second) // fake time: a retry falls due
				synctest.Wait()
				e.rec.Pause()
				e.stop()
				failing = false
				e.start()
				e.rec.Resume()
				time.Sleep(2 * time.Minute) // fake time: retries, prunes and refreshes
				synctest.Wait()
				e.settle()
				e.requireConverged("after the restarts")
				e.stop()
			})
			o30CollectGarbage(t)
		})
	}
}

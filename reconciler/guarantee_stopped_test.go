package reconciler_test

// Claim 3 of the guarantee review: deletes made while the hive is stopped,
// and between Register and the first start, are handed to Delete after the
// start, and WaitUntilReconciled(revision of the delete) returns only after
// Delete ran.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

type o30Variant struct {
	workers int
	batch   bool
}

func (v o30Variant) String() string { return fmt.Sprintf("workers=%d,batch=%v", v.workers, v.batch) }

var o30Variants = []o30Variant{{1, false}, {4, false}, {1, true}, {4, true}}

func (v o30Variant) config(opts ...reconciler.Option) o30Config {
	return o30Config{batch: v.batch, opts: append([]reconciler.Option{reconciler.WithConcurrency(v.workers), reconciler.WithPruning(0)}, opts...)}
}

// requireDeleted checks that Delete ran for every id and the target lacks
// it.
func (e *o30Env) requireDeleted(what string, ids []string) {
	e.t.Helper()
	missing := 0
	first := ""
	for _, id := range ids {
		_, present := e.target.get(id)
		if present || e.target.deleteCount(id) == 0 {
			if missing == 0 {
				first = fmt.Sprintf("%s (in target: %v, deletes: %d)", id, present, e.target.deleteCount(id))
			}
			missing++
		}
	}
	if missing > 0 {
		e.t.Fatalf("%s: %d of %d deleted objects not handed to Delete, first %s", what, missing, len(ids), first)
	}
}

// waitDeletes waits for WaitUntilReconciled(delRev) with a deadline, then
// checks that every id was handed to Delete. If the wait does not return,
// it says whether the deletes had been handed to Delete meanwhile.
func (e *o30Env) waitDeletes(what string, delRev statedb.Revision, ids []string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reached, low, err := e.rec.WaitUntilReconciled(ctx, delRev)
	if err != nil {
		done := 0
		for _, id := range ids {
			if _, present := e.target.get(id); !present && e.target.deleteCount(id) > 0 {
				done++
			}
		}
		e.t.Fatalf("%s: WaitUntilReconciled(%d) (the deletes' revision) did not return within 10s: %v; "+
			"revision reached %d, retry low watermark %d, table revision %d; %d of the %d deleted keys were handed to Delete meanwhile",
			what, delRev, err, reached, low, e.rev(), done, len(ids))
	}
	e.requireDeleted(what+": after WaitUntilReconciled(delete)", ids)
}

// Many deletes made while the hive is stopped, some keys put back (with a
// new value, or as they were), are handed to Delete after the start, and
// WaitUntilReconciled of the deletes' revision returns only after that.
func TestGuaranteeDeletesWhileStopped(t *testing.T) {
	for _, v := range o30Variants {
		t.Run(v.String(), func(t *testing.T) {
			tgt := newO30Target()
			e := newO30Env(t, tgt, v.config())
			e.start()
			objs := o30Objs("k", 3000, "1")
			e.put(objs...)
			e.waitQuiet()
			e.requireConverged("before the stop")

			e.stop()
			// Delete the first 2000; then put back 200 of them as they were
			// (status included) and 200 with a new value.
			read := map[string]*o30Obj{}
			for _, o := range objs[:2000] {
				got, ok := e.get(o.ID)
				require.True(t, ok)
				read[o.ID] = got
			}
			delRev := e.del(o30IDs(objs[:2000])...)
			var asWas []*o30Obj
			for _, o := range objs[:200] {
				asWas = append(asWas, read[o.ID])
			}
			e.putAsIs(asWas...)
			e.put(o30Objs("k", 400, "2")[200:]...)
			e.start()
			e.waitDeletes("deletes", delRev, o30IDs(objs[400:2000]))
			e.waitQuiet()
			e.requireConverged("after the start")
			e.stop()
		})
	}
}

// Everything deleted while the hive is stopped.
func TestGuaranteeDeleteEverythingWhileStopped(t *testing.T) {
	for _, v := range o30Variants {
		t.Run(v.String(), func(t *testing.T) {
			tgt := newO30Target()
			e := newO30Env(t, tgt, v.config())
			e.start()
			objs := o30Objs("k", 1500, "1")
			e.put(objs...)
			e.waitQuiet()
			e.stop()
			wtxn := e.db.WriteTxn(e.table)
			require.NoError(t, e.table.DeleteAll(wtxn))
			delRev := e.table.Revision(wtxn)
			wtxn.Commit()
			e.start()
			e.waitDeletes("delete all", delRev, o30IDs(objs))
			require.Empty(t, tgt.snapshot())
			e.stop()
		})
	}
}

// Several stop and start cycles, each stop coming before the deletes of
// the previous cycle were handled, with deletes and re-inserts of the same
// keys while stopped.
func TestGuaranteeDeletesOverSeveralStops(t *testing.T) {
	for _, v := range o30Variants {
		t.Run(v.String(), func(t *testing.T) {
			tgt := newO30Target()
			e := newO30Env(t, tgt, v.config())
			e.start()
			objs := o30Objs("k", 2000, "1")
			e.put(objs...)
			e.waitQuiet()
			deleted := map[string]bool{}
			var lastDel statedb.Revision
			for cycle := range 5 {
				e.stop()
				var ids []string
				for i := cycle; i < len(objs); i += 5 {
					ids = append(ids, objs[i].ID)
					deleted[objs[i].ID] = true
				}
				lastDel = e.del(ids...)
				// Put back and delete again a few of the keys deleted in
				// the cycle before, while stopped.
				if cycle > 0 {
					var back []*o30Obj
					for i := cycle - 1; i < 200; i += 5 {
						back = append(back, &o30Obj{ID: objs[i].ID, Value: fmt.Sprintf("back%d", cycle)})
					}
					e.put(back...)
					lastDel = e.del(o30IDs(back)...)
				}
				e.start() // and stop at once, in the next cycle
			}
			var ids []string
			for id := range deleted {
				ids = append(ids, id)
			}
			e.waitDeletes("after the cycles", lastDel, ids)
			e.waitQuiet()
			e.requireConverged("after the cycles")
			e.stop()
		})
	}
}

// A delete read by nobody because the reconcile loop was busy with an
// operation when the hive stopped is handed to Delete after the start.
func TestGuaranteeDeleteUnreadAtStop(t *testing.T) {
	for _, v := range o30Variants {
		t.Run(v.String(), func(t *testing.T) {
			tgt := newO30Target()
			entered := make(chan struct{}, 1)
			tgt.beforeUpdate = func(ctx context.Context, o *o30Obj) error {
				if o.ID == "held" && o.Value == "1" {
					select {
					case entered <- struct{}{}:
					default:
					}
					<-ctx.Done()
					return ctx.Err()
				}
				return nil
			}
			e := newO30Env(t, tgt, v.config())
			e.start()
			objs := o30Objs("k", 100, "1")
			e.put(objs...)
			e.waitQuiet()
			e.put(&o30Obj{ID: "held", Value: "1"})
			o30Wait(t, entered, "the held update")
			delRev := e.del(o30IDs(objs[:50])...)
			e.stop()
			e.put(&o30Obj{ID: "held", Value: "2"})
			e.start()
			e.waitDeletes("deletes", delRev, o30IDs(objs[:50]))
			e.waitQuiet()
			e.requireConverged("after the start")
			e.stop()
		})
	}
}

// Deletes made between Register and the first start, of objects the table
// held when Register was called (and that the target holds, from an earlier
// run), are handed to Delete after the start.
func TestGuaranteeDeletesBetweenRegisterAndStart(t *testing.T) {
	for _, v := range o30Variants {
		t.Run(v.String(), func(t *testing.T) {
			tgt := newO30Target()
			objs := o30Objs("k", 500, "1")
			for _, o := range objs {
				tgt.data[o.ID] = o.Value
			}
			var e *o30Env
			var delRev statedb.Revision
			cfg := v.config()
			cfg.setup = func(db *statedb.DB, tbl statedb.RWTable[*o30Obj]) []reconciler.Option {
				wtxn := db.WriteTxn(tbl)
				for _, o := range objs {
					c := *o
					c.Status = status.Done()
					_, _, err := tbl.Insert(wtxn, &c)
					require.NoError(t, err)
				}
				wtxn.Commit()
				return nil
			}
			cfg.cells = []cell.Cell{cell.Invoke(func(_ reconciler.Params) {
				// After Register (the module's invoke), before the start.
				delRev = e.del(o30IDs(objs[:300])...)
			})}
			e = newO30Env(t, tgt, cfg)
			e.start()
			e.waitDeletes("deletes", delRev, o30IDs(objs[:300]))
			e.waitQuiet()
			e.requireConverged("after the start")
			e.stop()
		})
	}
}

// A Delete cut short by the stop, after it removed the object from the
// target, then the object put back as it was (Done) while stopped: the
// object is applied again.
func TestGuaranteeDeleteCutShortThenPutBackWhileStopped(t *testing.T) {
	for _, v := range o30Variants {
		t.Run(v.String(), func(t *testing.T) {
			tgt := newO30Target()
			entered := make(chan struct{}, 1)
			tgt.afterDelete = func(ctx context.Context, o *o30Obj) error {
				if o.ID == "k" {
					select {
					case entered <- struct{}{}:
					default:
					}
					<-ctx.Done()
					return ctx.Err()
				}
				return nil
			}
			e := newO30Env(t, tgt, v.config())
			e.start()
			e.put(&o30Obj{ID: "k", Value: "1"})
			e.waitQuiet()
			was, _ := e.get("k")
			require.Equal(t, status.KindDone, was.Status.Kind)
			e.del("k")
			o30Wait(t, entered, "the delete of k")
			e.stop()
			tgt.afterDelete = nil
			rev := e.putAsIs(was)
			e.start()
			e.waitRev(rev)
			e.waitQuiet()
			e.requireConverged("after the start")
			e.stop()
		})
	}
}

// An update cut short by the stop after it applied v2, then v1 put back as
// it was (Done) while stopped: v1 is applied again (a newer version, carried
// over, is held for the key).
func TestGuaranteeUpdateCutShortThenOlderPutBackWhileStopped(t *testing.T) {
	for _, v := range o30Variants {
		t.Run(v.String(), func(t *testing.T) {
			tgt := newO30Target()
			entered := make(chan struct{}, 1)
			tgt.afterUpdate = func(ctx context.Context, o *o30Obj) error {
				if o.ID == "k" && o.Value == "2" {
					select {
					case entered <- struct{}{}:
					default:
					}
					<-ctx.Done()
					return ctx.Err()
				}
				return nil
			}
			e := newO30Env(t, tgt, v.config())
			e.start()
			e.put(&o30Obj{ID: "k", Value: "1"})
			e.waitQuiet()
			was, _ := e.get("k")
			e.put(&o30Obj{ID: "k", Value: "2"})
			o30Wait(t, entered, "the update of k to 2")
			e.stop()
			tgt.afterUpdate = nil
			rev := e.putAsIs(was)
			e.start()
			e.waitRev(rev)
			e.waitQuiet()
			e.requireConverged("after the start")
			e.stop()
		})
	}
}

// Paused, deletes, a stop and a start, then Resume: the deletes converge.
func TestGuaranteeDeletesWhilePausedAcrossStop(t *testing.T) {
	for _, v := range o30Variants {
		t.Run(v.String(), func(t *testing.T) {
			tgt := newO30Target()
			e := newO30Env(t, tgt, v.config())
			e.start()
			objs := o30Objs("k", 300, "1")
			e.put(objs...)
			e.waitQuiet()
			e.rec.Pause()
			delRev := e.del(o30IDs(objs[:100])...)
			e.stop()
			e.del(o30IDs(objs[100:150])...)
			e.start()
			e.rec.Resume()
			e.waitDeletes("deletes", delRev, o30IDs(objs[:100]))
			e.waitQuiet()
			e.requireDeleted("after the start", o30IDs(objs[:150]))
			e.requireConverged("after the start")
			e.stop()
		})
	}
}

// Variants of TestGuaranteeUpdateCutShortThenOlderPutBackWhileStopped: the
// update in flight at the stop returns nil or an error once its context is
// cancelled, and v1 is put back while it runs (before the stop) or while
// the hive is stopped.
func TestGuaranteeUpdateInFlightAtStopOlderPutBack(t *testing.T) {
	for _, v := range o30Variants {
		for _, result := range []string{"nil", "ctx-error"} {
			for _, when := range []string{"beforeStop", "whileStopped"} {
				if result == "nil" && when == "whileStopped" {
					// The update succeeds as the stop cuts it: its Done is
					// committed, and v1 put back over it with no delete
					// between is believed, as reconciler/doc.go says
					// ("Objects put back").
					continue
				}
				t.Run(fmt.Sprintf("%v,returns=%s,putBack=%s", v, result, when), func(t *testing.T) {
					tgt := newO30Target()
					entered := make(chan struct{}, 1)
					tgt.afterUpdate = func(ctx context.Context, o *o30Obj) error {
						if o.ID == "k" && o.Value == "2" {
							select {
							case entered <- struct{}{}:
							default:
							}
							<-ctx.Done()
							if result == "nil" {
								return nil
							}
							return ctx.Err()
						}
						return nil
					}
					e := newO30Env(t, tgt, v.config())
					e.start()
					e.put(&o30Obj{ID: "k", Value: "1"})
					e.waitQuiet()
					was, _ := e.get("k")
					e.put(&o30Obj{ID: "k", Value: "2"})
					o30Wait(t, entered, "the update of k to 2")
					if when == "beforeStop" {
						e.putAsIs(was)
					}
					e.stop()
					tgt.afterUpdate = nil
					if when == "whileStopped" {
						e.putAsIs(was)
					}
					e.start()
					e.settle()
					e.requireConverged("after the start")
					e.stop()
				})
			}
		}
	}
}

// A delete made while the hive is stopped whose Delete fails: once the
// reconciler has handled a later write, WaitUntilReconciled reports a retry
// low watermark at or below the delete's revision ("the lowest revision
// among objects that failed and wait for (or are in) another attempt ...
// so a caller can tell whether failures remain below its revision").
func TestGuaranteeFailingDeleteWhileStoppedLowWatermark(t *testing.T) {
	for _, v := range o30Variants {
		for _, stopped := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v,deletedWhileStopped=%v", v, stopped), func(t *testing.T) {
				tgt := newO30Target()
				e := newO30Env(t, tgt, v.config(reconciler.WithRetry(time.Hour, time.Hour)))
				e.start()
				e.put(&o30Obj{ID: "k", Value: "1"}, &o30Obj{ID: "other", Value: "1"})
				e.waitQuiet()
				failed := make(chan struct{}, 1)
				tgt.beforeDelete = func(context.Context, *o30Obj) error {
					select {
					case failed <- struct{}{}:
					default:
					}
					return errors.New("delete fails")
				}
				if stopped {
					e.stop()
				}
				delRev := e.del("k")
				markRev := e.put(&o30Obj{ID: "other", Value: "2"})
				if stopped {
					e.start()
				}
				o30Wait(t, failed, "the failing Delete")
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				reached, low, err := e.rec.WaitUntilReconciled(ctx, markRev)
				require.NoError(t, err)
				require.GreaterOrEqual(t, reached, markRev)
				require.NotZero(t, low, "the failing delete (revision %d) is not in the retry low watermark", delRev)
				require.LessOrEqual(t, low, delRev, "retry low watermark %d above the failing delete's revision %d", low, delRev)
				e.stop()
			})
		}
	}
}

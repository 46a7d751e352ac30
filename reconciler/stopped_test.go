package reconciler_test

// Deletes made while the hive is stopped, or between Register and the
// first start, are handed to Delete after the start, and
// WaitUntilReconciled of their revision returns only after that.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

func TestDeletesWhileStoppedAreAppliedAfterTheStart(t *testing.T) {
	cases := []struct {
		name string
		n    int // objects applied first
		// run stops the hive, deletes, starts it again and returns the
		// revision of the deletes and the keys they leave deleted.
		run func(t *testing.T, f *fixture, tg *target, objs []*item) (statedb.Revision, []string)
	}{
		{"many, some put back as they were or anew", 3000, func(t *testing.T, f *fixture, _ *target, objs []*item) (statedb.Revision, []string) {
			f.stop()
			var asWas []*item
			for _, o := range objs[:200] {
				obj, _ := f.get(o.ID)
				asWas = append(asWas, obj)
			}
			rev := f.remove(ids(objs[:2000])...)
			f.insertAs(asWas...)
			f.upsert(items("k", 400, "2")[200:]...)
			f.start()
			return rev, ids(objs[400:2000])
		}},
		{"everything", 1500, func(t *testing.T, f *fixture, _ *target, objs []*item) (statedb.Revision, []string) {
			f.stop()
			wtxn := f.db.WriteTxn(f.table)
			require.NoError(t, f.table.DeleteAll(wtxn))
			rev := f.table.Revision(wtxn)
			wtxn.Commit()
			f.start()
			return rev, ids(objs)
		}},
		{"over five stops, each before the deletes before were handled", 2000, func(t *testing.T, f *fixture, _ *target, objs []*item) (rev statedb.Revision, deleted []string) {
			for cycle := range 5 {
				f.stop()
				var keys []string
				for i := cycle; i < len(objs); i += 5 {
					keys = append(keys, objs[i].ID)
				}
				deleted = append(deleted, keys...)
				rev = f.remove(keys...)
				if cycle > 0 { // some deleted the cycle before, back and deleted again
					var back []*item
					for i := cycle - 1; i < 200; i += 5 {
						back = append(back, &item{ID: objs[i].ID, Value: fmt.Sprint("back", cycle)})
					}
					f.upsert(back...)
					rev = f.remove(ids(back)...)
				}
				f.start()
			}
			return rev, deleted
		}},
		{"unread at the stop, the loop held in an update", 100, func(t *testing.T, f *fixture, tg *target, objs []*item) (statedb.Revision, []string) {
			held := tg.hold("held")
			f.upsert(&item{ID: "held", Value: "1"})
			held.wait(t)
			rev := f.remove(ids(objs[:50])...)
			f.stop()
			f.upsert(&item{ID: "held", Value: "2"})
			f.start()
			return rev, ids(objs[:50])
		}},
		{"while paused, before and during the stop", 300, func(t *testing.T, f *fixture, _ *target, objs []*item) (statedb.Revision, []string) {
			f.rec.Pause()
			rev := f.remove(ids(objs[:100])...)
			f.stop()
			f.remove(ids(objs[100:150])...)
			f.start()
			f.rec.Resume()
			return rev, ids(objs[:100]) // converged checks the others
		}},
	}
	for _, c := range cases {
		for _, v := range variants {
			t.Run(c.name+"/"+v.String(), func(t *testing.T) {
				tg := newTarget()
				f := v.fixture(t, tg, nil)
				f.start()
				objs := items("k", c.n, "1")
				f.upsert(objs...)
				f.converged(tg)
				rev, deleted := c.run(t, f, tg, objs)
				f.reconciledTo(rev)
				deletedAll(t, tg, deleted)
				f.converged(tg)
			})
		}
	}
}

// Deletes made between Register and the first start, of objects the
// table held at Register and the target holds from an earlier run, are
// applied after the start.
func TestDeletesBeforeTheFirstStartAreApplied(t *testing.T) {
	for _, v := range variants {
		t.Run(v.String(), func(t *testing.T) {
			tg := newTarget()
			objs := items("k", 500, "1")
			var rev statedb.Revision
			f := v.fixture(t, tg, &with{
				setup: func(f *fixture) []reconciler.Option {
					for _, o := range objs {
						tg.Set(o.ID, o.Value)
						o.Status = status.Done()
					}
					f.insertAs(objs...)
					return nil
				},
				registered: func(f *fixture) { rev = f.remove(ids(objs[:300])...) },
			})
			f.start()
			f.reconciledTo(rev)
			deletedAll(t, tg, ids(objs[:300]))
			f.converged(tg)
		})
	}
}

// A delete whose Delete fails keeps WaitUntilReconciled's retry low
// watermark at or below its revision, also when made while the hive was
// stopped, once a later write is handled.
func TestFailingDeleteKeepsTheRetryLowWatermark(t *testing.T) {
	for _, v := range variants {
		for _, stopped := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v,whileStopped=%v", v, stopped), func(t *testing.T) {
				tg := newTarget()
				f := v.fixture(t, tg, nil, reconciler.WithRetry(time.Hour, time.Hour))
				f.start()
				f.upsert(&item{ID: "k", Value: "1"}, &item{ID: "other", Value: "1"})
				f.caughtUp()
				failed := make(chan struct{}, 1)
				tg.mu.Lock()
				tg.delete = func(_ context.Context, _ *item) error {
					select {
					case failed <- struct{}{}:
					default:
					}
					return errors.New("delete fails")
				}
				tg.mu.Unlock()
				if stopped {
					f.stop()
				}
				delRev := f.remove("k")
				rev := f.upsert(&item{ID: "other", Value: "2"})
				if stopped {
					f.start()
				}
				recv(t, failed, "the failing Delete")
				reached, low := f.reconciledTo(rev)
				require.GreaterOrEqual(t, reached, rev)
				require.NotZero(t, low, "the failing delete (revision %d) is not in the retry low watermark", delRev)
				require.LessOrEqual(t, low, delRev)
			})
		}
	}
}

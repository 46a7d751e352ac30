package reconciler_test

// Deletes made between Register and the first start are handed to Delete
// after the start, and WaitUntilReconciled of a failing delete's revision
// keeps it in the retry low watermark. (Deletes while stopped:
// testdata/stopped_deletes.txtar.)

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

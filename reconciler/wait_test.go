package reconciler_test

// WaitUntilReconciled (how far the reconciler got, and what still fails)
// and WaitForObject.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
)

// WaitUntilReconciled reaches a revision past failing work but reports
// the work in its retry low watermark until it succeeds: a new object
// failing (at its revision or later), one whose retry is in flight, and a
// failing delete (at or below its revision), also one made while the hive
// was stopped.
func TestRetryLowWatermarkHoldsFailingWork(t *testing.T) {
	for _, c := range []struct {
		name                   string
		del, stopped, inFlight bool
	}{{"update", false, false, false}, {"update, retry in flight", false, false, true}, {"delete", true, false, false}, {"delete while stopped", true, true, false}} {
		for _, v := range variants {
			if c.inFlight && v.workers == 1 {
				continue // the loop would wait in the retry, reading nothing
			}
			t.Run(c.name+"/"+v.String(), func(t *testing.T) {
				fo := reconcilertest.NewFaultyOps(itemKey, newTarget(), nil)
				f := v.start(t, fo, nil, reconciler.WithRetry(time.Millisecond, 5*time.Millisecond))
				if c.del {
					f.upsert(&item{ID: "k", Value: "1"})
					f.caughtUp()
				}
				op := map[bool]reconcilertest.Op{false: reconcilertest.OpUpdate, true: reconcilertest.OpDelete}[c.del]
				if c.inFlight { // the first attempt fails, the retry is held
					require.NoError(t, fo.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay, Key: "k", Next: 1}))
					require.NoError(t, fo.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Key: "k", Next: 1}))
				} else {
					require.NoError(t, fo.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Key: "k", Op: op}))
				}
				if c.stopped {
					f.stop()
				}
				var failRev statedb.Revision
				if c.del {
					failRev = f.remove("k")
				} else {
					failRev = f.upsert(&item{ID: "k", Value: "1"})
				}
				rev := f.upsert(&item{ID: "other", Value: "1"})
				if c.stopped {
					f.start()
				}
				waitUntil(t, "a failed call on k", func() (bool, <-chan struct{}) {
					_, changed := fo.CallsWatch()
					all, ok := count(fo, op, "k")
					return all > ok, changed
				})
				if c.inFlight {
					waitUntil(t, "the retry in flight", func() (bool, <-chan struct{}) {
						calls, changed := fo.InFlightWatch()
						return len(calls) == 1, changed
					})
				}
				reached, low := f.reconciledTo(rev)
				require.GreaterOrEqual(t, reached, rev)
				require.NotZero(t, low, "the failing work (revision %d) is not in the retry low watermark", failRev)
				if c.del {
					require.LessOrEqual(t, low, failRev)
				} else {
					require.GreaterOrEqual(t, low, failRev)
				}
				fo.Clear("")
				require.Eventually(t, func() bool {
					_, low, err := f.rec.WaitUntilReconciled(ctxFor(t, timeout), rev)
					return err == nil && low == 0
				}, timeout, time.Millisecond, "no retry left once k succeeds")
			})
		}
	}
}

// Revisions are the table's own: a wait for a revision above the table's
// returns only with ctx, or once the table has changed up to it.
func TestWaitUntilReconciledAboveTheTableRevision(t *testing.T) {
	f := startFixture(t, newTarget(), nil)
	f.upsert(&item{ID: "a"})
	f.waitReconciled()
	rev := f.table.Revision(f.db.ReadTxn()) // a's Done included

	reached, _, err := f.rec.WaitUntilReconciled(ctxFor(t, 50*time.Millisecond), rev+1)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, rev, reached, "the table's revision, no further")

	done := make(chan error, 1)
	go func() {
		_, _, err := f.rec.WaitUntilReconciled(ctxFor(t, timeout), rev+1)
		done <- err
	}()
	next := f.upsert(&item{ID: "b"})
	require.Greater(t, next, rev)
	require.NoError(t, recv(t, done, "the wait to return once the table reached the revision"))
}

// An object written, then written again before the reconciler reads it, is
// read once, with the second write. A round that stops reading on its
// budget past the first write but short of the second has not handed the
// object to Update: WaitUntilReconciled for the first write's revision
// must not return yet. (With several reconcilers on one status set, the
// second write is another reconciler's status.)
func TestWaitUntilReconciledWaitsForAnObjectReadLate(t *testing.T) {
	for _, v := range []variant{{1, false}, {1, true}} { // the loop blocks while an update is held
		t.Run(v.String(), func(t *testing.T) {
			tg := newTarget()
			f := v.start(t, tg, nil, reconciler.WithRoundLimits(4, nil))
			z := tg.hold("z")
			f.upsert(&item{ID: "z"})
			z.wait(t) // the loop reads nothing new until z is let go

			x := &item{ID: "x", Value: "1"}
			revX := f.upsert(append([]*item{x}, items("y", 10, "1")...)...) - 10 // x first
			f.upsert(&item{ID: "x", Value: "2"})                                 // read with y-00009 or later
			y4 := tg.hold("y-00004")
			z.let()
			y4.wait(t) // a round read y-00000..3 and committed them; x is unread
			got, ok := f.get("x")
			require.True(t, ok)
			require.Equal(t, status.KindPending, got.Status.Kind)

			// Where the reconciler has got to, without waiting: a context
			// already ended returns at once, with nil if revX was reached.
			ended, cancel := context.WithCancel(t.Context())
			cancel()
			reached, _, err := f.rec.WaitUntilReconciled(ended, revX)
			require.ErrorIs(t, err, context.Canceled, "WaitUntilReconciled(%d) reached %d while x is Pending", revX, reached)

			y4.let()
			reached, _, err = f.rec.WaitUntilReconciled(ctxFor(t, timeout), revX)
			require.NoError(t, err)
			require.GreaterOrEqual(t, reached, revX)
			got, _ = f.get("x")
			assert.Equal(t, status.KindDone, got.Status.Kind, "x after WaitUntilReconciled(%d)", revX)
			assert.True(t, tg.has("x", "2"), "x applied")
		})
	}
}

// WaitForObject's errors and options, beyond testdata/wait_object.txtar,
// which waits through retryable errors and for absent objects, and returns
// on Done, terminal errors, deletes and the last status at a timeout.

// waitFor runs WaitForObject for id until it returns or d passes.
func (f *fixture) waitFor(id string, d time.Duration, get func(*item) status.Status, opts ...reconciler.WaitOption) (*item, error) {
	if get == nil {
		get = (*item).getStatus
	}
	return reconciler.WaitForObject(ctxFor(f.t, d), f.db, f.table, itemID.Query(id), get, opts...)
}

// A Done object returns at once, also with options (a nil one included);
// a terminal error returns ErrObjectFailed that IsTerminal, with or
// without StopOnError; a retryable one only with StopOnError, and is not
// terminal. A nil DB, table or getStatus is ErrInvalidConfig.
func TestWaitForObjectReturns(t *testing.T) {
	fo := reconcilertest.NewFaultyOps(itemKey, newTarget(), nil)
	require.NoError(t, fo.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeTerminal, Key: "t"}))
	require.NoError(t, fo.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Key: "e"}))
	f := startFixture(t, fo, nil)
	f.upsert(&item{ID: "a"}, &item{ID: "t"}, &item{ID: "e"})
	f.waitKind("a", status.KindDone)

	obj, err := f.waitFor("a", timeout, nil, reconciler.StopOnError(), reconciler.FailIfAbsent(), nil)
	require.NoError(t, err)
	require.Equal(t, status.KindDone, obj.Status.Kind)
	for _, opts := range [][]reconciler.WaitOption{nil, {reconciler.StopOnError()}} {
		obj, err = f.waitFor("t", timeout, nil, opts...)
		require.ErrorIs(t, err, reconciler.ErrObjectFailed)
		require.True(t, reconciler.IsTerminal(err), "%v is terminal", err)
		require.True(t, obj.Status.Terminal)
	}
	obj, err = f.waitFor("e", timeout, nil, reconciler.StopOnError())
	require.ErrorIs(t, err, reconciler.ErrObjectFailed)
	require.False(t, reconciler.IsTerminal(err), "%v is not terminal", err)
	require.Equal(t, status.KindError, obj.Status.Kind)

	ctx, q, get := ctxFor(t, timeout), itemID.Query("a"), (*item).getStatus
	var noTable statedb.Table[*item]
	for _, err := range []error{
		func() error { _, err := reconciler.WaitForObject(ctx, nil, f.table, q, get); return err }(),
		func() error { _, err := reconciler.WaitForObject(ctx, f.db, noTable, q, get); return err }(),
		func() error { _, err := reconciler.WaitForObject(ctx, f.db, f.table, q, nil); return err }(),
	} {
		require.ErrorIs(t, err, reconciler.ErrInvalidConfig)
	}
}

// blockSignal is a context whose Done reports each call on blocked:
// WaitForObject calls it only to block after a read that did not end the
// wait, so a test learns without sleeping that the waiter has looked.
type blockSignal struct {
	context.Context
	blocked chan struct{}
}

func (c blockSignal) Done() <-chan struct{} {
	select {
	case c.blocked <- struct{}{}:
	default:
	}
	return c.Context.Done()
}

// waitBlocked starts WaitForObject for id and returns once it has looked
// and blocked, with its cancel and a channel of its error and object.
func (f *fixture) waitBlocked(id string) (context.CancelFunc, <-chan error, **item) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	f.t.Cleanup(cancel)
	sig := blockSignal{ctx, make(chan struct{}, 1)}
	done, obj := make(chan error, 1), new(*item)
	go func() {
		var err error
		*obj, err = reconciler.WaitForObject(sig, f.db, f.table, itemID.Query(id), (*item).getStatus)
		done <- err
	}()
	recv(f.t, sig.blocked, "the waiter to look and block")
	return cancel, done, obj
}

// An absent object is waited for (other objects do not end the wait) and
// returned once inserted; a wait that ends first says no object matched,
// not ErrObjectDeleted; FailIfAbsent returns ErrObjectNotFound. An object
// seen and then deleted returns ErrObjectDeleted with the object as last
// seen. A context ended already still gets one look.
func TestWaitForObjectAbsent(t *testing.T) {
	f := startFixture(t, newTarget(), nil)
	_, late, lateObj := f.waitBlocked("late")
	cancelNever, never, _ := f.waitBlocked("never")
	f.upsert(&item{ID: "other"})
	f.waitKind("other", status.KindDone)
	f.upsert(&item{ID: "late"})
	require.NoError(t, recv(t, late, "the wait for late"))
	require.Equal(t, status.KindDone, (*lateObj).Status.Kind)
	cancelNever()
	err := recv(t, never, "the wait for never")
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "no object matched")
	require.NotErrorIs(t, err, reconciler.ErrObjectDeleted)

	_, err = f.waitFor("missing", timeout, nil, reconciler.FailIfAbsent())
	require.ErrorIs(t, err, reconciler.ErrObjectNotFound)

	f.insertAs(&item{ID: "gone"}) // Unset: waited for, left alone
	_, gone, goneObj := f.waitBlocked("gone")
	f.remove("gone")
	require.ErrorIs(t, recv(t, gone, "the wait for gone"), reconciler.ErrObjectDeleted)
	require.Equal(t, "gone", (*goneObj).ID, "the object as last seen")

	obj, err := f.waitFor("late", 0, nil)
	require.NoError(t, err)
	require.Equal(t, "late", obj.ID)
}

// With a status.Set only the given reconciler's entry counts: a missing
// entry reads Pending, and Pending, Refreshing and Error keep the wait
// going whatever the other entries say.
func TestWaitForObjectStatusSet(t *testing.T) {
	f := startFixture(t, newTarget(), nil) // item.Status stays Unset: left alone
	getA, _ := statusOf("a")
	set := status.NewSet().Set("b", status.Done())
	for _, s := range []status.Set{set, set.Set("a", status.Refreshing()), set.Set("a", status.Error(errors.New("busy")))} {
		f.insertAs(&item{ID: "s", Statuses: s})
		_, err := f.waitFor("s", 20*time.Millisecond, getA)
		require.ErrorIs(t, err, context.DeadlineExceeded, "returned on %v", s)
	}
	f.insertAs(&item{ID: "s", Statuses: set.Set("a", status.Done()).Set("b", status.Pending())})
	obj, err := f.waitFor("s", timeout, getA)
	require.NoError(t, err)
	require.Equal(t, status.KindPending, obj.Statuses.Get("b").Kind)
}

package reconciler_test

// WaitForObject's errors and options, beyond testdata/wait_object.txtar,
// which waits through retryable errors and for absent objects, and returns
// on Done, terminal errors, deletes and the last status at a timeout.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
)

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

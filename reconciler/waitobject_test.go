package reconciler_test

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

// blockSignal is a context whose Done method reports each call on blocked.
// WaitForObject calls Done only when it is about to block after a read that
// did not end the wait, so a test learns that the waiter has looked without
// sleeping.
type blockSignal struct {
	context.Context
	blocked chan struct{}
}

func (c *blockSignal) Done() <-chan struct{} {
	select {
	case c.blocked <- struct{}{}:
	default: // nobody needs more than the buffered signals
	}
	return c.Context.Done()
}

// waiter runs WaitForObject for one item in a goroutine.
type waiter struct {
	t       *testing.T
	cancel  context.CancelFunc
	seen    chan status.Status // every status getStatus read, in order
	blocked chan struct{}
	obj     *item
	err     error
	exited  chan struct{}
}

// startWaiter starts WaitForObject on f's table for the item with id, with
// a context that also ends after 20s as a safety net. get reads the status
// (nil means the item's own status). The waiter is cancelled and joined
// when the test ends.
func startWaiter(t *testing.T, f *fixture, id string, get func(*item) status.Status, opts ...reconciler.WaitOption) *waiter {
	if get == nil {
		get = (*item).getStatus
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	w := &waiter{
		t:       t,
		cancel:  cancel,
		seen:    make(chan status.Status, 1000),
		blocked: make(chan struct{}, 1000),
		exited:  make(chan struct{}),
	}
	record := func(it *item) status.Status {
		st := get(it)
		w.seen <- st
		return st
	}
	go func() {
		defer close(w.exited)
		w.obj, w.err = reconciler.WaitForObject(&blockSignal{ctx, w.blocked}, f.db, f.table, itemID.Query(id), record, opts...)
	}()
	t.Cleanup(func() {
		cancel()
		<-w.exited
	})
	return w
}

// await returns once the waiter has read a status of kind and gone on
// waiting. It fails the test if the waiter returns first. Every read of the
// object sends on seen and then, unless it ends the wait, on blocked, so
// the two are consumed in pairs.
func (w *waiter) await(kind status.Kind) {
	w.t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		var st status.Status
		select {
		case st = <-w.seen:
		case <-w.exited:
			w.t.Fatalf("WaitForObject returned (%v, %v) before reading a %s status", w.obj, w.err, kind)
		case <-timeout:
			w.t.Fatalf("WaitForObject did not read a %s status", kind)
		}
		select {
		case <-w.blocked:
		case <-w.exited:
			w.t.Fatalf("WaitForObject returned (%v, %v) on a %s status instead of waiting", w.obj, w.err, st.Kind)
		}
		if st.Kind == kind {
			return
		}
	}
}

// awaitBlocked returns once the waiter has read at least once and gone on
// waiting, for an object that is absent.
func (w *waiter) awaitBlocked() {
	w.t.Helper()
	select {
	case <-w.blocked:
	case <-w.exited:
		w.t.Fatalf("WaitForObject returned (%v, %v) instead of waiting", w.obj, w.err)
	}
}

// result waits for WaitForObject to return.
func (w *waiter) result() (*item, error) {
	<-w.exited
	return w.obj, w.err
}

// failingOps fails every update.
func failingOps(t *testing.T) *reconcilertest.FaultyOps[*item] {
	fo := reconcilertest.NewFaultyOps(itemKey, newTarget(), nil)
	require.NoError(t, fo.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Op: reconcilertest.OpUpdate}))
	return fo
}

func TestWaitForObjectDone(t *testing.T) {
	f := startFixture(t, newTarget(), nil)
	f.upsert(&item{ID: "a", Value: "x"})

	obj, err := reconciler.WaitForObject(ctxFor(t, timeout), f.db, f.table, itemID.Query("a"), (*item).getStatus)
	require.NoError(t, err)
	require.Equal(t, "a", obj.ID)
	require.Equal(t, status.KindDone, obj.Status.Kind)

	// An object that is Done already returns at once, also with the options.
	obj, err = reconciler.WaitForObject(ctxFor(t, timeout), f.db, f.table, itemID.Query("a"), (*item).getStatus,
		reconciler.StopOnError(), reconciler.FailIfAbsent(), nil)
	require.NoError(t, err)
	require.Equal(t, status.KindDone, obj.Status.Kind)
}

func TestWaitForObjectRetryableErrorKeepsWaiting(t *testing.T) {
	tg := newTarget()
	retry := tg.hold("a") // the retry succeeds once the waiter has seen the Error
	fo := reconcilertest.NewFaultyOps(itemKey, tg, nil)
	require.NoError(t, fo.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Key: "a", Next: 1}))
	f := startFixture(t, fo, nil, reconciler.WithRetry(time.Millisecond, time.Millisecond))
	f.upsert(&item{ID: "a"})

	w := startWaiter(t, f, "a", nil)
	w.await(status.KindError)
	retry.let()
	obj, err := w.result()
	require.NoError(t, err)
	require.Equal(t, status.KindDone, obj.Status.Kind)
	attempts, _ := count(fo, reconcilertest.OpUpdate, "a")
	require.GreaterOrEqual(t, attempts, 2)
}

func TestWaitForObjectTerminalError(t *testing.T) {
	fo := reconcilertest.NewFaultyOps(itemKey, newTarget(), nil)
	require.NoError(t, fo.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeTerminal, Key: "a"}))
	f := startFixture(t, fo, nil)
	f.upsert(&item{ID: "a", Value: "bad"})

	// A terminal error ends the wait without StopOnError: the status
	// records that no retry will come, and the error says so too.
	obj, err := reconciler.WaitForObject(ctxFor(t, timeout), f.db, f.table, itemID.Query("a"), (*item).getStatus)
	require.ErrorIs(t, err, reconciler.ErrObjectFailed)
	require.True(t, reconciler.IsTerminal(err), "%v is terminal", err)
	require.ErrorContains(t, err, "injected fault: update a")
	require.Equal(t, "a", obj.ID)
	require.Equal(t, status.KindError, obj.Status.Kind)
	require.True(t, obj.Status.Terminal)

	// StopOnError returns it the same way.
	obj, err = reconciler.WaitForObject(ctxFor(t, timeout), f.db, f.table, itemID.Query("a"), (*item).getStatus, reconciler.StopOnError())
	require.ErrorIs(t, err, reconciler.ErrObjectFailed)
	require.ErrorContains(t, err, "injected fault: update a")
	require.True(t, obj.Status.Terminal)

	// A change to the object is reconciled again.
	fo.Clear("a")
	f.upsert(&item{ID: "a", Value: "good"})
	obj, err = reconciler.WaitForObject(ctxFor(t, timeout), f.db, f.table, itemID.Query("a"), (*item).getStatus)
	require.NoError(t, err)
	require.Equal(t, "good", obj.Value)
	require.Equal(t, status.KindDone, obj.Status.Kind)
}

func TestWaitForObjectStopOnErrorReturnsRetryableErrors(t *testing.T) {
	f := startFixture(t, failingOps(t), nil)
	f.upsert(&item{ID: "a"})

	obj, err := reconciler.WaitForObject(ctxFor(t, timeout), f.db, f.table, itemID.Query("a"), (*item).getStatus, reconciler.StopOnError())
	require.ErrorIs(t, err, reconciler.ErrObjectFailed)
	require.ErrorContains(t, err, "injected fault: update a")
	require.Equal(t, status.KindError, obj.Status.Kind)
}

func TestWaitForObjectDeleted(t *testing.T) {
	f := startFixture(t, failingOps(t), nil) // retried: the wait goes on
	f.upsert(&item{ID: "a"})

	w := startWaiter(t, f, "a", nil)
	w.await(status.KindError)
	f.remove("a")
	obj, err := w.result()
	require.ErrorIs(t, err, reconciler.ErrObjectDeleted)
	require.Equal(t, "a", obj.ID, "the object as last seen")
}

func TestWaitForObjectContextEnds(t *testing.T) {
	tg := newTarget()
	tg.hold("a") // stays Pending until the hive stops
	f := startFixture(t, tg, nil)
	f.upsert(&item{ID: "a"})

	w := startWaiter(t, f, "a", nil)
	w.await(status.KindPending)
	w.cancel()
	obj, err := w.result()
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "last status Pending")
	require.Equal(t, "a", obj.ID)

	// A context that has ended already still gets one look.
	ctx, cancel := context.WithTimeout(context.Background(), 0)
	cancel()
	_, err = reconciler.WaitForObject(ctx, f.db, f.table, itemID.Query("a"), (*item).getStatus)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestWaitForObjectNotYetInserted(t *testing.T) {
	f := startFixture(t, newTarget(), nil)

	t.Run("inserted later", func(t *testing.T) {
		w := startWaiter(t, f, "late", nil)
		w.awaitBlocked() // it looked, found nothing and waits
		f.upsert(&item{ID: "late"})
		obj, err := w.result()
		require.NoError(t, err)
		require.Equal(t, "late", obj.ID)
		require.Equal(t, status.KindDone, obj.Status.Kind)
	})

	t.Run("never inserted", func(t *testing.T) {
		w := startWaiter(t, f, "never", nil)
		w.awaitBlocked()
		f.upsert(&item{ID: "other"}) // other objects do not end the wait
		f.waitKind("other", status.KindDone)
		w.cancel()
		obj, err := w.result()
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorContains(t, err, "no object matched")
		require.NotErrorIs(t, err, reconciler.ErrObjectDeleted)
		require.Nil(t, obj)
	})

	t.Run("FailIfAbsent", func(t *testing.T) {
		obj, err := reconciler.WaitForObject(ctxFor(t, timeout), f.db, f.table, itemID.Query("missing"), (*item).getStatus, reconciler.FailIfAbsent())
		require.ErrorIs(t, err, reconciler.ErrObjectNotFound)
		require.Nil(t, obj)
	})
}

func TestWaitForObjectStatusSet(t *testing.T) {
	// The fixture's reconciler reads item.Status, which stays Unset here, so
	// it leaves these objects alone and the test writes the set itself.
	f := startFixture(t, newTarget(), nil)
	getA := func(it *item) status.Status { return it.Statuses.Get("a") }
	set := status.NewSet().Set("b", status.Done())
	f.insertAs(&item{ID: "s", Statuses: set})

	// "a" has no entry and reads as Pending: b's Done does not count.
	w := startWaiter(t, f, "s", getA)
	w.await(status.KindPending)
	f.insertAs(&item{ID: "s", Statuses: set.Set("a", status.Refreshing())})
	w.await(status.KindRefreshing)
	f.insertAs(&item{ID: "s", Statuses: set.Set("a", status.Error(errors.New("busy")))})
	w.await(status.KindError)
	f.insertAs(&item{ID: "s", Statuses: set.Set("a", status.Done()).Set("b", status.Pending())})
	obj, err := w.result()
	require.NoError(t, err)
	require.Equal(t, status.KindDone, obj.Statuses.Get("a").Kind)
	require.Equal(t, status.KindPending, obj.Statuses.Get("b").Kind)
}

func TestWaitForObjectInvalidArguments(t *testing.T) {
	f := startFixture(t, newTarget(), nil)
	ctx, q, get := ctxFor(t, timeout), itemID.Query("a"), (*item).getStatus
	var noTable statedb.Table[*item]

	_, err := reconciler.WaitForObject(ctx, nil, f.table, q, get)
	require.ErrorIs(t, err, reconciler.ErrInvalidConfig)
	_, err = reconciler.WaitForObject(ctx, f.db, noTable, q, get)
	require.ErrorIs(t, err, reconciler.ErrInvalidConfig)
	_, err = reconciler.WaitForObject(ctx, f.db, f.table, q, nil)
	require.ErrorIs(t, err, reconciler.ErrInvalidConfig)
}

package reconcilertest_test

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
)

// innerOps counts the calls that reach the wrapped operations.
type innerOps struct {
	mu      sync.Mutex
	updates []string
	deletes []string
	prunes  int
	batches [][]string
}

func (o *innerOps) Update(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, it *item) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.updates = append(o.updates, it.ID)
	return nil
}

func (o *innerOps) Delete(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, it *item) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.deletes = append(o.deletes, it.ID)
	return nil
}

func (o *innerOps) Prune(context.Context, statedb.ReadTxn, iter.Seq2[*item, statedb.Revision]) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.prunes++
	return nil
}

func (o *innerOps) UpdateBatch(_ context.Context, _ statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var ids []string
	for i := range batch {
		ids = append(ids, batch[i].Object.ID)
		batch[i].Result = fmt.Errorf("inner result %s", batch[i].Object.ID)
	}
	o.batches = append(o.batches, ids)
}

func (o *innerOps) DeleteBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	o.UpdateBatch(ctx, txn, batch)
}

func update(f *reconcilertest.FaultyOps[*item], ctx context.Context, id string) error {
	return f.Update(ctx, nil, 1, &item{ID: id})
}

func TestFaultyOpsPassesThroughWithoutFaults(t *testing.T) {
	inner := &innerOps{}
	f := reconcilertest.NewFaultyOps(itemKey, inner, nil)
	require.Nil(t, f.Batch(), "no batch operations wrapped")
	ctx := context.Background()
	require.NoError(t, update(f, ctx, "a"))
	require.NoError(t, f.Delete(ctx, nil, 2, &item{ID: "b"}))
	require.NoError(t, f.Prune(ctx, nil, func(yield func(*item, statedb.Revision) bool) { yield(&item{ID: "a"}, 1) }))
	assert.Equal(t, []string{"a"}, inner.updates)
	assert.Equal(t, []string{"b"}, inner.deletes)
	assert.Equal(t, 1, inner.prunes)

	calls := f.Calls()
	require.Len(t, calls, 3)
	assert.Equal(t, "update a rev=1", calls[0].String())
	assert.Equal(t, "delete b rev=2", calls[1].String())
	assert.Equal(t, "prune desired=1", calls[2].String())
	assert.Equal(t, []int{1, 2, 3}, []int{calls[0].Seq, calls[1].Seq, calls[2].Seq})
}

func TestFaultModes(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		mode  reconcilertest.Mode
		check func(t *testing.T, err error)
	}{
		{reconcilertest.ModeError, func(t *testing.T, err error) {
			assert.ErrorIs(t, err, reconcilertest.ErrInjected)
			assert.False(t, reconciler.IsTerminal(err))
			assert.EqualError(t, err, "injected fault: update a")
		}},
		{reconcilertest.ModeTerminal, func(t *testing.T, err error) {
			assert.ErrorIs(t, err, reconcilertest.ErrInjected)
			assert.True(t, reconciler.IsTerminal(err))
		}},
		{reconcilertest.ModeRetryAfter, func(t *testing.T, err error) {
			assert.ErrorIs(t, err, reconcilertest.ErrInjected)
			assert.False(t, reconciler.IsTerminal(err))
		}},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			inner := &innerOps{}
			f := reconcilertest.NewFaultyOps(itemKey, inner, nil)
			require.NoError(t, f.Inject(reconcilertest.Fault{Mode: tc.mode, Key: "a", Duration: time.Second}))
			err := update(f, ctx, "a")
			require.Error(t, err)
			tc.check(t, err)
			assert.Empty(t, inner.updates, "a faulted call must not reach the operations")
			require.NoError(t, update(f, ctx, "b"), "other keys are not affected")
			assert.Equal(t, []string{"b"}, inner.updates)
			assert.ErrorIs(t, f.Calls()[0].Err, reconcilertest.ErrInjected, "the outcome is recorded")
		})
	}

	t.Run("panic", func(t *testing.T) {
		inner := &innerOps{}
		f := reconcilertest.NewFaultyOps(itemKey, inner, nil)
		require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModePanic}))
		assert.PanicsWithValue(t, "injected panic: update a", func() { _ = update(f, ctx, "a") })
		assert.Empty(t, inner.updates)
		require.Len(t, f.Calls(), 1)
		assert.EqualError(t, f.Calls()[0].Err, "injected panic: update a")
	})
}

func TestFaultDelay(t *testing.T) {
	t.Run("duration", func(t *testing.T) {
		inner := &innerOps{}
		f := reconcilertest.NewFaultyOps(itemKey, inner, nil)
		require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay, Duration: 20 * time.Millisecond}))
		start := time.Now()
		require.NoError(t, update(f, context.Background(), "a"))
		assert.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)
		assert.Equal(t, []string{"a"}, inner.updates, "a delayed call goes ahead")
	})

	t.Run("context ends first", func(t *testing.T) {
		inner := &innerOps{}
		f := reconcilertest.NewFaultyOps(itemKey, inner, nil)
		require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay, Duration: time.Hour}))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		assert.ErrorIs(t, update(f, ctx, "a"), context.Canceled)
		assert.Empty(t, inner.updates)
	})

	t.Run("until cleared", func(t *testing.T) {
		inner := &innerOps{}
		f := reconcilertest.NewFaultyOps(itemKey, inner, nil)
		require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay, Key: "a", Next: 1}))
		ctx := &doneSpy{Context: context.Background(), asked: make(chan struct{})}
		done := make(chan error)
		go func() { done <- update(f, ctx, "a") }()
		<-ctx.asked // the call is waiting in the delay
		assert.Empty(t, f.Faults(), "a spent fault is not listed")
		select {
		case err := <-done:
			t.Fatalf("delay without duration returned before Clear: %v", err)
		default:
		}
		assert.Equal(t, 0, f.Clear("a"), "no active fault left")
		require.NoError(t, <-done, "Clear releases the held call")
		assert.Equal(t, []string{"a"}, inner.updates)
	})
}

// doneSpy reports when Done is first asked for: a FaultyOps asks only when
// it starts waiting in a delay.
type doneSpy struct {
	context.Context
	once  sync.Once
	asked chan struct{}
}

func (c *doneSpy) Done() <-chan struct{} {
	c.once.Do(func() { close(c.asked) })
	return c.Context.Done()
}

func TestFaultSelection(t *testing.T) {
	ctx := context.Background()
	inner := &innerOps{}
	f := reconcilertest.NewFaultyOps(itemKey, inner, nil)
	require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Op: reconcilertest.OpDelete}))
	require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeTerminal, Key: "a", Next: 2}))

	// The newest matching fault decides: a's updates fail terminally twice,
	// then pass; deletes always fail, prunes never (the key-less delete
	// fault is for deletes only).
	assert.True(t, reconciler.IsTerminal(update(f, ctx, "a")))
	assert.Equal(t, []reconcilertest.Fault{
		{Mode: reconcilertest.ModeError, Op: reconcilertest.OpDelete},
		{Mode: reconcilertest.ModeTerminal, Key: "a", Next: 1},
	}, f.Faults(), "Next counts down")
	assert.True(t, reconciler.IsTerminal(update(f, ctx, "a")))
	assert.NoError(t, update(f, ctx, "a"))
	err := f.Delete(ctx, nil, 1, &item{ID: "a"})
	assert.ErrorIs(t, err, reconcilertest.ErrInjected)
	assert.False(t, reconciler.IsTerminal(err), "the spent terminal fault no longer decides")
	assert.NoError(t, f.Prune(ctx, nil, func(func(*item, statedb.Revision) bool) {}))
	assert.Equal(t, []string{"a"}, inner.updates)

	// A key-less fault reaches prunes; Clear with a key leaves it alone.
	require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Op: reconcilertest.OpPrune}))
	assert.Equal(t, 0, f.Clear("zz"))
	assert.ErrorIs(t, f.Prune(ctx, nil, func(func(*item, statedb.Revision) bool) {}), reconcilertest.ErrInjected)
	assert.Equal(t, 2, f.Clear(""))
	assert.Empty(t, f.Faults())
	assert.NoError(t, f.Delete(ctx, nil, 1, &item{ID: "a"}))
}

// outcomes runs n updates of keys k0..k(n-1) and returns which failed.
func outcomes(t *testing.T, fault reconcilertest.Fault, n int) []bool {
	f := reconcilertest.NewFaultyOps(itemKey, &innerOps{}, nil)
	require.NoError(t, f.Inject(fault))
	failed := make([]bool, n)
	for i := range failed {
		failed[i] = update(f, context.Background(), fmt.Sprintf("k%d", i)) != nil
	}
	return failed
}

func TestFaultProbabilityIsSeeded(t *testing.T) {
	fault := reconcilertest.Fault{Mode: reconcilertest.ModeError, Probability: 0.3, Seed: 1}
	first := outcomes(t, fault, 1000)
	assert.Equal(t, first, outcomes(t, fault, 1000), "the same seed gives the same faults")
	fault.Seed = 2
	assert.NotEqual(t, first, outcomes(t, fault, 1000), "another seed gives other faults")

	n := 0
	for _, failed := range first {
		if failed {
			n++
		}
	}
	assert.InDelta(t, 300, n, 60, "about 30%% of 1000 calls fail")

	// Next counts the faults injected, not the calls considered.
	fault.Next = 5
	n = 0
	for _, failed := range outcomes(t, fault, 1000) {
		if failed {
			n++
		}
	}
	assert.Equal(t, 5, n)
}

func TestFaultValidation(t *testing.T) {
	f := reconcilertest.NewFaultyOps(itemKey, &innerOps{}, nil)
	for _, bad := range []reconcilertest.Fault{
		{},
		{Mode: 99},
		{Mode: reconcilertest.ModeError, Op: "frob"},
		{Mode: reconcilertest.ModeError, Op: reconcilertest.OpPrune, Key: "a"},
		{Mode: reconcilertest.ModeError, Next: -1},
		{Mode: reconcilertest.ModeError, Probability: 1.5},
		{Mode: reconcilertest.ModeDelay, Duration: -time.Second},
		{Mode: reconcilertest.ModePanic, After: true},
	} {
		assert.Error(t, f.Inject(bad), "%+v", bad)
	}
	assert.Empty(t, f.Faults(), "nothing invalid was added")
	assert.Panics(t, func() { reconcilertest.NewFaultyOps[*item](nil, &innerOps{}, nil) })

	for _, m := range []reconcilertest.Mode{reconcilertest.ModeError, reconcilertest.ModeTerminal, reconcilertest.ModeRetryAfter, reconcilertest.ModePanic, reconcilertest.ModeDelay} {
		parsed, err := reconcilertest.ParseMode(m.String())
		require.NoError(t, err)
		assert.Equal(t, m, parsed)
	}
	_, err := reconcilertest.ParseMode("explode")
	assert.ErrorContains(t, err, `unknown fault mode "explode"`)
}

// A fault with After fires once the wrapped operation succeeded: the change
// is applied, then the call fails or is held; a call the wrapped operation
// failed keeps its own error. In a batch, it fires on its entry alone.
func TestFaultAfter(t *testing.T) {
	ctx := context.Background()
	inner := &innerOps{}
	f := reconcilertest.NewFaultyOps(itemKey, inner, nil)
	require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Key: "a", After: true, Next: 1}))
	assert.Equal(t, "--key=a --next=1 --after error", f.Faults()[0].String())
	require.ErrorIs(t, update(f, ctx, "a"), reconcilertest.ErrInjected)
	require.NoError(t, update(f, ctx, "a"))
	assert.Equal(t, []string{"a", "a"}, inner.updates, "applied before it failed")

	require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay, Op: reconcilertest.OpDelete, After: true}))
	spy := &doneSpy{Context: ctx, asked: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- f.Delete(spy, nil, 2, &item{ID: "b"}) }()
	<-spy.asked // the call is waiting in the delay
	inner.mu.Lock()
	assert.Equal(t, []string{"b"}, inner.deletes, "held with the delete applied")
	inner.mu.Unlock()
	f.Clear("")
	require.NoError(t, <-done)

	batched := reconcilertest.NewFaultyOps(itemKey, inner, inner)
	require.NoError(t, batched.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeTerminal, Key: "c", After: true}))
	batch := []reconciler.BatchEntry[*item]{{Object: &item{ID: "c"}}, {Object: &item{ID: "d"}}}
	batched.UpdateBatch(ctx, nil, batch)
	assert.EqualError(t, batch[0].Result, "inner result c", "an operation's own error is kept")
	okBatch := &okBatchOps{}
	batched = reconcilertest.NewFaultyOps(itemKey, okBatch, okBatch)
	require.NoError(t, batched.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeTerminal, Key: "e", After: true}))
	batch = []reconciler.BatchEntry[*item]{{Object: &item{ID: "e"}}, {Object: &item{ID: "g"}}}
	batched.UpdateBatch(ctx, nil, batch)
	assert.True(t, reconciler.IsTerminal(batch[0].Result), "%v", batch[0].Result)
	assert.NoError(t, batch[1].Result)
	assert.Equal(t, []string{"e", "g"}, okBatch.updates, "both applied")
}

// okBatchOps applies every batch entry with success.
type okBatchOps struct{ innerOps }

func (o *okBatchOps) UpdateBatch(_ context.Context, _ statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	for i := range batch {
		o.updates = append(o.updates, batch[i].Object.ID)
	}
}

func (o *okBatchOps) DeleteBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	o.UpdateBatch(ctx, txn, batch)
}

package reconcilertest_test

import (
	"context"
	"errors"
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

func TestFaultyOpsBatch(t *testing.T) {
	ctx := context.Background()
	entries := func(ids ...string) []reconciler.BatchEntry[*item] {
		batch := make([]reconciler.BatchEntry[*item], len(ids))
		for i, id := range ids {
			batch[i] = reconciler.BatchEntry[*item]{Object: &item{ID: id}, Revision: statedb.Revision(i + 1)}
		}
		return batch
	}

	t.Run("faulted entries skip the wrapped batch", func(t *testing.T) {
		inner := &innerOps{}
		f := reconcilertest.NewFaultyOps(itemKey, inner, inner)
		require.NotNil(t, f.Batch())
		require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Key: "b"}))
		batch := entries("a", "b", "c")
		f.UpdateBatch(ctx, nil, batch)
		assert.Equal(t, [][]string{{"a", "c"}}, inner.batches)
		assert.EqualError(t, batch[0].Result, "inner result a", "results of the wrapped batch are copied back")
		assert.ErrorIs(t, batch[1].Result, reconcilertest.ErrInjected)
		assert.EqualError(t, batch[2].Result, "inner result c")
		for _, c := range f.Calls() {
			assert.Equal(t, 1, c.Batch, "entries are recorded with the batch's number: %s", c)
		}
	})

	t.Run("panic part way through", func(t *testing.T) {
		inner := &innerOps{}
		f := reconcilertest.NewFaultyOps(itemKey, inner, inner)
		require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModePanic, Key: "c"}))
		assert.PanicsWithValue(t, "injected panic: delete c", func() { f.DeleteBatch(ctx, nil, entries("a", "b", "c", "d")) })
		assert.Equal(t, [][]string{{"a", "b"}}, inner.batches, "the entries before the panic were applied")
	})

	t.Run("without wrapped batch operations", func(t *testing.T) {
		inner := &innerOps{}
		f := reconcilertest.NewFaultyOps(itemKey, inner, nil)
		batch := entries("a", "b")
		f.UpdateBatch(ctx, nil, batch)
		assert.Equal(t, []string{"a", "b"}, inner.updates, "entries go to Update one by one")
		assert.NoError(t, batch[0].Result)
	})
}

func TestFaultyOpsConcurrentUse(t *testing.T) {
	f := reconcilertest.NewFaultyOps(itemKey, reconcilertest.NewTarget(itemKey, itemValue), nil)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range 200 {
				_ = update(f, context.Background(), fmt.Sprintf("k%d", (w+i)%10))
			}
		}()
		go func() {
			defer wg.Done()
			for i := range 50 {
				_ = f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Key: fmt.Sprintf("k%d", i%10), Next: 1 + i%3, Probability: 0.5, Seed: uint64(i)})
				_ = f.Faults()
				f.Clear(fmt.Sprintf("k%d", (i+5)%10))
			}
		}()
	}
	wg.Wait()
	assert.Len(t, f.Calls(), 800)
}

func TestFaultyOpsInFlight(t *testing.T) {
	ctx := context.Background()
	keys := func(calls []reconcilertest.Call) []string {
		var ks []string
		for _, c := range calls {
			ks = append(ks, string(c.Op)+" "+c.Key)
		}
		return ks
	}

	t.Run("a held call is in flight until it returns", func(t *testing.T) {
		f := reconcilertest.NewFaultyOps(itemKey, &innerOps{}, nil)
		require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay, Key: "a"}))
		inFlight, changed := f.InFlightWatch()
		assert.Empty(t, inFlight)
		done := make(chan error)
		go func() { done <- update(f, ctx, "a") }()
		<-changed // the call started
		assert.Equal(t, []string{"update a"}, keys(f.InFlight()))
		assert.Empty(t, f.Calls(), "a call is recorded when it returns")
		f.Clear("a")
		require.NoError(t, <-done)
		assert.Empty(t, f.InFlight())
		assert.Equal(t, []string{"update a"}, keys(f.Calls()))
	})

	t.Run("a call in flight keeps the fault it was given", func(t *testing.T) {
		// Clearing a's faults once its call shows in flight releases that
		// call; it must not then take the older fault meant for the next.
		for range 100 {
			f := reconcilertest.NewFaultyOps(itemKey, &innerOps{}, nil)
			t.Cleanup(func() { f.Clear("") }) // releases a call held by mistake
			require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay, Next: 1}))
			require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay, Key: "a", Next: 1}))
			_, changed := f.InFlightWatch()
			done := make(chan error)
			go func() { done <- update(f, ctx, "a") }()
			<-changed
			f.Clear("a")
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatalf("the call took the older fault: %v", f.Faults())
			}
			require.Len(t, f.Faults(), 1, "the fault for the next call is left")
		}
	})

	t.Run("a batch's entries are in flight from its start", func(t *testing.T) {
		inner := &innerOps{}
		f := reconcilertest.NewFaultyOps(itemKey, inner, inner)
		require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay, Key: "b"}))
		batch := []reconciler.BatchEntry[*item]{{Object: &item{ID: "a"}}, {Object: &item{ID: "b"}}, {Object: &item{ID: "c"}}}
		done := make(chan struct{})
		go func() { f.UpdateBatch(ctx, nil, batch); close(done) }()
		for { // until all three started; b is then held until cleared
			calls, changed := f.InFlightWatch()
			if len(calls) == 3 {
				break
			}
			<-changed
		}
		assert.Equal(t, []string{"update a", "update b", "update c"}, keys(f.InFlight()))
		f.Clear("b")
		<-done
		assert.Empty(t, f.InFlight())
		assert.Len(t, f.Calls(), 3)
	})

	t.Run("entries a panic kept from running are not left in flight", func(t *testing.T) {
		inner := &innerOps{}
		f := reconcilertest.NewFaultyOps(itemKey, inner, inner)
		require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModePanic, Key: "b"}))
		batch := []reconciler.BatchEntry[*item]{{Object: &item{ID: "a"}}, {Object: &item{ID: "b"}}, {Object: &item{ID: "c"}}}
		assert.Panics(t, func() { f.DeleteBatch(ctx, nil, batch) })
		assert.Empty(t, f.InFlight())
		assert.Equal(t, []string{"delete a", "delete b"}, keys(f.Calls()), "c was never attempted")
	})

	t.Run("ResetCalls keeps the calls in flight", func(t *testing.T) {
		f := reconcilertest.NewFaultyOps(itemKey, &innerOps{}, nil)
		require.NoError(t, update(f, ctx, "x"))
		require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay, Key: "a"}))
		_, changed := f.InFlightWatch()
		done := make(chan error)
		go func() { done <- update(f, ctx, "a") }()
		<-changed
		f.ResetCalls()
		assert.Equal(t, []string{"update a"}, keys(f.InFlight()))
		f.Clear("a")
		require.NoError(t, <-done)
		calls := f.Calls()
		assert.Equal(t, []string{"update a"}, keys(calls))
		assert.Equal(t, 1, calls[0].Seq)
	})
}

// innerProcessor is innerOps implementing BatchProcessor: each call is
// recorded as the deleted keys, "|", the upserted keys, and returns err.
type innerProcessor struct {
	innerOps
	err error
}

func (o *innerProcessor) ProcessBatch(_ context.Context, _ statedb.ReadTxn, deleted, upserted []reconciler.BatchEntry[*item]) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	var ids []string
	for i := range deleted {
		ids = append(ids, deleted[i].Object.ID)
		deleted[i].Result = fmt.Errorf("inner result %s", deleted[i].Object.ID)
	}
	ids = append(ids, "|")
	for i := range upserted {
		ids = append(ids, upserted[i].Object.ID)
		if upserted[i].Object.ID != "nil" {
			upserted[i].Result = fmt.Errorf("inner result %s", upserted[i].Object.ID)
		}
	}
	o.batches = append(o.batches, ids)
	return o.err
}

func TestFaultyOpsProcessor(t *testing.T) {
	ctx := context.Background()
	entries := func(ids ...string) []reconciler.BatchEntry[*item] {
		batch := make([]reconciler.BatchEntry[*item], len(ids))
		for i, id := range ids {
			batch[i] = reconciler.BatchEntry[*item]{Object: &item{ID: id}, Revision: statedb.Revision(i + 1)}
		}
		return batch
	}
	processor := func(f *reconcilertest.FaultyOps[*item]) reconciler.BatchProcessor[*item] {
		p, ok := f.Processor().(reconciler.BatchProcessor[*item])
		require.True(t, ok, "Processor implements BatchProcessor")
		_, ok = f.Processor().(interface {
			Prune(context.Context, statedb.ReadTxn, iter.Seq2[*item, statedb.Revision]) error
		})
		require.True(t, ok, "Processor has Prune, to serve alone")
		return p
	}

	t.Run("one call, one batch number, faults per entry", func(t *testing.T) {
		inner := &innerProcessor{err: errors.New("inner batch error")}
		f := reconcilertest.NewFaultyOps(itemKey, inner, inner)
		require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Key: "b"}))
		require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Key: "x"}))
		deleted, upserted := entries("x", "y"), entries("a", "b", "nil")
		err := processor(f).ProcessBatch(ctx, nil, deleted, upserted)
		assert.EqualError(t, err, "inner batch error", "the wrapped ProcessBatch's error is returned")
		assert.Equal(t, [][]string{{"y", "|", "a", "nil"}}, inner.batches, "one call without the faulted entries")
		assert.ErrorIs(t, deleted[0].Result, reconcilertest.ErrInjected)
		assert.EqualError(t, deleted[1].Result, "inner result y")
		assert.EqualError(t, upserted[0].Result, "inner result a")
		assert.ErrorIs(t, upserted[1].Result, reconcilertest.ErrInjected)
		assert.NoError(t, upserted[2].Result, "left to the returned error")
		calls := f.Calls()
		require.Len(t, calls, 5)
		got := map[string]string{}
		for _, c := range calls {
			assert.Equal(t, 1, c.Batch, "every entry is recorded with the call's number: %s", c)
			got[c.Key] = fmt.Sprint(c.Op, ": ", c.Err)
		}
		assert.Equal(t, "delete: inner result y", got["y"])
		assert.Equal(t, "update: inner batch error", got["nil"], "an entry without a Result is recorded with the returned error")
		assert.Empty(t, f.InFlight())
	})

	t.Run("over batch operations without ProcessBatch", func(t *testing.T) {
		inner := &innerOps{}
		f := reconcilertest.NewFaultyOps(itemKey, inner, inner)
		assert.NoError(t, processor(f).ProcessBatch(ctx, nil, entries("x"), entries("a", "b")))
		assert.Equal(t, [][]string{{"x"}, {"a", "b"}}, inner.batches, "DeleteBatch, then UpdateBatch")
	})

	t.Run("over single operations", func(t *testing.T) {
		inner := &innerOps{}
		f := reconcilertest.NewFaultyOps(itemKey, inner, nil)
		deleted, upserted := entries("x"), entries("a", "b")
		assert.NoError(t, processor(f).ProcessBatch(ctx, nil, deleted, upserted))
		assert.Equal(t, []string{"x"}, inner.deletes)
		assert.Equal(t, []string{"a", "b"}, inner.updates)
		assert.NoError(t, upserted[1].Result)
	})

	t.Run("panic part way through", func(t *testing.T) {
		inner := &innerProcessor{}
		f := reconcilertest.NewFaultyOps(itemKey, inner, inner)
		require.NoError(t, f.Inject(reconcilertest.Fault{Mode: reconcilertest.ModePanic, Key: "b"}))
		assert.PanicsWithValue(t, "injected panic: update b", func() {
			_ = processor(f).ProcessBatch(ctx, nil, entries("x"), entries("a", "b", "c"))
		})
		assert.Equal(t, [][]string{{"x", "|", "a"}}, inner.batches, "the entries before the panic were applied")
		assert.Empty(t, f.InFlight(), "the entries after it are not in flight")
	})
}

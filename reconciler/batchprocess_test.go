package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tracing"
)

// batchOnly is batch operations without Operations: UpdateBatch and
// DeleteBatch over a target, and no Prune.
type batchOnly struct{ tg *target }

func (b batchOnly) UpdateBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	b.tg.UpdateBatch(ctx, txn, batch)
}

func (b batchOnly) DeleteBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	b.tg.DeleteBatch(ctx, txn, batch)
}

// processor is batch operations implementing BatchProcessor over a target.
// ProcessBatch records each call's keys, reverses both slices, applies each
// entry, then lets the hook, if set, change the entries and choose the
// error to return. UpdateBatch and DeleteBatch must not be called.
type processor struct {
	tg *target
	t  testing.TB

	mu    sync.Mutex
	calls [][2][]string // per call, the keys deleted and upserted
	hook  func(ctx context.Context, call int, deleted, upserted []reconciler.BatchEntry[*item]) error
	done  chan struct{} // closed and replaced when a call returns
	// Calls from the blockFrom-th on (if not 0) wait for block to close
	// before doing anything; set it under mu once calls may run.
	blockFrom int
	block     chan struct{}
}

func newProcessor(t testing.TB) *processor {
	return &processor{tg: newTarget(), t: t, done: make(chan struct{}), block: make(chan struct{})}
}

func (p *processor) UpdateBatch(context.Context, statedb.ReadTxn, []reconciler.BatchEntry[*item]) {
	p.t.Error("UpdateBatch called on a BatchProcessor")
}

func (p *processor) DeleteBatch(context.Context, statedb.ReadTxn, []reconciler.BatchEntry[*item]) {
	p.t.Error("DeleteBatch called on a BatchProcessor")
}

func keysOf(entries []reconciler.BatchEntry[*item]) []string {
	keys := make([]string, len(entries))
	for i, e := range entries {
		keys[i] = e.Object.ID
	}
	return keys
}

func (p *processor) ProcessBatch(ctx context.Context, txn statedb.ReadTxn, deleted, upserted []reconciler.BatchEntry[*item]) (err error) {
	p.mu.Lock()
	p.calls = append(p.calls, [2][]string{keysOf(deleted), keysOf(upserted)})
	call, hook, blockFrom := len(p.calls), p.hook, p.blockFrom
	p.mu.Unlock()
	if blockFrom > 0 && call >= blockFrom {
		select {
		case <-p.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	defer func() {
		p.mu.Lock()
		close(p.done)
		p.done = make(chan struct{})
		p.mu.Unlock()
	}()
	slices.Reverse(deleted)
	slices.Reverse(upserted)
	p.tg.DeleteBatch(ctx, txn, deleted)
	p.tg.UpdateBatch(ctx, txn, upserted)
	if hook != nil {
		return hook(ctx, call, deleted, upserted)
	}
	return nil
}

// called returns the calls so far.
func (p *processor) called() [][2][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// waitCalls waits until n calls have returned.
func (p *processor) waitCalls(t testing.TB, n int) {
	t.Helper()
	waitUntil(t, fmt.Sprint(n, " ProcessBatch calls"), func() (bool, <-chan struct{}) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.calls) >= n, p.done
	})
}

// Register takes batch operations without Operations when they can prune,
// or when pruning is off; otherwise it says what is missing.
func TestRegisterBatchOnly(t *testing.T) {
	db := statedb.New()
	table, err := statedb.NewTable(db, "items", itemID)
	require.NoError(t, err)
	tg := newTarget()
	register := func(ops reconciler.Operations[*item], batch reconciler.BatchOperations[*item], opts ...reconciler.Option) (reconciler.Reconciler[*item], error) {
		p := reconciler.Params{Log: slog.Default(), DB: db, JobGroup: &fakeGroup{}}
		var (
			r   reconciler.Reconciler[*item]
			err error
		)
		require.NotPanics(t, func() {
			r, err = reconciler.Register(p, table, (*item).clone, (*item).setStatus, (*item).getStatus, ops, batch, opts...)
		})
		return r, err
	}

	t.Run("neither", func(t *testing.T) {
		r, err := register(nil, nil, reconciler.WithPruning(0))
		require.ErrorIs(t, err, reconciler.ErrInvalidConfig)
		assert.Nil(t, r)
		assert.Contains(t, err.Error(), "Operations must not be nil when BatchOperations is nil")
	})
	t.Run("no Prune, pruning on", func(t *testing.T) {
		for _, opts := range [][]reconciler.Option{nil, {reconciler.WithPruning(time.Minute)}} {
			r, err := register(nil, batchOnly{tg}, opts...)
			require.ErrorIs(t, err, reconciler.ErrInvalidConfig)
			assert.Nil(t, r)
			assert.Contains(t, err.Error(), "no Prune method")
			assert.Contains(t, err.Error(), "WithPruning(0)")
			assert.Contains(t, err.Error(), "reconciler_test.batchOnly", "names the type")
		}
	})
	t.Run("no Prune, pruning off", func(t *testing.T) {
		r, err := register(nil, batchOnly{tg}, reconciler.WithPruning(0))
		require.NoError(t, err)
		require.NotNil(t, r)
		assert.NotPanics(t, r.Prune, "Prune does nothing")
	})
	t.Run("with Prune", func(t *testing.T) {
		r, err := register(nil, tg)
		require.NoError(t, err)
		require.NotNil(t, r)
	})
	t.Run("processor without Prune, pruning off", func(t *testing.T) {
		r, err := register(nil, newProcessor(t), reconciler.WithPruning(0))
		require.NoError(t, err)
		require.NotNil(t, r)
	})
}

// Batch operations serving alone apply, retry and prune through the batch
// calls and their own Prune, in every variant.
func TestBatchOnlyPrunes(t *testing.T) {
	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprint("workers=", workers), func(t *testing.T) {
			tg := newTarget()
			attempts := 0
			tg.update = func(_ context.Context, it *item) error {
				tg.mu.Lock()
				defer tg.mu.Unlock()
				if it.ID != "b" {
					return nil
				}
				if attempts++; attempts == 1 {
					return errors.New("b fails once")
				}
				return nil
			}
			f := startFixture(t, nil, &with{batch: tg}, reconciler.WithConcurrency(workers), reconciler.WithPruning(0),
				reconciler.WithRetry(time.Millisecond, 10*time.Millisecond))
			tg.Set("stray", "1") // in the target only
			f.upsert(items("a", 3, "1")...)
			f.upsert(&item{ID: "b", Value: "1", Status: status.Pending()})
			f.waitKind("b", status.KindDone)
			f.waitReconciled()
			tg.mu.Lock()
			assert.Equal(t, 2, attempts, "b failed once, then was retried")
			tg.mu.Unlock()
			tg.pruneNow(f)
			assert.False(t, tg.has("stray", "1"), "pruned by the batch operations' Prune")
			assert.True(t, tg.has("b", "1"))
			f.remove("b")
			f.caughtUp()
			_, found, _ := tg.Get("b")
			assert.False(t, found, "deleted through DeleteBatch")
		})
	}
}

// Batch operations serving alone without Prune, pruning off: a requested
// prune does nothing, and the reconciler works on.
func TestBatchOnlyWithoutPruneIgnoresPrune(t *testing.T) {
	tg := newTarget()
	f := startFixture(t, nil, &with{batch: batchOnly{tg}}, reconciler.WithPruning(0))
	tg.Set("stray", "1")
	f.rec.Prune()
	f.upsert(items("a", 3, "1")...)
	f.waitReconciled()
	f.rec.Prune()
	f.remove(ids(items("a", 1, "1"))...)
	f.caughtUp()
	tg.mu.Lock()
	assert.Zero(t, tg.returned, "no prune ran")
	tg.mu.Unlock()
	assert.True(t, tg.has("stray", "1"), "nothing pruned")
	assert.True(t, tg.has("a-00001", "1"))
}

// A BatchProcessor gets a round's deletes and updates in one call, and
// never UpdateBatch or DeleteBatch.
func TestProcessBatchGetsDeletesAndUpdatesInOneCall(t *testing.T) {
	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprint("workers=", workers), func(t *testing.T) {
			p := newProcessor(t)
			f := startFixture(t, p.tg, &with{batch: p}, reconciler.WithConcurrency(workers), reconciler.WithPruning(0))
			f.upsert(&item{ID: "a", Value: "1", Status: status.Pending()}, &item{ID: "b", Value: "1", Status: status.Pending()})
			f.waitReconciled()
			calls := len(p.called())
			f.rec.Pause()
			f.remove("a")
			f.upsert(&item{ID: "c", Value: "1", Status: status.Pending()})
			f.rec.Resume()
			f.caughtUp()
			got := p.called()[calls:]
			if workers == 1 {
				require.Len(t, got, 1, "one call for the round")
				assert.Equal(t, [2][]string{{"a"}, {"c"}}, got[0])
			} else {
				var deleted, upserted []string
				for _, c := range got {
					deleted, upserted = append(deleted, c[0]...), append(upserted, c[1]...)
				}
				assert.Equal(t, []string{"a"}, deleted)
				assert.Equal(t, []string{"c"}, upserted)
			}
			want := []string{"update a=1", "update b=1", "delete a", "update c=1"}
			if applied := p.tg.applied(); workers == 1 {
				assert.Equal(t, want, sortedFirst2(applied))
			} else {
				assert.Equal(t, sorted(want), sorted(applied))
			}
			assert.Equal(t, status.KindDone, f.waitKind("c", status.KindDone).Status.Kind)
		})
	}
}

// sortedFirst2 sorts the first two of words, applied in either order.
func sortedFirst2(words []string) []string {
	if len(words) >= 2 {
		slices.Sort(words[:2])
	}
	return words
}

// Results bind to entries, not to positions, when ProcessBatch reorders
// both slices and overwrites an entry: each object gets its own result,
// and the object of the overwritten entry is tried again.
func TestProcessBatchResultsBindToEntries(t *testing.T) {
	p := newProcessor(t)
	var (
		lost  string
		uCall int // the call that got the u entries: one transaction, one call
	)
	p.hook = func(_ context.Context, call int, deleted, upserted []reconciler.BatchEntry[*item]) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if uCall != 0 || !slices.ContainsFunc(upserted, func(e reconciler.BatchEntry[*item]) bool { return e.Object.ID == "u-00000" }) {
			return nil
		}
		uCall, p.blockFrom = call, call+1 // the retries wait until the test has looked
		for i := range upserted {
			if id := upserted[i].Object.ID; id == "u-00002" {
				upserted[i].Result = errors.New(id + " failed")
			}
		}
		for i := range deleted {
			if id := deleted[i].Object.ID; id == "d-00001" {
				deleted[i].Result = errors.New(id + " failed")
			}
		}
		// Overwrite an entry that succeeded with a copy the reconciler
		// cannot bind.
		for i := range upserted {
			if e := upserted[i]; e.Result == nil {
				lost = e.Object.ID
				upserted[i] = reconciler.BatchEntry[*item]{Object: e.Object, Revision: e.Revision}
				break
			}
		}
		return nil
	}
	f := startFixture(t, p.tg, &with{batch: p}, reconciler.WithPruning(0), reconciler.WithRetry(time.Millisecond, 10*time.Millisecond))
	f.upsert(items("d", 3, "1")...)
	f.waitReconciled()
	p.waitCalls(t, 1)
	before := len(p.called()) // the d objects may have come in more than one call

	// One transaction, one round, one call: deletes d-0..2, updates u-0..3.
	wtxn := f.db.WriteTxn(f.table)
	for _, it := range items("d", 3, "1") {
		_, _, err := f.table.Delete(wtxn, it)
		require.NoError(t, err)
	}
	for _, it := range items("u", 4, "1") {
		it.Status = status.Pending()
		_, _, err := f.table.Insert(wtxn, it)
		require.NoError(t, err)
	}
	wtxn.Commit()
	p.waitCalls(t, before+1)
	p.mu.Lock()
	require.Equal(t, before+1, uCall, "the transaction's call comes next")
	p.mu.Unlock()
	got := p.called()[before]
	assert.Equal(t, ids(items("d", 3, "1")), sorted(got[0]))
	assert.Equal(t, ids(items("u", 4, "1")), sorted(got[1]))
	require.NotEmpty(t, lost)

	assert.Equal(t, "u-00002 failed", f.waitKind("u-00002", status.KindError).Status.GetError())
	assert.Contains(t, f.waitKind(lost, status.KindError).Status.GetError(), "lost the entry")
	for _, id := range ids(items("u", 4, "1")) {
		if id != "u-00002" && id != lost {
			assert.Equal(t, status.KindDone, f.waitKind(id, status.KindDone).Status.Kind, id)
		}
	}

	// The failed delete, the failed update and the lost entry are tried
	// again through ProcessBatch; nothing else is.
	close(p.block)
	for _, id := range ids(items("u", 4, "1")) {
		f.waitKind(id, status.KindDone)
	}
	waitUntil(t, "the failed delete tried again", func() (bool, <-chan struct{}) {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.calls[before+1:] {
			if slices.Contains(c[0], "d-00001") {
				return true, nil
			}
		}
		return false, p.done
	})
	f.caughtUp()
	var deleted, upserted []string
	for _, c := range p.called()[before+1:] {
		deleted, upserted = append(deleted, c[0]...), append(upserted, c[1]...)
	}
	assert.Equal(t, []string{"d-00001"}, deleted)
	assert.Equal(t, sorted([]string{"u-00002", lost}), sorted(upserted))
}

// What ProcessBatch returns, panics with or runs out of time with is the
// outcome of every entry without a Result; those are tried again through
// the batch.
func TestProcessBatchCallOutcome(t *testing.T) {
	cases := []struct {
		name    string
		timeout time.Duration
		hook    func(ctx context.Context, upserted []reconciler.BatchEntry[*item]) error
		want    string // the error of the entries without a Result
	}{
		{"error", 0, func(context.Context, []reconciler.BatchEntry[*item]) error { return errors.New("target down") }, "target down"},
		{"panic", 0, func(context.Context, []reconciler.BatchEntry[*item]) error { panic("boom") }, "operation panicked: boom"},
		{"timeout returned", 50 * time.Millisecond, func(ctx context.Context, _ []reconciler.BatchEntry[*item]) error {
			<-ctx.Done()
			return ctx.Err()
		}, "context deadline exceeded"},
		{"timeout ignored", 50 * time.Millisecond, func(ctx context.Context, _ []reconciler.BatchEntry[*item]) error {
			<-ctx.Done()
			return nil
		}, "context deadline exceeded"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newProcessor(t)
			p.hook = func(ctx context.Context, call int, _, upserted []reconciler.BatchEntry[*item]) error {
				if call != 1 {
					return nil
				}
				for i := range upserted {
					if upserted[i].Object.ID == "a-00000" {
						upserted[i].Result = errors.New("own result")
					}
				}
				return tc.hook(ctx, upserted)
			}
			p.blockFrom = 2
			f := startFixture(t, p.tg, &with{batch: p}, reconciler.WithPruning(0),
				reconciler.WithRetry(time.Millisecond, 10*time.Millisecond), reconciler.WithOperationTimeout(tc.timeout))
			f.upsert(items("a", 3, "1")...)
			assert.Equal(t, "own result", f.waitKind("a-00000", status.KindError).Status.GetError())
			for _, id := range []string{"a-00001", "a-00002"} {
				assert.Contains(t, f.waitKind(id, status.KindError).Status.GetError(), tc.want, id)
			}
			close(p.block)
			for _, id := range ids(items("a", 3, "1")) {
				f.waitKind(id, status.KindDone)
			}
			f.waitReconciled()
			for _, c := range p.called() {
				assert.Empty(t, c[0])
			}
		})
	}
}

// spanLog is a tracing.Tracer that records the batch spans: how each
// started and ended, and whether ProcessBatch's context carried it.
type spanLog struct {
	mu    sync.Mutex
	spans []*batchSpan
}

type batchSpan struct {
	log   *spanLog
	start tracing.Start
	end   *tracing.End
}

type batchSpanKey struct{}

func (l *spanLog) Start(ctx context.Context, s tracing.Start) (context.Context, tracing.Span) {
	sp := &batchSpan{log: l, start: s}
	if s.Kind == tracing.Round {
		return ctx, sp
	}
	l.mu.Lock()
	l.spans = append(l.spans, sp)
	l.mu.Unlock()
	return context.WithValue(ctx, batchSpanKey{}, sp), sp
}

func (sp *batchSpan) End(e tracing.End) {
	sp.log.mu.Lock()
	defer sp.log.mu.Unlock()
	if sp.end != nil && sp.start.Kind != tracing.Round {
		panic("span ended twice")
	}
	sp.end = &e
}

// A ProcessBatch call has one span of kind ProcessBatch, in the context
// ProcessBatch gets, with the entries and deletes it was given and the
// entries that failed; no UpdateBatch or DeleteBatch span. Its duration is
// reported as an update if it has updates, else as a delete.
func TestProcessBatchSpansAndMetrics(t *testing.T) {
	p := newProcessor(t)
	spans := &spanLog{}
	p.hook = func(ctx context.Context, call int, deleted, upserted []reconciler.BatchEntry[*item]) error {
		if sp, _ := ctx.Value(batchSpanKey{}).(*batchSpan); sp == nil || sp.start.Kind != tracing.ProcessBatch {
			t.Errorf("call %d: ProcessBatch's context carries no span of its kind", call)
		}
		if call == 2 {
			upserted[0].Result = errors.New("one failed")
		}
		return nil
	}
	m := &durations{}
	f := startFixture(t, p.tg, &with{batch: p}, reconciler.WithPruning(0), reconciler.WithTracer(spans),
		reconciler.WithMetrics(m), reconciler.WithRetry(time.Hour, time.Hour))
	f.upsert(items("a", 3, "1")...)
	f.waitReconciled()
	f.rec.Pause()
	f.remove("a-00000", "a-00001")
	f.upsert(&item{ID: "b"})
	f.rec.Resume()
	f.waitKind("b", status.KindError)
	f.rec.Pause()
	f.remove("a-00002")
	f.rec.Resume()
	f.caughtUp()

	spans.mu.Lock()
	defer spans.mu.Unlock()
	type got struct {
		kind             tracing.Kind
		objects, deletes int
		failed           int
		outcome          metrics.Outcome
	}
	var all []got
	for _, sp := range spans.spans {
		require.NotNil(t, sp.end, "every span ends")
		all = append(all, got{sp.start.Kind, sp.start.Objects, sp.start.Deletes, sp.end.Failed, sp.end.Outcome})
	}
	assert.Equal(t, []got{
		{tracing.ProcessBatch, 3, 0, 0, metrics.OutcomeSuccess},
		{tracing.ProcessBatch, 3, 2, 1, metrics.OutcomeSuccess},
		{tracing.ProcessBatch, 1, 1, 0, metrics.OutcomeSuccess},
	}, all)
	assert.Equal(t, []string{metrics.OpUpdate, metrics.OpUpdate, metrics.OpDelete}, m.operations())
}

// durations is metrics.Metrics recording the operation names of
// ReconciliationDuration.
type durations struct {
	mu  sync.Mutex
	ops []string
}

func (d *durations) ReconciliationDuration(_ cell.FullModuleID, _, operation string, _ time.Duration) {
	d.mu.Lock()
	d.ops = append(d.ops, operation)
	d.mu.Unlock()
}
func (d *durations) ReconciliationErrors(cell.FullModuleID, string, int, int) {}
func (d *durations) PruneError(cell.FullModuleID, string, error)              {}
func (d *durations) PruneDuration(cell.FullModuleID, string, time.Duration)   {}

func (d *durations) operations() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.ops)
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

// WithMaxAttempts gives up on an object's own failures, not on an entry
// the batch operation lost: that object is tried again.
func TestMaxAttemptsTriesLostBatchEntriesAgain(t *testing.T) {
	p := newProcessor(t)
	p.hook = func(_ context.Context, call int, _, upserted []reconciler.BatchEntry[*item]) error {
		if call == 1 {
			for i, e := range upserted {
				upserted[i] = reconciler.BatchEntry[*item]{Object: e.Object, Revision: e.Revision}
			}
		}
		return nil
	}
	f := startFixture(t, p.tg, &with{batch: p}, reconciler.WithPruning(0), reconciler.WithMaxAttempts(1), reconciler.WithRetry(time.Millisecond, 10*time.Millisecond))
	f.upsert(items("a", 2, "1")...)
	for _, id := range ids(items("a", 2, "1")) {
		assert.Equal(t, status.KindDone, f.waitKind(id, status.KindDone).Status.Kind, id)
	}
	assert.GreaterOrEqual(t, len(p.called()), 2, "the lost entries tried again")
}

package reconciler_test

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
	"go.uber.org/goleak"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// loadOps fails every operation until block is called; from then on every
// operation (single or batch) blocks until its context ends. It records
// what the shutdown test checks: calls in flight, calls after stop, and how
// the blocked calls ended.
type loadOps struct {
	mu           sync.Mutex
	blocking     bool
	stopped      bool
	inFlight     int
	blockedCalls int // calls that blocked
	blockedObjs  int // objects in those calls
	cancelled    int // blocked calls that ended with context.Canceled
	otherEnd     []error
	afterStop    int
	lateStarts   int           // calls that began with their context already cancelled
	entered      chan struct{} // receives one value per blocked call, if there is room
}

func newLoadOps() *loadOps { return &loadOps{entered: make(chan struct{}, 1024)} }

var errLoad = errors.New("failing under load")

// call is the body of every operation on n objects.
func (l *loadOps) call(ctx context.Context, n int) error {
	l.mu.Lock()
	if l.stopped {
		l.afterStop++
	}
	if ctx.Err() != nil {
		l.lateStarts++
	}
	l.inFlight++
	blocking := l.blocking
	if blocking {
		l.blockedCalls++
		l.blockedObjs += n
	}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.inFlight--
		l.mu.Unlock()
	}()
	if !blocking {
		return errLoad
	}
	select {
	case l.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	err := ctx.Err()
	l.mu.Lock()
	if errors.Is(err, context.Canceled) {
		l.cancelled++
	} else {
		l.otherEnd = append(l.otherEnd, err)
	}
	l.mu.Unlock()
	return err
}

func (l *loadOps) block() {
	l.mu.Lock()
	l.blocking = true
	l.mu.Unlock()
}

func (l *loadOps) Update(ctx context.Context, _ statedb.ReadTxn, _ statedb.Revision, _ *item) error {
	return l.call(ctx, 1)
}

func (l *loadOps) Delete(ctx context.Context, _ statedb.ReadTxn, _ statedb.Revision, _ *item) error {
	return l.call(ctx, 1)
}

func (l *loadOps) Prune(ctx context.Context, _ statedb.ReadTxn, _ iter.Seq2[*item, statedb.Revision]) error {
	return l.call(ctx, 0)
}

func (l *loadOps) UpdateBatch(ctx context.Context, _ statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	err := l.call(ctx, len(batch))
	for i := range batch {
		batch[i].Result = err
	}
}

func (l *loadOps) DeleteBatch(ctx context.Context, _ statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	err := l.call(ctx, len(batch))
	for i := range batch {
		batch[i].Result = err
	}
}

// TestShutdownUnderLoad stops the hive while thousands of objects are queued
// for retry and every worker is blocked in an operation (holding a batch of
// hundreds with BatchOperations), with more work queued behind them and,
// with several workers, a prune in flight on the reconciler's loop. Stop
// must return promptly; every blocked operation must have seen its context
// cancelled and returned before Stop returned; no operation may start after
// Stop returns; and no goroutine may be left behind.
func TestShutdownUnderLoad(t *testing.T) {
	const objects = 3000
	for _, workers := range []int{1, 8} {
		for _, batch := range []bool{false, true} {
			name := fmt.Sprintf("workers=%d-single", workers)
			if batch {
				name = fmt.Sprintf("workers=%d-batch", workers)
			}
			t.Run(name, func(t *testing.T) {
				ignore := goleak.IgnoreCurrent()
				ops := newLoadOps()
				var batchOps reconciler.BatchOperations[*item]
				if batch {
					batchOps = ops
				}
				f := startFixture(t, ops, &with{batch: batchOps},
					reconciler.WithConcurrency(workers),
					reconciler.WithRetry(20*time.Millisecond, time.Second),
					reconciler.WithoutPruning())

				// Phase 1: every object fails once and is queued for retry.
				objs := make([]*item, objects)
				for i := range objs {
					objs[i] = &item{ID: fmt.Sprintf("a%05d", i)}
				}
				f.upsert(objs...)
				waitCount(t, f, status.KindError, objects)

				// Phase 2: operations block. New objects and deletes pile
				// up behind the blocked workers; retries come due.
				ops.block()
				objs = make([]*item, objects)
				for i := range objs {
					objs[i] = &item{ID: fmt.Sprintf("b%05d", i)}
				}
				f.upsert(objs...)
				var gone []string
				for i := 0; i < objects; i += 3 {
					gone = append(gone, fmt.Sprintf("a%05d", i))
				}
				f.remove(gone...)
				blocked := workers
				if workers > 1 {
					// The loop prunes while the workers are busy.
					f.rec.Prune()
					blocked++
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				for range blocked {
					select {
					case <-ops.entered:
					case <-ctx.Done():
						t.Fatalf("fewer than %d operations blocked", blocked)
					}
				}

				ops.mu.Lock()
				blockedCalls, blockedObjs := ops.blockedCalls, ops.blockedObjs
				ops.mu.Unlock()
				t.Logf("stopping with %d call(s) on %d object(s) blocked, %d objects in Error",
					blockedCalls, blockedObjs, mustCount(f, status.KindError))

				start := time.Now()
				f.stop()
				took := time.Since(start)
				ops.mu.Lock()
				inFlight := ops.inFlight
				ops.stopped = true
				ops.mu.Unlock()

				assert.Less(t, took, 5*time.Second, "Stop must return promptly")
				assert.Zero(t, inFlight, "operations still running after Stop returned")

				// Once no goroutine of the hive is left, nothing can start
				// an operation any more; check for late starts after that.
				goleak.VerifyNone(t, ignore)
				ops.mu.Lock()
				defer ops.mu.Unlock()
				assert.Zero(t, ops.afterStop, "operations started after Stop returned")
				assert.Zero(t, ops.lateStarts, "operations started once the hive was stopping")
				assert.Equal(t, ops.blockedCalls, ops.cancelled, "every blocked operation sees context.Canceled")
				assert.Empty(t, ops.otherEnd, "blocked operations ended otherwise")
				assert.GreaterOrEqual(t, ops.blockedCalls, blocked)
				if batch {
					assert.Greater(t, ops.blockedObjs, 10*workers, "workers should hold large batches")
				}
			})
		}
	}
}

func mustCount(f *fixture, kind status.Kind) int {
	return f.countKind(f.db.ReadTxn(), kind)
}

// waitCount waits until exactly n objects have a status of kind.
func waitCount(t *testing.T, f *fixture, kind status.Kind, n int) {
	t.Helper()
	f.waitTable(fmt.Sprintf("%d objects to be %s", n, kind), func(txn statedb.ReadTxn) bool { return f.countKind(txn, kind) == n })
}

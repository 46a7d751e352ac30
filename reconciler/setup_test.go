package reconciler_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/tables"
)

var errSetup = errors.New("target not readable yet")

// setupProbe is a setup step (WithSetup) that fails while fails is above
// zero, holds while hold is set, and records every call. ops' calls that
// start while the step of the current run has not succeeded are counted
// in early: none may be.
type setupProbe struct {
	mu    sync.Mutex
	fails int                                   // failures left
	fail  func(ctx context.Context) error       // the error of a failure; nil: errSetup
	hold  chan struct{}                         // non-nil: each call waits for it to close (or ctx)
	seen  chan struct{}                         // closed and replaced on every call's end
	calls atomic.Int64                          // calls that ended
	ready atomic.Bool                           // the last call succeeded
	early atomic.Int64                          // operations started while not ready
	txns  []statedb.ReadTxn                     // the txn of each call
	after func(ctx context.Context, call int64) // runs at the end of each call
}

func newSetupProbe(fails int) *setupProbe {
	return &setupProbe{fails: fails, seen: make(chan struct{})}
}

func (p *setupProbe) setup(ctx context.Context, txn statedb.ReadTxn) (err error) {
	p.mu.Lock()
	hold, fail := p.hold, p.fail
	p.mu.Unlock()
	defer func() {
		n := p.calls.Add(1)
		p.mu.Lock()
		p.txns = append(p.txns, txn)
		if p.after != nil {
			p.after(ctx, n)
		}
		close(p.seen)
		p.seen = make(chan struct{})
		p.mu.Unlock()
	}()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.mu.Lock()
	failing := p.fails > 0
	if failing {
		p.fails--
	}
	p.mu.Unlock()
	if failing {
		if fail != nil {
			return fail(ctx)
		}
		return errSetup
	}
	p.ready.Store(true)
	return nil
}

// watch returns the calls so far and a channel closed on the next.
func (p *setupProbe) watch() (int64, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls.Load(), p.seen
}

func (p *setupProbe) waitCalls(t testing.TB, n int64) {
	t.Helper()
	waitUntil(t, "setup calls", func() (bool, <-chan struct{}) {
		calls, ch := p.watch()
		return calls >= n, ch
	})
}

// gate makes ops count in early the calls that start before the setup
// step succeeded.
func (p *setupProbe) gate(ops *target) {
	ops.setFail(func(reconcilertest.Op, *item) error {
		if !p.ready.Load() {
			p.early.Add(1)
		}
		return nil
	})
}

func setupOptions(p *setupProbe) []reconciler.Option {
	return []reconciler.Option{
		reconciler.WithSetup(p.setup),
		reconciler.WithRetry(time.Millisecond, 4*time.Millisecond),
	}
}

// TestSetupGatesOperations: setup fails a few times; objects written before
// the start and while it fails (a delete among them) converge once it
// succeeds, and no operation, nor the requested prune, starts before.
func TestSetupGatesOperations(t *testing.T) {
	forVariants(t, variants, func(t *testing.T, v variant) {
		ops, p := newTarget(), newSetupProbe(3)
		p.gate(ops)
		p.hold = make(chan struct{})
		f := v.fixture(t, ops, nil, append(setupOptions(p), reconciler.WithPruning(time.Hour))...)
		f.upsert(items("a", 5, "1")...)
		f.start()
		f.upsert(items("b", 5, "1")...)
		f.remove("a-00001")
		f.upsert(&item{ID: "a-00002", Value: "2"})
		rev := f.table.Revision(f.db.ReadTxn())
		f.rec.Prune()

		// Held in its first attempt: nothing is reported done.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		reached, _, err := f.rec.WaitUntilReconciled(ctx, rev)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, reached, rev)

		p.mu.Lock()
		close(p.hold)
		p.hold = nil
		p.mu.Unlock()
		f.reconciledTo(rev)
		f.waitReconciled()
		assert.Equal(t, int64(4), p.calls.Load(), "3 failures, then success")
		assert.Zero(t, p.early.Load(), "operations started before setup succeeded")
		assert.NotContains(t, ops.State(), "a-00001")
		f.waitApplied(ops, "a-00002", "2")
		f.waitApplied(ops, "b-00004", "1")
		waitUntil(t, "the prune asked for", func() (bool, <-chan struct{}) {
			ch := ops.startedWatch() // before the look: a prune's start closes it
			return ops.prunes.Load() > 0, ch
		})
	})
}

// TestSetupHealthAndInfo: while setup fails health is Degraded with its
// error and the reconcilers row is setting-up with the error and attempts;
// both clear once it succeeds.
func TestSetupHealthAndInfo(t *testing.T) {
	ops, p := newTarget(), newSetupProbe(1<<30)
	p.gate(ops)
	f := startFixture(t, ops, &with{tables: true}, setupOptions(p)...)
	f.upsert(items("a", 3, "1")...)
	f.waitHealth(func(level cell.Level, msg string) bool {
		return level == cell.StatusDegraded && strings.Contains(msg, "setup failing: "+errSetup.Error())
	})
	info := f.waitInfo("setting-up with attempts", func(i *tables.Info) bool {
		return i.State == tables.StateSettingUp && i.SetupAttempts >= 2
	})
	assert.Equal(t, errSetup.Error(), info.SetupError)
	assert.Contains(t, info.TableRow()[2], "setup failing")
	assert.Zero(t, info.Succeeded)

	p.mu.Lock()
	p.fails = 0
	p.mu.Unlock()
	f.caughtUp()
	f.waitHealth(func(level cell.Level, msg string) bool { return level == cell.StatusOK && strings.HasPrefix(msg, "OK") })
	info = f.waitInfo("running", func(i *tables.Info) bool { return i.State == tables.StateRunning && i.Objects == 3 })
	assert.Zero(t, info.SetupAttempts)
	assert.Empty(t, info.SetupError)
	assert.Zero(t, p.early.Load())
}

// TestSetupRetryAfter: RetryAfter sets the delay before the next attempt,
// instead of the backoff (an hour here).
func TestSetupRetryAfter(t *testing.T) {
	ops, p := newTarget(), newSetupProbe(2)
	p.fail = func(context.Context) error { return reconciler.RetryAfter(time.Millisecond, errSetup) }
	p.gate(ops)
	f := startFixture(t, ops, nil, reconciler.WithSetup(p.setup), reconciler.WithRetry(time.Hour, time.Hour))
	f.upsert(items("a", 2, "1")...)
	f.caughtUp()
	assert.Equal(t, int64(3), p.calls.Load())
	assert.Zero(t, p.early.Load())
}

// TestSetupPanicAndTimeout: a panicking setup (the first call) is recovered into an error
// and tried again; one that outlives (the second) the operation timeout sees its ctx
// end and is tried again.
func TestSetupPanicAndTimeout(t *testing.T) {
	ops, p := newTarget(), newSetupProbe(2)
	p.fail = func(ctx context.Context) error {
		p.mu.Lock()
		left := p.fails
		p.mu.Unlock()
		if left == 1 {
			panic("setup exploded")
		}
		<-ctx.Done() // the operation timeout ends it
		return ctx.Err()
	}
	var errs []error
	p.after = func(ctx context.Context, _ int64) { errs = append(errs, ctx.Err()) }
	p.gate(ops)
	f := startFixture(t, ops, &with{tables: true}, append(setupOptions(p), reconciler.WithOperationTimeout(20*time.Millisecond))...)
	f.upsert(items("a", 2, "1")...)
	f.caughtUp()
	assert.Equal(t, int64(3), p.calls.Load())
	assert.Zero(t, p.early.Load())
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Len(t, errs, 3)
	assert.ErrorIs(t, errs[1], context.DeadlineExceeded, "the second call's ctx ended with the operation timeout")
	assert.NoError(t, errs[2])
}

// TestSetupPanicRecorded: the recovered panic is the setup's error, as
// health and the reconcilers row show it.
func TestSetupPanicRecorded(t *testing.T) {
	ops, p := newTarget(), newSetupProbe(1<<30)
	p.fail = func(context.Context) error { panic("setup exploded") }
	f := startFixture(t, ops, &with{tables: true}, setupOptions(p)...)
	f.waitHealth(func(level cell.Level, msg string) bool {
		return level == cell.StatusDegraded && strings.Contains(msg, reconciler.ErrPanic.Error()) && strings.Contains(msg, "setup exploded")
	})
	f.waitInfo("the panic in the row", func(i *tables.Info) bool {
		return strings.Contains(i.SetupError, "setup exploded") && strings.Contains(i.SetupError, reconciler.ErrPanic.Error())
	})
}

// TestSetupPaused: a reconciler paused before its start does not call
// setup until Resume.
func TestSetupPaused(t *testing.T) {
	ops, p := newTarget(), newSetupProbe(0)
	p.gate(ops)
	f := v1fixture(t, ops, setupOptions(p)...)
	f.rec.Pause()
	f.upsert(items("a", 2, "1")...)
	f.start()
	f.waitHealth(func(level cell.Level, msg string) bool { return level == cell.StatusOK && msg == "Paused" })
	// The loop reported Paused and waits for the gate: it calls nothing.
	assert.Zero(t, p.calls.Load())
	f.rec.Resume()
	f.caughtUp()
	assert.Equal(t, int64(1), p.calls.Load())
	assert.Zero(t, p.early.Load())
}

func v1fixture(t testing.TB, ops *target, opts ...reconciler.Option) *fixture {
	return variant{1, false}.fixture(t, ops, nil, opts...)
}

// TestSetupEachStart: every start of the hive runs setup again before any
// operation; what changed while stopped converges after it.
func TestSetupEachStart(t *testing.T) {
	ops, p := newTarget(), newSetupProbe(1)
	p.gate(ops)
	f := v1fixture(t, ops, setupOptions(p)...)
	f.start()
	f.upsert(items("a", 2, "1")...)
	f.caughtUp()
	assert.Equal(t, int64(2), p.calls.Load())
	f.stop()

	p.ready.Store(false)
	p.mu.Lock()
	p.fails = 2
	p.mu.Unlock()
	f.upsert(&item{ID: "a-00000", Value: "2"})
	f.remove("a-00001")
	f.start()
	f.caughtUp()
	assert.Equal(t, int64(5), p.calls.Load(), "setup ran again: 2 failures, then success")
	assert.Zero(t, p.early.Load())
	f.waitApplied(ops, "a-00000", "2")
	assert.NotContains(t, ops.State(), "a-00001")
}

// TestSetupStopWhileFailing: a stop ends a failing setup, and one that
// holds on its ctx, promptly.
func TestSetupStopWhileFailing(t *testing.T) {
	ops, p := newTarget(), newSetupProbe(0)
	p.hold = make(chan struct{}) // never closed: the stop ends it
	f := v1fixture(t, ops, setupOptions(p)...)
	f.start()
	f.waitHealth(func(level cell.Level, msg string) bool { return msg == "Setting up" })
	f.stop()
	p.waitCalls(t, 1)
	assert.False(t, p.ready.Load())
}

// BenchmarkSetupBacklog measures how long a backlog of 10,000 objects
// written while setup held takes to converge once it succeeds, against the
// same backlog written while paused, from Resume: the two gates cost the
// same.
//
//	go test -run '^$' -bench SetupBacklog -benchtime 5x ./reconciler
func BenchmarkSetupBacklog(b *testing.B) {
	const n = 10000
	for _, withSetup := range []bool{false, true} {
		b.Run(map[bool]string{false: "paused", true: "setup-held"}[withSetup], func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				ops, p := newTarget(), newSetupProbe(0)
				var opts []reconciler.Option
				if withSetup {
					p.hold = make(chan struct{})
					opts = setupOptions(p)
				}
				f := v1fixture(b, ops, opts...)
				if !withSetup {
					f.rec.Pause()
				}
				f.start()
				rev := f.upsert(items("a", n, "1")...)
				b.StartTimer()
				if withSetup {
					p.mu.Lock()
					close(p.hold)
					p.mu.Unlock()
				} else {
					f.rec.Resume()
				}
				f.reconciledTo(rev)
				b.StopTimer()
				f.stop()
			}
		})
	}
}

// A setup's TerminalError is retried as any other: the setup step has no
// object to give up on.
func TestSetupTerminalErrorIsRetried(t *testing.T) {
	ops, p := newTarget(), newSetupProbe(2)
	p.fail = func(context.Context) error { return reconciler.TerminalError(errSetup) }
	p.gate(ops)
	f := startFixture(t, ops, nil, setupOptions(p)...)
	f.upsert(items("a", 2, "1")...)
	f.caughtUp()
	assert.Equal(t, int64(3), p.calls.Load())
	assert.Zero(t, p.early.Load())
}

// Pause holds setup: a failing setup is not tried again while paused, and
// one under way at the Pause ends but applies nothing until Resume. Health
// says "Setting up" at OK before setup first fails.
func TestSetupPausedWhileSettingUp(t *testing.T) {
	t.Run("failing", func(t *testing.T) {
		ops, p := newTarget(), newSetupProbe(1<<30)
		p.gate(ops)
		f := startFixture(t, ops, nil, setupOptions(p)...)
		p.waitCalls(t, 2)
		f.rec.Pause()
		f.waitHealth(func(_ cell.Level, msg string) bool { return msg == "Paused" })
		n := p.calls.Load()
		f.upsert(items("a", 1, "1")...)
		// A call under way at the Pause may still end; no other starts.
		require.Never(t, func() bool { return p.calls.Load() > n+1 }, 50*time.Millisecond, time.Millisecond, "setup called while paused")
		p.mu.Lock()
		p.fails = 0
		p.mu.Unlock()
		f.rec.Resume()
		f.caughtUp()
		assert.Zero(t, p.early.Load())
	})
	t.Run("under way", func(t *testing.T) {
		ops, p := newTarget(), newSetupProbe(0)
		p.gate(ops)
		p.hold = make(chan struct{})
		f := startFixture(t, ops, &with{tables: true}, setupOptions(p)...)
		f.waitHealth(func(l cell.Level, msg string) bool { return l == cell.StatusOK && msg == "Setting up" })
		f.waitInfo("setting up", func(i *tables.Info) bool { return i.State == tables.StateSettingUp })
		f.upsert(items("a", 1, "1")...)
		f.rec.Pause()
		p.mu.Lock()
		close(p.hold)
		p.hold = nil
		p.mu.Unlock()
		f.waitHealth(func(_ cell.Level, msg string) bool { return msg == "Paused" })
		f.rec.Resume()
		f.caughtUp()
		f.waitInfo("running", func(i *tables.Info) bool { return i.State == tables.StateRunning && i.SetupAttempts == 0 })
		assert.Zero(t, p.early.Load())
	})
}

// The attempts the reconcilers row shows are those of this run: a setup
// that succeeded in the last run and fails in this one counts afresh.
func TestSetupAttemptsCountThisRunOnly(t *testing.T) {
	ops, p := newTarget(), newSetupProbe(0)
	f := startFixture(t, ops, &with{tables: true}, setupOptions(p)...)
	f.upsert(items("a", 1, "1")...)
	f.caughtUp()
	f.stop()
	p.mu.Lock()
	p.fails = 1 << 30
	p.mu.Unlock()
	base := p.calls.Load()
	f.start()
	info := f.waitInfo("setting up again", func(i *tables.Info) bool { return i.State == tables.StateSettingUp && i.SetupAttempts >= 2 })
	assert.LessOrEqual(t, int64(info.SetupAttempts), p.calls.Load()-base, "attempts of this run only")
	p.mu.Lock()
	p.fails = 0
	p.mu.Unlock()
	f.upsert(items("b", 1, "1")...)
	f.caughtUp()
}

// After a restart whose setup fails, what changed while stopped waits:
// WaitUntilReconciled counts nothing done and nothing is applied, until
// setup succeeds.
func TestSetupFailingAfterARestartHoldsWhatChanged(t *testing.T) {
	ops, p := newTarget(), newSetupProbe(0)
	f := startFixture(t, ops, &with{tables: true}, setupOptions(p)...)
	f.put("a", "1")
	f.caughtUp()
	f.stop()
	p.mu.Lock()
	p.fails = 1 << 30
	p.mu.Unlock()
	rev := f.put("a", "2")
	f.start()
	f.waitInfo("setting up", func(i *tables.Info) bool { return i.State == tables.StateSettingUp && i.SetupAttempts >= 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	_, _, err := f.rec.WaitUntilReconciled(ctx, rev)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, []string{"1"}, ops.updates("a"))
	p.mu.Lock()
	p.fails = 0
	p.mu.Unlock()
	f.reconciledTo(rev)
	f.waitApplied(ops, "a", "2")
}

// Setup waits for WithStartAfter's tables: it is not called before they
// are initialized.
func TestSetupWaitsForStartAfterTables(t *testing.T) {
	ops, p := newTarget(), newSetupProbe(0)
	var src statedb.RWTable[*item]
	var done func(statedb.WriteTxn)
	w := &with{tables: true, setup: func(f *fixture) []reconciler.Option {
		var err error
		src, err = statedb.NewTable(f.db, "src", itemID)
		require.NoError(t, err)
		wtxn := f.db.WriteTxn(src)
		done = src.RegisterInitializer(wtxn, "test")
		wtxn.Commit()
		return []reconciler.Option{reconciler.WithStartAfter(0, src)}
	}}
	f := startFixture(t, ops, w, setupOptions(p)...)
	f.put("a", "1")
	f.waitInfo("waiting", func(i *tables.Info) bool { return i.State == tables.StateWaiting })
	assert.Zero(t, p.calls.Load(), "setup before WithStartAfter's tables are initialized")
	wtxn := f.db.WriteTxn(src)
	done(wtxn)
	wtxn.Commit()
	f.waitApplied(ops, "a", "1")
	assert.Equal(t, int64(1), p.calls.Load())
}

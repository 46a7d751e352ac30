package reconciler_test

// WithSetup. (Operations, a delete and the first prune waiting for setup
// in every variant, health and the reconcilers row while it fails, setup
// again at each start: testdata/setup.txtar; a panic:
// testdata/setup_panic.txtar; RetryAfter: testdata/setup_retry.txtar; a
// Pause before the start: testdata/setup_pause.txtar; under chaos:
// chaos_setup_test.go.)

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

// setupProbe is a setup step that fails with fail's error while fails is
// above zero, and holds while hold is set. The operations of its target
// (if any) that start while no call of this run has succeeded are counted
// in early: none may be.
type setupProbe struct {
	mu    sync.Mutex
	fails int
	fail  func(ctx context.Context) error
	hold  chan struct{}
	calls int           // calls that ended
	seen  chan struct{} // closed and replaced as a call ends
	ready atomic.Bool   // the last call succeeded
	early atomic.Int64
}

func newSetupProbe(ops *target, fails int) *setupProbe {
	p := &setupProbe{fails: fails, fail: func(context.Context) error { return errSetup }, seen: make(chan struct{})}
	if ops != nil {
		ops.setFail(func(reconcilertest.Op, *item) error {
			if !p.ready.Load() {
				p.early.Add(1)
			}
			return nil
		})
	}
	return p
}

func (p *setupProbe) setup(ctx context.Context, _ statedb.ReadTxn) error {
	p.mu.Lock()
	hold, fail, failing := p.hold, p.fail, p.fails > 0
	if failing {
		p.fails--
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.calls++
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
	if failing {
		return fail(ctx)
	}
	p.ready.Store(true)
	return nil
}

// setFails sets the failures to come: with some, this run is not set up.
func (p *setupProbe) setFails(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fails = n
	if n > 0 {
		p.ready.Store(false)
	}
}

// release lets the held calls go.
func (p *setupProbe) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.hold)
	p.hold = nil
}

func (p *setupProbe) nCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

func (p *setupProbe) waitCalls(t testing.TB, n int) {
	t.Helper()
	waitUntil(t, "setup calls", func() (bool, <-chan struct{}) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.calls >= n, p.seen
	})
}

func (p *setupProbe) options() []reconciler.Option {
	return []reconciler.Option{reconciler.WithSetup(p.setup), reconciler.WithRetry(time.Millisecond, 4*time.Millisecond)}
}

// A setup that fails, panics (recovered into its error), fails with a
// TerminalError (there is no object to give up on) or outlives the
// operation timeout (its ctx ends with the deadline) is tried again;
// meanwhile health is Degraded with its error and the reconcilers row is
// setting-up with the error and the attempts. Once it succeeds the objects
// converge, both clear, and no operation started before.
func TestSetupFailuresAreRetried(t *testing.T) {
	for name, c := range map[string]struct {
		fail func(ctx context.Context) error
		want []string
	}{
		"error":    {func(context.Context) error { return errSetup }, []string{errSetup.Error()}},
		"panic":    {func(context.Context) error { panic("setup exploded") }, []string{reconciler.ErrPanic.Error(), "setup exploded"}},
		"terminal": {func(context.Context) error { return reconciler.TerminalError(errSetup) }, []string{errSetup.Error()}},
		"timeout":  {func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, []string{context.DeadlineExceeded.Error()}},
	} {
		t.Run(name, func(t *testing.T) {
			ops := newTarget()
			p := newSetupProbe(ops, 1<<30)
			p.fail = c.fail
			f := startFixture(t, ops, &with{tables: true}, append(p.options(), reconciler.WithOperationTimeout(20*time.Millisecond))...)
			f.upsert(items("a", 3, "1")...)
			f.waitHealth(func(level cell.Level, msg string) bool {
				return level == cell.StatusDegraded && strings.Contains(msg, "setup failing") && strings.Contains(msg, c.want[len(c.want)-1])
			})
			info := f.waitInfo("setting-up with attempts", func(i *tables.Info) bool {
				return i.State == tables.StateSettingUp && i.SetupAttempts >= 2
			})
			for _, want := range c.want {
				assert.Contains(t, info.SetupError, want)
			}
			assert.Contains(t, info.TableRow()[2], "setup failing")
			assert.Zero(t, info.Succeeded)

			p.setFails(0)
			f.caughtUp()
			f.waitHealth(func(level cell.Level, msg string) bool { return level == cell.StatusOK && strings.HasPrefix(msg, "OK") })
			info = f.waitInfo("running", func(i *tables.Info) bool { return i.State == tables.StateRunning && i.Objects == 3 })
			assert.Zero(t, info.SetupAttempts)
			assert.Empty(t, info.SetupError)
			assert.Zero(t, p.early.Load(), "operations started before setup succeeded")
		})
	}
}

// A stop ends a setup that holds on its ctx, promptly.
func TestSetupStopEndsAHeldSetup(t *testing.T) {
	ops := newTarget()
	p := newSetupProbe(ops, 0)
	p.hold = make(chan struct{}) // never closed: the stop ends it
	f := startFixture(t, ops, nil, p.options()...)
	f.waitHealth(func(level cell.Level, msg string) bool { return msg == "Setting up" })
	f.stop()
	p.waitCalls(t, 1)
	assert.False(t, p.ready.Load())
}

// Pause holds setup: a failing setup is not tried again while paused, and
// one under way at the Pause ends but applies nothing until Resume. Health
// says "Setting up" at OK before setup first fails.
func TestSetupPausedWhileSettingUp(t *testing.T) {
	t.Run("failing", func(t *testing.T) {
		ops := newTarget()
		p := newSetupProbe(ops, 1<<30)
		f := startFixture(t, ops, nil, p.options()...)
		p.waitCalls(t, 2)
		f.rec.Pause()
		f.waitHealth(func(_ cell.Level, msg string) bool { return msg == "Paused" })
		n := p.nCalls()
		f.upsert(items("a", 1, "1")...)
		// A call under way at the Pause may still end; no other starts.
		require.Never(t, func() bool { return p.nCalls() > n+1 }, 50*time.Millisecond, time.Millisecond, "setup called while paused")
		p.setFails(0)
		f.rec.Resume()
		f.caughtUp()
		assert.Zero(t, p.early.Load())
	})
	t.Run("under way", func(t *testing.T) {
		ops := newTarget()
		p := newSetupProbe(ops, 0)
		p.hold = make(chan struct{})
		f := startFixture(t, ops, &with{tables: true}, p.options()...)
		f.waitHealth(func(l cell.Level, msg string) bool { return l == cell.StatusOK && msg == "Setting up" })
		f.waitInfo("setting up", func(i *tables.Info) bool { return i.State == tables.StateSettingUp })
		f.upsert(items("a", 1, "1")...)
		f.rec.Pause()
		p.release()
		f.waitHealth(func(_ cell.Level, msg string) bool { return msg == "Paused" })
		f.rec.Resume()
		f.caughtUp()
		f.waitInfo("running", func(i *tables.Info) bool { return i.State == tables.StateRunning && i.SetupAttempts == 0 })
		assert.Zero(t, p.early.Load())
	})
}

// After a restart whose setup fails, what changed while stopped waits:
// WaitUntilReconciled counts nothing done and nothing is applied until
// setup succeeds; the attempts the reconcilers row shows are those of this
// run.
func TestSetupFailingAfterARestartHoldsWhatChanged(t *testing.T) {
	ops := newTarget()
	p := newSetupProbe(ops, 0)
	f := startFixture(t, ops, &with{tables: true}, p.options()...)
	f.put("a", "1")
	f.caughtUp()
	f.stop()
	p.setFails(1 << 30)
	base := p.nCalls()
	rev := f.put("a", "2")
	f.start()
	info := f.waitInfo("setting up", func(i *tables.Info) bool { return i.State == tables.StateSettingUp && i.SetupAttempts >= 2 })
	assert.LessOrEqual(t, info.SetupAttempts, p.nCalls()-base, "attempts of this run only")
	_, _, err := f.rec.WaitUntilReconciled(ctxFor(t, 30*time.Millisecond), rev)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, []string{"1"}, ops.updates("a"))
	p.setFails(0)
	f.reconciledTo(rev)
	f.waitApplied(ops, "a", "2")
	assert.Zero(t, p.early.Load())
}

// Setup waits for WithStartAfter's tables: it is not called before they
// are initialized.
func TestSetupWaitsForStartAfterTables(t *testing.T) {
	ops := newTarget()
	p := newSetupProbe(ops, 0)
	var src statedb.RWTable[*item]
	var done func(statedb.WriteTxn)
	f := startFixture(t, ops, &with{tables: true, setup: func(f *fixture) []reconciler.Option {
		var err error
		src, err = statedb.NewTable(f.db, "src", itemID)
		require.NoError(t, err)
		wtxn := f.db.WriteTxn(src)
		done = src.RegisterInitializer(wtxn, "test")
		wtxn.Commit()
		return []reconciler.Option{reconciler.WithStartAfter(0, src)}
	}}, p.options()...)
	f.put("a", "1")
	f.waitInfo("waiting", func(i *tables.Info) bool { return i.State == tables.StateWaiting })
	assert.Zero(t, p.nCalls(), "setup before WithStartAfter's tables are initialized")
	wtxn := f.db.WriteTxn(src)
	done(wtxn)
	wtxn.Commit()
	f.waitApplied(ops, "a", "1")
	assert.Equal(t, 1, p.nCalls())
}

// BenchmarkSetupBacklog measures how long a backlog of 10,000 objects
// written while setup held takes to converge once it succeeds, against the
// same backlog written while paused, from Resume: the two gates cost the
// same.
//
//	go test -run '^$' -bench SetupBacklog -benchtime 5x ./reconciler
func BenchmarkSetupBacklog(b *testing.B) {
	for _, held := range []bool{false, true} {
		b.Run(map[bool]string{false: "paused", true: "setup-held"}[held], func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				p, opts := newSetupProbe(nil, 0), []reconciler.Option(nil)
				if held {
					p.hold, opts = make(chan struct{}), p.options()
				}
				f := variant{1, false}.fixture(b, newTarget(), nil, opts...)
				if !held {
					f.rec.Pause()
				}
				f.start()
				rev := f.upsert(items("a", 10000, "1")...)
				b.StartTimer()
				if held {
					p.release()
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

package reconciler_test

import (
	"context"
	"errors"
	"expvar"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// kitbreaker starts a fixture over o with the breaker and the given extra
// options; the reconcilers tables are in the hive.
func kitbreaker(t *testing.T, o *target, v variant, m *kitmetrics, opts ...reconciler.Option) *fixture {
	w := &with{tables: true}
	f := v.start(t, o, w, append([]reconciler.Option{reconciler.WithMetrics(m)}, opts...)...)
	return f
}

// startBreaker is kitbreaker over new kitops and kitmetrics with
// WithCircuitBreaker(threshold, probe, nil) and WithRetry(1ms, maxRetry).
func startBreaker(t *testing.T, v variant, threshold int, probe, maxRetry time.Duration, opts ...reconciler.Option) (*target, *kitmetrics, *fixture) {
	o, m := newTarget(), newKitMetrics()
	return o, m, kitbreaker(t, o, v, m, append([]reconciler.Option{reconciler.WithCircuitBreaker(threshold, probe, nil),
		reconciler.WithRetry(time.Millisecond, maxRetry)}, opts...)...)
}

// retryRows returns the fixture's rows of the retries table by key.
func (f *fixture) kitretryRows() map[string]tables.RetryInfo {
	rows := map[string]tables.RetryInfo{}
	for r := range f.tables.Retries().List(f.db.ReadTxn(), tables.RetryByReconciler.Query("test")) {
		rows[r.Key] = *r
	}
	return rows
}

// While open, one probe at a time and no attempt count grows, with any
// number of workers or batches; WithMaxAttempts(2) gives up on nothing
// because of probes; pause, resume, prune, deletes, new versions and
// identical re-inserts made while open all converge once it closes.
func TestBreakerHoldsEverythingAndLosesNothing(t *testing.T) {
	forVariants(t, []variant{{1, false}, {8, false}, {1, true}, {8, true}}, func(t *testing.T, v variant) {
		o, m, f := startBreaker(t, v, 3, time.Millisecond, 4*time.Millisecond, reconciler.WithMaxAttempts(2))
		base := items("k", 40, "1")
		f.upsert(base...)
		f.caughtUp()
		o.down()
		f.upsert(items("k", 40, "2")...)
		m.waitOpen(t, 1)

		// Let what started before opening finish, then count.
		o.waitCalls(t, o.calls.Load()+5)
		rows := f.kitretryRows()
		require.NotEmpty(t, rows, "no failing objects in the retries table while open")
		o.maxInflight.Store(o.inflight.Load())
		o.maxBatch.Store(0)
		prunes := o.prunes.Load()
		o.waitCalls(t, o.calls.Load()+30)
		assert.LessOrEqual(t, o.maxInflight.Load(), int64(1), "more than one probe in flight while open")
		assert.LessOrEqual(t, o.maxBatch.Load(), int64(1), "a probe batch of more than one object while open")
		for k, r := range f.kitretryRows() {
			if old, ok := rows[k]; ok {
				assert.Equal(t, old.Attempts, r.Attempts, "attempts of %s grew while open", k)
			}
			assert.LessOrEqual(t, r.Attempts, 1, "%s: attempts grew while open (max attempts 2)", k)
		}
		txn := f.db.ReadTxn()
		for obj := range f.table.All(txn) {
			assert.False(t, obj.Status.Kind == status.KindError && obj.Status.Terminal, "%s given up while open: %s", obj.ID, obj.Status.Error)
		}

		// Changes while open.
		f.rec.Pause()
		f.remove("k-00000", "k-00001", "k-00039")
		f.upsert(kititems("3", "k-00002", "new")...)
		f.rec.Resume()
		f.insertAs(f.mustGet("k-00003").clone()) // identical re-insert
		f.rec.Prune()
		o.Set("stray", "x") // for the prune to remove
		o.waitCalls(t, o.calls.Load()+5)
		s, _ := m.get()
		assert.True(t, s.BreakerOpen, "closed with the target still down")
		assert.Equal(t, prunes, o.prunes.Load(), "a prune ran while open")

		o.recover()
		m.waitClosed(t)
		f.rec.Prune()
		waitUntil(t, "the prune asked for while open", func() (bool, <-chan struct{}) {
			state, changed := o.StateWatch()
			_, stray := state["stray"]
			return !stray, changed
		})
		f.converged(o)
		for obj := range f.table.All(f.db.ReadTxn()) {
			assert.False(t, obj.Status.Terminal, "%s: %s", obj.ID, obj.Status.Error)
		}
	})
}

func (f *fixture) mustGet(id string) *item {
	f.t.Helper()
	obj, ok := f.get(id)
	require.True(f.t, ok, "%s not in the table", id)
	return obj
}

// A tiny probe backoff must not make the reconciler spin: probes double up
// to the maximum retry backoff.
func TestBreakerTinyProbeBackoffDoesNotSpin(t *testing.T) {
	for _, probe := range []time.Duration{time.Nanosecond, 50 * time.Millisecond} {
		t.Run(probe.String(), func(t *testing.T) {
			o, m, f := startBreaker(t, variant{4, false}, 2, probe, 50*time.Millisecond)
			o.down()
			f.upsert(items("s", 10, "1")...)
			m.waitOpen(t, 1)
			start := o.calls.Load()
			window := time.NewTimer(400 * time.Millisecond)
			defer window.Stop()
			<-window.C
			n := o.calls.Load() - start
			// From 1ns doubling to 50ms takes ~26 probes and ~100ms; then
			// one per 50ms: well under 100 in 400ms. Spinning is thousands.
			assert.Less(t, n, int64(100), "%d calls in 400ms while open", n)
			o.recover()
			f.converged(o)
		})
	}
}

// A huge probe backoff: nothing is probed, but a stop closes the breaker,
// and after the start everything converges on a recovered target.
func TestBreakerHugeProbeBackoffStopStart(t *testing.T) {
	o, m, f := startBreaker(t, variant{1, false}, 2, 1<<62, time.Hour*24*365*100)
	o.down()
	f.upsert(items("h", 5, "1")...)
	m.waitOpen(t, 1)
	f.stop()
	o.recover()
	f.upsert(kititems("2", "h-00000")...)
	f.remove("h-00001")
	f.start()
	f.converged(o)
	info := f.waitInfo("closed", func(i *tables.Info) bool { return i.TargetError == "" })
	assert.True(t, info.TargetFailingSince.IsZero())
}

// A stop closes the breaker; with the target still down after the start it
// opens again (a second opening), and everything converges afterwards.
func TestBreakerStopClosesAndReopens(t *testing.T) {
	o, m, f := startBreaker(t, variant{4, true}, 2, 5*time.Millisecond, 10*time.Millisecond)
	o.down()
	f.upsert(items("r", 10, "1")...)
	m.waitOpen(t, 1)
	f.stop()
	f.remove("r-00000")
	f.upsert(kititems("2", "r-00001")...)
	f.start()
	m.waitOpen(t, 2)
	info := f.waitInfo("second opening", func(i *tables.Info) bool { return i.BreakerOpenings >= 2 })
	assert.Equal(t, uint64(2), info.BreakerOpenings)
	o.recover()
	f.converged(o)
}

// The target recovers while a probe is in flight: the probe succeeds and
// closes the breaker.
func TestBreakerRecoversDuringProbe(t *testing.T) {
	o, m, f := startBreaker(t, variant{1, false}, 2, 5*time.Millisecond, 10*time.Millisecond)
	o.down()
	f.upsert(items("p", 4, "1")...)
	m.waitOpen(t, 1)
	entered, release := make(chan struct{}), make(chan struct{})
	first := true
	o.setFail(func(op reconcilertest.Op, it *item) error {
		if first {
			first = false
			close(entered)
			<-release // the probe is in flight (the lock is held: nothing else starts anyway)
			return nil
		}
		return nil
	})
	recv(t, entered, "a probe")
	close(release)
	m.waitClosed(t)
	f.converged(o)
	s, _ := m.get()
	assert.Equal(t, uint64(1), s.BreakerOpened)
}

// A classifier that panics must not crash the program: run in a child
// process, so a crash is this test's failure, not the suite's.
func TestBreakerClassifierPanics(t *testing.T) {
	if os.Getenv("Kit_CHILD") == "1" {
		o, m := newTarget(), newKitMetrics()
		f := kitbreaker(t, o, variant{1, false}, m,
			reconciler.WithCircuitBreaker(2, 5*time.Millisecond, func(error) bool { panic("kit classifier bug") }),
			reconciler.WithRetry(time.Millisecond, 10*time.Millisecond))
		o.down()
		f.upsert(items("c", 4, "1")...)
		o.waitCalls(t, 10)
		o.recover()
		f.converged(o)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestBreakerClassifierPanics$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "Kit_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		text := string(out)
		if i := strings.Index(text, "panic:"); i >= 0 {
			text = text[i:]
		}
		lines := strings.Split(text, "\n")
		if len(lines) > 25 {
			lines = lines[:25]
		}
		t.Fatalf("a panicking isTargetError crashed or broke the reconciler (%v):\n%s", err, strings.Join(lines, "\n"))
	}
}

// A probe that fails with an error the classifier rejects closes the
// breaker; the objects then fail on their own, with their attempts growing.
func TestBreakerObjectErrorProbeCloses(t *testing.T) {
	o, m := newTarget(), newKitMetrics()
	f := kitbreaker(t, o, variant{1, false}, m,
		reconciler.WithCircuitBreaker(2, 5*time.Millisecond, func(err error) bool { return errors.Is(err, errKitDown) }),
		reconciler.WithRetry(time.Millisecond, 10*time.Millisecond))
	o.down()
	f.upsert(items("e", 3, "1")...)
	m.waitOpen(t, 1)
	o.setFail(func(reconcilertest.Op, *item) error { return errKitObject })
	m.waitClosed(t)
	waitUntil(t, "attempts to grow", func() (bool, <-chan struct{}) {
		_, ch := f.tables.Retries().AllWatch(f.db.ReadTxn())
		for _, r := range f.kitretryRows() {
			if r.Attempts >= 3 {
				return true, ch
			}
		}
		return false, ch
	})
	o.recover()
	f.converged(o)
}

// An operation in flight when the breaker opens that then succeeds closes
// it ("so does any other operation that succeeds").
func TestBreakerInFlightSuccessCloses(t *testing.T) {
	o, m, f := startBreaker(t, variant{4, false}, 2, 5*time.Millisecond, 10*time.Millisecond)
	entered, release := o.holdUpdates(func(it *item) bool { return it.ID == "slow" })
	o.setFail(func(_ reconcilertest.Op, it *item) error {
		if it != nil && it.ID == "slow" {
			return nil
		}
		return errKitDown
	})
	f.upsert(kititems("1", "slow")...)
	recv(t, entered, "slow's update")
	f.upsert(items("f", 4, "1")...)
	m.waitOpen(t, 1)
	close(release)
	// It closes; with the target still down for the others it may open
	// again, which is a second opening.
	m.waitRound(t, "closed by slow's success", func(s metrics.RoundStats) bool { return !s.BreakerOpen || s.BreakerOpened >= 2 })
	f.waitKind("slow", status.KindDone)
	o.recover()
	f.converged(o)
}

// A stop closes the breaker: the reconcilers table and the metrics must not
// keep saying the target is failing while the reconciler is stopped.
func TestBreakerStopReportsClosed(t *testing.T) {
	o, m, f := startBreaker(t, variant{1, false}, 2, time.Hour, 10*time.Millisecond)
	o.down()
	f.upsert(items("g", 3, "1")...)
	m.waitOpen(t, 1)
	f.stop()
	info := f.waitInfo("stopped", func(i *tables.Info) bool { return i.State == tables.StateStopped })
	assert.Empty(t, info.TargetError, "stopped, yet the row says the target is failing")
	assert.True(t, info.TargetFailingSince.IsZero())
	s, _ := m.get()
	assert.False(t, s.BreakerOpen, "stopped, yet the last round says the breaker is open")
	o.recover()
	f.start()
	f.converged(o)
}

// Once Pause has returned no operation starts: probes included.
func TestBreakerPauseStopsProbes(t *testing.T) {
	o, m, f := startBreaker(t, variant{1, false}, 2, time.Millisecond, 2*time.Millisecond)
	o.down()
	f.upsert(items("q", 3, "1")...)
	m.waitOpen(t, 1)
	o.waitCalls(t, o.calls.Load()+3)
	f.rec.Pause()
	before := o.calls.Load() + o.inflight.Load()
	tm := time.NewTimer(200 * time.Millisecond) // a window in which probes would run every 2ms
	<-tm.C
	assert.LessOrEqual(t, o.calls.Load(), before+1, "probes went on while paused")
	f.rec.Resume()
	o.recover()
	f.converged(o)
}

// The expvar figures breaker_open and breaker_openings.
func TestBreakerExpVar(t *testing.T) {
	o := newTarget()
	ev := metrics.NewUnpublishedExpVar()
	f := newFixture(t, o, &with{tables: true}, reconciler.WithMetrics(ev), reconciler.WithPruning(0),
		reconciler.WithCircuitBreaker(2, 5*time.Millisecond, nil), reconciler.WithRetry(time.Millisecond, 10*time.Millisecond))
	f.start()
	read := func(name string) string {
		v, ok := ev.Map().Get(name).(*expvar.Map)
		if !ok {
			return "<no map " + name + ">"
		}
		if x := v.Get("test"); x != nil {
			return x.String()
		}
		return "<unset>"
	}
	o.down()
	f.upsert(items("x", 3, "1")...)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "1", read("breaker_open"))
		assert.Equal(c, "1", read("breaker_openings"))
	}, timeout, time.Millisecond)
	o.recover()
	f.converged(o)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "0", read("breaker_open"))
		assert.Equal(c, "1", read("breaker_openings"))
	}, timeout, time.Millisecond)
}

// Objects whose errors the classifier takes for the target's (the default,
// nil, takes every error but a terminal one), while others would succeed:
// a write made while open must still be applied eventually. Probes come
// every 5ms at most, so 3s is some 600 probes. Repeated thirty times, as
// which object a probe takes varies from run to run.
func TestBreakerProbesDoNotStarveNewWrites(t *testing.T) {
	for i := range 30 { // it wedges in about one run in seven
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			o, m, f := startBreaker(t, variant{1, false}, 2, time.Millisecond, 5*time.Millisecond)
			o.failWhen(errKitDown, func(_ reconcilertest.Op, it *item) bool { return it != nil && strings.HasPrefix(it.ID, "bad") })
			f.upsert(kititems("1", "bad1", "bad2")...)
			m.waitOpen(t, 1)
			f.upsert(kititems("1", "good")...)
			deadline := time.NewTimer(3 * time.Second)
			defer deadline.Stop()
			for {
				txn := f.db.ReadTxn()
				_, watch := f.table.AllWatch(txn)
				if obj, _, ok := f.table.Get(txn, itemID.Query("good")); ok && obj.Status.Kind == status.KindDone {
					return
				}
				select {
				case <-watch:
				case <-deadline.C:
					var probed []string
					for _, c := range o.callTimes() {
						probed = append(probed, c.key)
					}
					if len(probed) > 12 {
						probed = probed[len(probed)-12:]
					}
					t.Fatalf("a write made while open was not applied in 3s (%d calls; last: %v): probes take only the failing objects", o.calls.Load(), probed)
				}
			}
		})
	}
}

// A flapping target under churn: writes, deletes, identical re-inserts,
// prunes and a stop and start while the breaker opens and closes. Once the
// target is back, the table and the target agree.
func TestBreakerFlappingChurnConverges(t *testing.T) {
	forVariants(t, []variant{{1, false}, {8, false}, {1, true}, {8, true}}, func(t *testing.T, v variant) {
		o, m, f := startBreaker(t, v, 3, time.Millisecond, 4*time.Millisecond, reconciler.WithMaxAttempts(3))
		rng := rand.New(rand.NewPCG(kitseed(), 33))
		var rmu sync.Mutex
		o.setFail(func(reconcilertest.Op, *item) error {
			rmu.Lock()
			defer rmu.Unlock()
			if rng.Float64() < 0.8 {
				return errKitDown
			}
			return nil
		})
		wr := rand.New(rand.NewPCG(kitseed(), 2))
		for i := range 600 {
			key := fmt.Sprintf("z%02d", wr.IntN(40))
			switch n := wr.IntN(10); {
			case n < 6:
				f.upsert(kititems(fmt.Sprint(wr.IntN(5)), key)...)
			case n < 8:
				f.remove(key)
			case n < 9:
				if obj, ok := f.get(key); ok {
					f.insertAs(obj.clone())
				}
			default:
				f.rec.Prune()
			}
			if i == 300 {
				f.stop()
				f.start()
			}
			if i%20 == 0 {
				// Pace the writer: let the reconciler take a call,
				// or go on after 5ms (work may have settled).
				pace := time.NewTimer(5 * time.Millisecond)
				select {
				case <-o.startedWatch():
				case <-pace.C:
				}
				pace.Stop()
			}
		}
		s, _ := m.get()
		t.Logf("openings so far: %d", s.BreakerOpened)
		o.recover()
		f.rec.Prune()
		// Objects given up on (WithMaxAttempts) are settled; write them
		// again so that everything is applied. A call that began before
		// the recovery (a batch's first entries) can still give one up:
		// wait until every object is settled before looking.
		f.waitTable("every object settled", func(txn statedb.ReadTxn) bool {
			for obj := range f.table.All(txn) {
				if obj.Status.Kind != status.KindDone && !obj.Status.Terminal {
					return false
				}
			}
			return true
		})
		for obj := range f.table.All(f.db.ReadTxn()) {
			if obj.Status.Terminal {
				f.upsert(kititems(obj.Value, obj.ID)...)
			}
		}
		f.converged(o)
	})
}

// kitseed is the churn's seed: Kit_SEED, to explore, else 33.
func kitseed() uint64 {
	if s, err := strconv.ParseUint(os.Getenv("Kit_SEED"), 10, 64); err == nil {
		return s
	}
	return 33
}

// While open a failed probe is no outcome for its object: objects written
// while open keep their Pending status, not Error, and get no retry row.
func TestBreakerProbeFailureIsNoOutcome(t *testing.T) {
	forVariants(t, []variant{{1, false}, {8, true}}, func(t *testing.T, v variant) {
		o, m, f := startBreaker(t, v, 2, time.Millisecond, 2*time.Millisecond)
		f.upsert(kititems("1", "done")...)
		f.waitKind("done", status.KindDone)
		o.down()
		f.upsert(items("n", 3, "1")...)
		m.waitOpen(t, 1)
		o.waitCalls(t, o.calls.Load()+5)
		// Written while open: a new object and a new version of a Done one.
		f.upsert(kititems("1", "fresh")...)
		f.upsert(kititems("2", "done")...)
		// Which object a probe takes is not promised: whichever it is,
		// a failed probe must leave it as it was.
		o.waitCalls(t, o.calls.Load()+20)
		s, _ := m.get()
		require.True(t, s.BreakerOpen)
		for _, id := range []string{"fresh", "done", "n-00000", "n-00001", "n-00002"} {
			if id[0] == 'n' {
				obj := f.mustGet(id)
				assert.NotEqual(t, status.KindDone, obj.Status.Kind)
				continue
			}
			obj := f.mustGet(id)
			assert.Equal(t, status.KindPending, obj.Status.Kind, "%s: a failed probe was recorded as its outcome: %s", id, obj.Status.Error)
			_, hasRow := f.kitretryRows()[id]
			assert.False(t, hasRow, "%s: a failed probe made it a failing object", id)
		}
		o.recover()
		f.converged(o)
	})
}

// A probe that fails with a TerminalError (not about the target with a
// nil classifier) closes the breaker, and its object records the error.
func TestBreakerTerminalProbeCloses(t *testing.T) {
	o, m, f := startBreaker(t, variant{1, false}, 2, time.Millisecond, 2*time.Millisecond)
	o.down()
	f.upsert(items("t", 3, "1")...)
	m.waitOpen(t, 1)
	o.setFail(func(reconcilertest.Op, *item) error { return reconciler.TerminalError(errKitObject) })
	m.waitClosed(t)
	f.waitTable("a terminal error recorded", func(txn statedb.ReadTxn) bool {
		for obj := range f.table.All(txn) {
			if obj.Status.Terminal {
				return true
			}
		}
		return false
	})
}

// Failing deletes of distinct objects open it too; no delete is lost, even
// with WithMaxAttempts(1), and writes made meanwhile wait and converge.
func TestBreakerFailingDeletes(t *testing.T) {
	forVariants(t, []variant{{1, false}, {8, true}}, func(t *testing.T, v variant) {
		o, m, f := startBreaker(t, v, 3, 2*time.Millisecond, 5*time.Millisecond, reconciler.WithMaxAttempts(1))
		objs := items("del", 10, "1")
		f.upsert(objs...)
		f.caughtUp()
		o.failWhen(errKitDown, func(op reconcilertest.Op, _ *item) bool { return op == reconcilertest.OpDelete })
		f.remove(ids(objs)...)
		m.waitOpen(t, 1)
		f.upsert(kititems("2", "after")...)
		o.waitCalls(t, o.calls.Load()+10)
		o.recover()
		f.converged(o)
		keys, err := o.Keys()
		require.NoError(t, err)
		assert.Equal(t, []string{"after"}, keys)
	})
}

// While open, a probe the target answers with RetryAfter (a 503 with
// Retry-After, a rate limit) is a failed probe like any other: the probes
// stay one per backoff step, and WithMaxAttempts gives up on nothing
// because the target was down.
func TestBreakerHoldsTargetRetryAfter(t *testing.T) {
	forVariants(t, variants, func(t *testing.T, v variant) {
		o, m, f := startBreaker(t, v, 2, 200*time.Millisecond, time.Second, reconciler.WithMaxAttempts(2))
		o.setFail(func(reconcilertest.Op, *item) error {
			return reconciler.RetryAfter(5*time.Millisecond, errKitDown)
		})
		f.upsert(items("r", 40, "1")...)
		m.waitOpen(t, 1)
		// What was in flight when it opened (batches of several
		// entries) finishes first; then a measuring window: a slow
		// machine makes fewer calls, not more.
		settle := time.NewTimer(300 * time.Millisecond)
		<-settle.C
		start := o.calls.Load()
		window := time.NewTimer(time.Second)
		<-window.C
		// Probes 600 ms and 1.4 s after the opening; a margin. Not
		// held, it is hundreds.
		n := o.calls.Load() - start
		assert.LessOrEqual(t, n, int64(4+v.workers), "%d calls in a second open", n)
		var given []string
		for obj := range f.table.All(f.db.ReadTxn()) {
			if obj.Status.Terminal {
				given = append(given, obj.ID+": "+obj.Status.Error)
			}
		}
		require.Empty(t, given, "given up while the target was down")
		o.recover()
		f.converged(o)
	})
}

// Operations cut short by a stop fail with the stop's context.Canceled:
// that says nothing of the target, so the breaker neither opens nor logs.
func TestBreakerStopIsNoOutage(t *testing.T) {
	forVariants(t, []variant{{4, false}, {4, true}}, func(t *testing.T, v variant) {
		o, m := newTarget(), newKitMetrics()
		logs := &captureHandler{}
		w := &with{tables: true, log: slog.New(logs)}
		f := v.fixture(t, o, w, reconciler.WithMetrics(m),
			reconciler.WithCircuitBreaker(2, time.Millisecond, nil),
			reconciler.WithRetry(time.Millisecond, 4*time.Millisecond))
		var blocked atomic.Int64
		more := make(chan struct{}, 64)
		o.mu.Lock()
		o.update = func(ctx context.Context, _ *item) error {
			blocked.Add(1)
			more <- struct{}{}
			<-ctx.Done()
			return nil
		}
		o.mu.Unlock()
		o.setFail(func(reconcilertest.Op, *item) error { return context.Canceled })
		f.start()
		f.upsert(items("s", 8, "1")...)
		for blocked.Load() < 2 {
			recv(t, more, "updates in flight")
		}
		f.stop()
		info, _, found := f.tables.Reconcilers().Get(f.db.ReadTxn(), tables.InfoByID.Query("test"))
		require.True(t, found)
		assert.Zero(t, info.BreakerOpenings, "a stop opened the breaker")
		logs.mu.Lock()
		defer logs.mu.Unlock()
		for _, r := range logs.records {
			assert.NotContains(t, r.Message, "Target failing", "logged at %s", r.Level)
		}
	})
}

// A target still coming up when the reconciler starts fails the first
// operations like any outage: the breaker opens, holding the objects found
// at start, says so at Warn ("not answering since the reconciler
// started"), and the first probe after the target is up closes it. An
// outage after the target answered is logged at Error.
func TestBreakerTargetComingUpAtStart(t *testing.T) {
	o, m := newTarget(), newKitMetrics()
	logs := &captureHandler{}
	f := variant{1, false}.fixture(t, o, &with{tables: true, log: slog.New(logs)}, reconciler.WithMetrics(m),
		reconciler.WithCircuitBreaker(3, 10*time.Millisecond, nil),
		reconciler.WithRetry(time.Millisecond, 20*time.Millisecond))
	o.down()
	f.upsert(items("s", 30, "1")...) // found at start
	f.start()
	m.waitOpen(t, 1)
	o.recover()
	m.waitClosed(t)
	f.converged(o)
	assert.Equal(t, []slog.Level{slog.LevelWarn, slog.LevelInfo}, logs.levels("Target "), "the opening at start, and the closing")

	o.down()
	f.upsert(items("s", 30, "2")...)
	m.waitOpen(t, 2)
	o.recover()
	f.converged(o)
	assert.Equal(t, []slog.Level{slog.LevelWarn, slog.LevelInfo, slog.LevelError, slog.LevelInfo}, logs.levels("Target "))
}

// levels returns the levels of the records whose message starts with prefix.
func (h *captureHandler) levels(prefix string) (out []slog.Level) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.records {
		if strings.HasPrefix(r.Message, prefix) {
			out = append(out, r.Level)
		}
	}
	return out
}

// An object deleted and created again under the same key while the breaker
// is open is not held back by anything its old self left: once the target
// answers, the new object is applied like any other.
func TestBreakerDeleteAndRecreateWhileOpen(t *testing.T) {
	forVariants(t, variants, func(t *testing.T, v variant) {
		o, m, f := startBreaker(t, v, 2, time.Millisecond, 4*time.Millisecond)
		o.down()
		f.upsert(items("d", 6, "1")...)
		m.waitOpen(t, 1)
		for range 3 {
			f.remove("d-00000", "d-00001")
			f.upsert(kititems("2", "d-00000", "d-00001")...)
		}
		o.waitCalls(t, o.calls.Load()+3)
		o.recover()
		f.converged(o)
		f.stop()
		f.start()
		f.upsert(kititems("3", "d-00000")...)
		f.converged(o)
	})
}

// Many objects failing for one cause of their own, with others succeeding
// between them, is no outage: the breaker stays closed.
func TestBreakerFanOutWithSuccessesStaysClosed(t *testing.T) {
	forVariants(t, variants, func(t *testing.T, v variant) {
		// A threshold above the bad objects a worker order can put in a row.
		o, m, f := startBreaker(t, v, 10, time.Millisecond, 4*time.Millisecond)
		missing := errors.New("kit: the secret these objects name is missing")
		o.failWhen(missing, func(_ reconcilertest.Op, it *item) bool { return strings.HasSuffix(it.ID, "bad") })
		var objs []*item
		for i := range 40 {
			objs = append(objs, &item{ID: fmt.Sprintf("f%02d-good", i), Value: "1"}, &item{ID: fmt.Sprintf("f%02d-bad", i), Value: "1"})
		}
		f.upsert(objs...)
		waitUntil(t, "every good object Done and the bad retried", func() (bool, <-chan struct{}) {
			ch := o.startedWatch() // the bad ones are retried on and on
			return f.countKind(f.db.ReadTxn(), status.KindDone) == 40 && o.calls.Load() >= 200, ch
		})
		s, _ := m.get()
		assert.Zero(t, s.BreakerOpened, "a fan-out with successes between opened the breaker")
	})
}

// An entry a batch operation lost or overwrote is the implementation's
// fault, not the target's: it never opens the breaker.
func TestBreakerLostBatchEntriesAreNotTheTarget(t *testing.T) {
	p := newProcessor(t)
	var lose atomic.Bool
	lose.Store(true)
	p.hook = func(_ context.Context, _ int, _, upserted []reconciler.BatchEntry[*item]) error {
		if lose.Load() {
			for i, e := range upserted {
				upserted[i] = reconciler.BatchEntry[*item]{Object: e.Object, Revision: e.Revision}
			}
		}
		return nil
	}
	m := newKitMetrics()
	f := startFixture(t, p.tg, &with{batch: p}, reconciler.WithPruning(0), reconciler.WithMetrics(m),
		reconciler.WithCircuitBreaker(2, time.Millisecond, nil), reconciler.WithRetry(time.Millisecond, 4*time.Millisecond))
	f.upsert(items("l", 10, "1")...)
	p.waitCalls(t, 5)
	lose.Store(false)
	f.converged(p.tg)
	s, _ := m.get()
	assert.Zero(t, s.BreakerOpened, "lost entries opened the breaker")
}

// Work queued for the workers behind an open breaker, more of it than a
// smaller pool holds (Configure shrank it), still gets its probe when due:
// the loop, with no room, must wake for the probe's turn, or nothing is
// ever let through again.
func TestBreakerProbesWorkQueuedPastASmallerPool(t *testing.T) {
	o, m, f := startBreaker(t, variant{4, false}, 1, 5*time.Millisecond, 20*time.Millisecond,
		reconciler.WithRoundLimits(64, nil))
	o.down()
	f.upsert(items("k", 64, "1")...)
	m.waitOpen(t, 1)
	o.waitCalls(t, o.calls.Load()+2) // probes failing: the rest is queued behind the gate
	require.NoError(t, f.rec.Configure(reconciler.WithConcurrency(2), reconciler.WithRoundLimits(1, nil)))
	o.waitCalls(t, o.calls.Load()+2) // probes still, with the pool resized
	o.recover()
	m.waitClosed(t)
	f.converged(o)
}

package reconciler_test

import (
	"context"
	"errors"
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

// breakerFixture populates a fixture of v over a new target, with the
// reconcilers tables, a kitmetrics, WithCircuitBreaker(threshold, probe,
// nil), WithRetry(1ms, maxRetry) and then opts (which may override them).
func breakerFixture(t *testing.T, v variant, w *with, threshold int, probe, maxRetry time.Duration, opts ...reconciler.Option) (*target, *kitmetrics, *fixture) {
	if w == nil {
		w = &with{}
	}
	w.tables = true
	o, m := newTarget(), newKitMetrics()
	return o, m, v.fixture(t, o, w, append([]reconciler.Option{reconciler.WithMetrics(m),
		reconciler.WithCircuitBreaker(threshold, probe, nil), reconciler.WithRetry(time.Millisecond, maxRetry)}, opts...)...)
}

// startBreaker is breakerFixture, started.
func startBreaker(t *testing.T, v variant, threshold int, probe, maxRetry time.Duration, opts ...reconciler.Option) (*target, *kitmetrics, *fixture) {
	o, m, f := breakerFixture(t, v, nil, threshold, probe, maxRetry, opts...)
	f.start()
	return o, m, f
}

// retryRows returns the fixture's rows of the retries table by key.
func (f *fixture) retryRows() map[string]tables.RetryInfo {
	rows := map[string]tables.RetryInfo{}
	for r := range f.tables.Retries().List(f.db.ReadTxn(), tables.RetryByReconciler.Query("test")) {
		rows[r.Key] = *r
	}
	return rows
}

// givenUp returns "id: error" of the objects with a terminal status.
func (f *fixture) givenUp() (given []string) {
	for obj := range f.table.All(f.db.ReadTxn()) {
		if obj.Status.Terminal {
			given = append(given, obj.ID+": "+obj.Status.Error)
		}
	}
	return given
}

// While open, one probe at a time and no attempt count grows, with any
// number of workers or batches; WithMaxAttempts(2) gives up on nothing
// because of probes. A failed probe is no outcome for its object: objects
// written while open, new or a new version of a Done one, stay Pending with
// no retry row. Pause, resume, prune, deletes, new versions, identical
// re-inserts and objects deleted and created again made while open all
// converge once it closes, nothing their old selves left holding them back,
// also after a stop and start (the delete and re-create: e6a60c9).
func TestBreakerHoldsEverythingAndLosesNothing(t *testing.T) {
	forVariants(t, []variant{{1, false}, {8, false}, {1, true}, {8, true}}, func(t *testing.T, v variant) {
		o, m, f := startBreaker(t, v, 3, time.Millisecond, 4*time.Millisecond, reconciler.WithMaxAttempts(2))
		f.upsert(items("k", 40, "1")...)
		f.put("done", "1")
		f.caughtUp()
		o.down()
		f.upsert(items("k", 40, "2")...)
		m.waitOpen(t, 1)

		// Let what started before opening finish, then count.
		o.waitCalls(t, o.calls.Load()+5)
		rows := f.retryRows()
		require.NotEmpty(t, rows, "no failing objects in the retries table while open")
		f.put("fresh", "1")
		f.put("done", "2")
		o.maxInflight.Store(o.inflight.Load())
		o.maxBatch.Store(0)
		prunes := o.prunes.Load()
		o.waitCalls(t, o.calls.Load()+30)
		assert.LessOrEqual(t, o.maxInflight.Load(), int64(1), "more than one probe in flight while open")
		assert.LessOrEqual(t, o.maxBatch.Load(), int64(1), "a probe batch of more than one object while open")
		now := f.retryRows()
		for k, r := range now {
			if old, ok := rows[k]; ok {
				assert.Equal(t, old.Attempts, r.Attempts, "attempts of %s grew while open", k)
			}
			assert.LessOrEqual(t, r.Attempts, 1, "%s: attempts grew while open (max attempts 2)", k)
		}
		assert.Empty(t, f.givenUp(), "given up while open")
		// Which object a probe takes is not promised: whichever it is, a
		// failed probe must leave it as it was.
		for _, id := range []string{"fresh", "done"} {
			obj, _ := f.get(id)
			assert.Equal(t, status.KindPending, obj.Status.Kind, "%s: a failed probe was recorded as its outcome: %s", id, obj.Status.Error)
			assert.NotContains(t, now, id, "%s: a failed probe made it a failing object", id)
		}

		// Changes while open.
		f.rec.Pause()
		f.remove("k-00000", "k-00001", "k-00039")
		f.upsert(kititems("3", "k-00002", "new")...)
		f.rec.Resume()
		same, _ := f.get("k-00003")
		f.insertAs(same.clone()) // identical re-insert
		for range 3 {
			f.remove("k-00004", "k-00005")
			f.upsert(kititems("3", "k-00004", "k-00005")...)
		}
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
		assert.Empty(t, f.givenUp())
		f.stop()
		f.start()
		f.put("k-00004", "4")
		f.converged(o)
	})
}

// observe lets d pass: an observation window in which something must not
// happen, never a synchronisation.
func observe(d time.Duration) { <-time.After(d) }

// While open, probes come one per backoff step, doubling up to the maximum
// retry backoff however tiny the probe backoff (it must not spin), also
// when the target answers with RetryAfter (a 503 with Retry-After, a rate
// limit: a failed probe like any other); WithMaxAttempts gives up on
// nothing because the target was down; once Pause has returned no probe
// starts. Calls are counted in a window: a slow machine makes fewer.
func TestBreakerProbesArePaced(t *testing.T) {
	down := func(reconcilertest.Op, *item) error { return errKitDown }
	for _, c := range []struct {
		name                            string
		vs                              []variant
		probe, maxRetry, settle, window time.Duration
		fail                            func(reconcilertest.Op, *item) error
		pause                           bool
		most                            int64 // calls in the window, besides one per worker
	}{
		// From 1ns doubling to 50ms takes ~26 probes and ~100ms; then one
		// per 50ms: well under 100 in 400ms. Spinning is thousands.
		{"tiny probe backoff", []variant{{4, false}}, time.Nanosecond, 50 * time.Millisecond, 0, 400 * time.Millisecond, down, false, 96},
		{"probe backoff at the maximum", []variant{{4, false}}, 50 * time.Millisecond, 50 * time.Millisecond, 0, 400 * time.Millisecond, down, false, 96},
		// b54fabb: the next probe started at once (hundreds a second), and
		// WithMaxAttempts gave every object up. What was in flight at the
		// opening (batches) finishes in the settle margin (9fb75e9);
		// probes come 600ms and 1.4s after the opening; a margin.
		{"the target asks RetryAfter", variants, 200 * time.Millisecond, time.Second, 300 * time.Millisecond, time.Second,
			func(reconcilertest.Op, *item) error { return reconciler.RetryAfter(5*time.Millisecond, errKitDown) }, false, 4},
		// Probes would run every 2ms.
		{"paused", []variant{{1, false}}, time.Millisecond, 2 * time.Millisecond, 0, 200 * time.Millisecond, down, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			forVariants(t, c.vs, func(t *testing.T, v variant) {
				o, m, f := startBreaker(t, v, 2, c.probe, c.maxRetry, reconciler.WithMaxAttempts(2))
				o.setFail(c.fail)
				f.upsert(items("r", 40, "1")...)
				m.waitOpen(t, 1)
				observe(c.settle)
				if c.pause {
					o.waitCalls(t, o.calls.Load()+3)
					f.rec.Pause()
				}
				start := o.calls.Load() + o.inflight.Load()
				observe(c.window)
				n := o.calls.Load() - start
				assert.LessOrEqual(t, n, c.most+int64(v.workers), "%d calls in %s open", n, c.window)
				assert.Empty(t, f.givenUp(), "given up while the target was down")
				if c.pause {
					f.rec.Resume()
				}
				o.recover()
				f.converged(o)
			})
		})
	}
}

// The first probe to succeed closes the breaker, even one that was in
// flight as the target recovered; so does a probe that fails with an error
// not about the target: one the classifier rejects (the objects then fail
// on their own, their attempts growing) or a TerminalError (its object
// records it). Neither opens it again.
func TestBreakerClosesOnAProbeWithNoOutage(t *testing.T) {
	isDown := func(err error) bool { return errors.Is(err, errKitDown) }
	for _, c := range []struct {
		name     string
		classify func(error) bool
		fault    func(t *testing.T, o *target) // after the opening
		then     func(f *fixture) bool         // waited for after the closing
	}{
		{"the target recovers during a probe", nil, func(t *testing.T, o *target) {
			entered, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			o.setFail(func(reconcilertest.Op, *item) error {
				once.Do(func() { close(entered); <-release }) // a probe in flight
				return nil
			})
			recv(t, entered, "a probe")
			close(release)
		}, nil},
		{"an error the classifier rejects", isDown, func(_ *testing.T, o *target) {
			o.setFail(func(reconcilertest.Op, *item) error { return errKitObject })
		}, func(f *fixture) bool {
			for _, r := range f.retryRows() {
				if r.Attempts >= 3 {
					return true
				}
			}
			return false
		}},
		{"a terminal error", nil, func(_ *testing.T, o *target) {
			o.setFail(func(reconcilertest.Op, *item) error { return reconciler.TerminalError(errKitObject) })
		}, func(f *fixture) bool { return len(f.givenUp()) > 0 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, m, f := startBreaker(t, variant{1, false}, 2, 5*time.Millisecond, 10*time.Millisecond,
				reconciler.WithCircuitBreaker(2, 5*time.Millisecond, c.classify))
			o.down()
			f.upsert(items("p", 4, "1")...)
			m.waitOpen(t, 1)
			c.fault(t, o)
			m.waitClosed(t)
			if c.then != nil {
				f.eventually(c.name+" recorded", func() bool { return c.then(f) })
			}
			o.recover()
			f.upsert(items("p", 4, "2")...)
			f.converged(o)
			s, _ := m.get()
			assert.Equal(t, uint64(1), s.BreakerOpened)
		})
	}
}

// An operation in flight when the breaker opens that then succeeds closes
// it ("so does any other operation that succeeds").
func TestBreakerInFlightSuccessCloses(t *testing.T) {
	o, m, f := startBreaker(t, variant{4, false}, 2, 5*time.Millisecond, 10*time.Millisecond)
	entered, release := o.holdUpdates(func(it *item) bool { return it.ID == "slow" })
	o.failWhen(errKitDown, func(_ reconcilertest.Op, it *item) bool { return it == nil || it.ID != "slow" })
	f.put("slow", "1")
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

// A stop closes the breaker: while stopped, the reconcilers row and the
// metrics do not say the target is failing. After the start a target
// still down opens it again, a second opening; a recovered one is written
// at once, even with a probe backoff too long ever to come.
func TestBreakerStopClosesIt(t *testing.T) {
	for _, c := range []struct {
		name            string
		v               variant
		probe, maxRetry time.Duration
		downAtStart     bool
	}{
		{"recovered, huge probe backoff", variant{1, false}, 1 << 62, time.Hour * 24 * 365 * 100, false},
		{"still down", variant{4, true}, 5 * time.Millisecond, 10 * time.Millisecond, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, m, f := startBreaker(t, c.v, 2, c.probe, c.maxRetry)
			o.down()
			f.upsert(items("s", 5, "1")...)
			m.waitOpen(t, 1)
			f.stop()
			info := f.waitInfo("stopped", func(i *tables.Info) bool { return i.State == tables.StateStopped })
			assert.Empty(t, info.TargetError, "stopped, yet the row says the target is failing")
			assert.True(t, info.TargetFailingSince.IsZero())
			s, _ := m.get()
			assert.False(t, s.BreakerOpen, "stopped, yet the last round says the breaker is open")
			f.remove("s-00000")
			f.put("s-00001", "2")
			if !c.downAtStart {
				o.recover()
			}
			f.start()
			if c.downAtStart {
				m.waitOpen(t, 2)
				info = f.waitInfo("second opening", func(i *tables.Info) bool { return i.BreakerOpenings >= 2 })
				assert.Equal(t, uint64(2), info.BreakerOpenings)
				o.recover()
			}
			f.converged(o)
			info = f.waitInfo("closed", func(i *tables.Info) bool { return i.TargetError == "" })
			assert.True(t, info.TargetFailingSince.IsZero())
		})
	}
}

// inChild runs the test in a child process, where a crash is the test's
// failure rather than the whole binary's, and fails it if the child fails;
// it reports whether it runs in the child, to run the test's body.
func inChild(t *testing.T) bool {
	if os.Getenv("CONVERGE_CHILD") == t.Name() {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CONVERGE_CHILD="+t.Name())
	if out, err := cmd.CombinedOutput(); err != nil {
		text := string(out)
		if i := strings.Index(text, "panic:"); i >= 0 {
			text = text[i:min(len(text), i+2000)]
		}
		t.Fatalf("in a child process: %v\n%s", err, text)
	}
	return false
}

// A classifier that panics must not crash the program nor break the
// reconciler.
func TestBreakerClassifierPanics(t *testing.T) {
	if !inChild(t) {
		return
	}
	o, _, f := startBreaker(t, variant{1, false}, 2, 5*time.Millisecond, 10*time.Millisecond,
		reconciler.WithCircuitBreaker(2, 5*time.Millisecond, func(error) bool { panic("kit classifier bug") }))
	o.down()
	f.upsert(items("c", 4, "1")...)
	o.waitCalls(t, 10)
	o.recover()
	f.converged(o)
}

// Objects whose errors the classifier takes for the target's (the default,
// nil, takes every error but a terminal one), while others would succeed:
// a write made while open must be applied within 3s (probes come every 5ms
// at most: some 600 probes), so probes must not take only the failing
// objects. Thirty runs, as which object a probe takes varies: it wedged in
// about one run in seven.
func TestBreakerProbesDoNotStarveNewWrites(t *testing.T) {
	for i := range 30 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			o, m, f := startBreaker(t, variant{1, false}, 2, time.Millisecond, 5*time.Millisecond)
			o.failWhen(errKitDown, func(_ reconcilertest.Op, it *item) bool { return it != nil && strings.HasPrefix(it.ID, "bad") })
			f.upsert(kititems("1", "bad1", "bad2")...)
			m.waitOpen(t, 1)
			f.put("good", "1")
			start := time.Now()
			f.waitKind("good", status.KindDone) // wedged, it never is
			assert.Less(t, time.Since(start), 3*time.Second, "a write made while open waited long: probes take only the failing objects")
		})
	}
}

// seed is Kit_SEED, to explore, else def.
func seed(def uint64) uint64 {
	if s, err := strconv.ParseUint(os.Getenv("Kit_SEED"), 10, 64); err == nil {
		return s
	}
	return def
}

// churn makes 600 random writes with seed s on 40 keys: new versions (6
// in 10), deletes (2 in 10), identical re-inserts and prune requests (1 in
// 10 each; without prunes, re-inserts take their share); the hive stops
// and starts halfway. Every 20 writes it lets the reconciler take a call,
// or goes on after pace (work may have settled).
func churn(f *fixture, o *target, s uint64, prunes bool, pace time.Duration) {
	wr := rand.New(rand.NewPCG(s, 2))
	for i := range 600 {
		key := fmt.Sprintf("z%02d", wr.IntN(40))
		switch n := wr.IntN(10); {
		case n < 6:
			f.put(key, fmt.Sprint(wr.IntN(5)))
		case n < 8:
			f.remove(key)
		case n < 9 || !prunes:
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
			select {
			case <-o.startedWatch():
			case <-time.After(pace):
			}
		}
	}
}

// neverWentBack checks that, per key, the revisions o applied never went
// back, nor below the key's last delete: nothing re-applied an older
// version or a deleted object.
func neverWentBack(t *testing.T, o *target) {
	last, deleted := map[string]statedb.Revision{}, map[string]statedb.Revision{}
	for _, c := range o.Calls() {
		switch {
		case c.Err != nil:
		case c.Op == reconcilertest.OpUpdate:
			if c.Revision < last[c.Key] || c.Revision < deleted[c.Key] {
				t.Errorf("%s: applied revision %d after %d, deleted at %d (call %s)", c.Key, c.Revision, last[c.Key], deleted[c.Key], c)
			}
			last[c.Key] = c.Revision
		case c.Op == reconcilertest.OpDelete:
			deleted[c.Key] = max(deleted[c.Key], c.Revision)
		}
	}
}

// A flapping target under churn: writes, deletes, identical re-inserts,
// prunes and a stop and start while the breaker opens and closes. Once the
// target is back, the table and the target agree, and no older version
// was applied after a newer one.
func TestBreakerFlappingChurnConverges(t *testing.T) {
	forVariants(t, []variant{{1, false}, {8, false}, {1, true}, {8, true}}, func(t *testing.T, v variant) {
		o, m, f := startBreaker(t, v, 3, time.Millisecond, 4*time.Millisecond, reconciler.WithMaxAttempts(3))
		rng := rand.New(rand.NewPCG(seed(33), 33))
		var mu sync.Mutex
		o.failWhen(errKitDown, func(reconcilertest.Op, *item) bool { mu.Lock(); defer mu.Unlock(); return rng.Float64() < 0.8 })
		churn(f, o, seed(33), true, 5*time.Millisecond)
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
				f.put(obj.ID, obj.Value)
			}
		}
		f.converged(o)
		neverWentBack(t, o)
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
		f.put("after", "2")
		o.waitCalls(t, o.calls.Load()+10)
		o.recover()
		f.converged(o) // the target holds "after" only
	})
}

// Operations cut short by a stop fail with the stop's context.Canceled:
// that says nothing of the target, so the breaker neither opens nor logs
// (b54fabb).
func TestBreakerStopIsNoOutage(t *testing.T) {
	forVariants(t, []variant{{4, false}, {4, true}}, func(t *testing.T, v variant) {
		logs := &captureHandler{}
		o, _, f := breakerFixture(t, v, &with{log: slog.New(logs)}, 2, time.Millisecond, 4*time.Millisecond)
		// Every update waits for the stop, then fails with its context.
		var blocked atomic.Int64
		more := make(chan struct{}, 64)
		o.update = func(ctx context.Context, _ *item) error {
			blocked.Add(1)
			more <- struct{}{}
			<-ctx.Done()
			return nil
		}
		o.setFail(func(reconcilertest.Op, *item) error { return context.Canceled })
		f.start()
		f.upsert(items("s", 8, "1")...)
		for blocked.Load() < 2 {
			recv(t, more, "updates in flight")
		}
		f.stop()
		assert.Zero(t, f.info().BreakerOpenings, "a stop opened the breaker")
		assert.Empty(t, logs.levels("Target "), "a stop logged an outage")
	})
}

// A target still coming up when the reconciler starts fails the first
// operations like any outage: the breaker opens, holding the objects found
// at start, says so at Warn ("not answering since the reconciler
// started"), and the first probe after the target is up closes it. An
// outage after the target answered is logged at Error (e6a60c9).
func TestBreakerTargetComingUpAtStart(t *testing.T) {
	logs := &captureHandler{}
	o, m, f := breakerFixture(t, variant{1, false}, &with{log: slog.New(logs)}, 3, 10*time.Millisecond, 20*time.Millisecond)
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

// Many objects failing for one cause of their own, with others succeeding
// between them, is no outage: the breaker stays closed (e6a60c9).
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

// Work queued for the workers behind an open breaker, more of it than a
// smaller pool holds (Configure shrank it), still gets its probe when due:
// the loop, with no room, must wake for the probe's turn, or nothing is
// ever let through again (a5f0ffa).
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

package setup

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gate is a Gate a test pauses and resumes; refuse makes so many Enters
// fail, as a Pause between State and Enter does.
type gate struct {
	mu      sync.Mutex
	paused  bool
	changed chan struct{}
	refuse  int
	enters  int
}

func newGate(paused bool) *gate { return &gate{paused: paused, changed: make(chan struct{})} }

func (g *gate) State() (bool, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.paused, g.changed
}

func (g *gate) Enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.enters++
	if g.refuse > 0 {
		g.refuse--
		return false
	}
	return !g.paused
}

func (g *gate) set(paused bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.paused = paused
	close(g.changed)
	g.changed = make(chan struct{})
}

// logs counts the records logged, by level.
type logs struct {
	mu     sync.Mutex
	levels map[slog.Level]int
}

func (l *logs) Enabled(context.Context, slog.Level) bool { return true }
func (l *logs) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.levels[r.Level]++
	return nil
}
func (l *logs) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logs) WithGroup(string) slog.Handler      { return l }

// fixture is a Config whose setup function returns the errors of fails,
// one per attempt, then nil; it records the steps reported and the
// backoffs asked for.
type fixture struct {
	mu       sync.Mutex
	fails    []error
	reports  []Step
	paused   []bool
	backoffs []int
	logs     *logs
}

func (f *fixture) config(g Gate, backoff time.Duration) Config {
	f.logs = &logs{levels: map[slog.Level]int{}}
	return Config{
		Gate: g,
		Attempt: func(context.Context) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.fails) == 0 {
				return nil
			}
			err := f.fails[0]
			f.fails = f.fails[1:]
			return err
		},
		Backoff: func(attempts int) time.Duration {
			f.backoffs = append(f.backoffs, attempts)
			return backoff
		},
		RetryAfter: func(err error) (time.Duration, bool) {
			var r retryAfter
			if errors.As(err, &r) {
				return time.Duration(r), true
			}
			return 0, false
		},
		Report: func(s Step, paused bool) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.reports, f.paused = append(f.reports, s), append(f.paused, paused)
		},
		Log: slog.New(f.logs),
	}
}

type retryAfter time.Duration

func (retryAfter) Error() string { return "retry after" }

// run runs the step in a goroutine and returns its result, failing after
// a deadline.
func run(t *testing.T, ctx context.Context, s *Step, c Config) <-chan bool {
	t.Helper()
	done := make(chan bool, 1)
	go func() { done <- s.Run(ctx, c) }()
	return done
}

func result(t *testing.T, done <-chan bool) bool {
	t.Helper()
	select {
	case ok := <-done:
		return ok
	case <-time.After(10 * time.Second):
		t.Fatal("the step did not return")
		return false
	}
}

func TestSucceedingSetupRunsOnceAndSaysNothing(t *testing.T) {
	var f fixture
	var s Step
	require.True(t, s.Run(context.Background(), f.config(newGate(false), time.Hour)))
	assert.Equal(t, Step{Attempts: 1}, s)
	assert.Equal(t, []Step{{}}, f.reports, "setting up, once")
	assert.Empty(t, f.backoffs)
	assert.Empty(t, f.logs.levels)
}

func TestFailingSetupIsTriedAgainAfterTheBackoff(t *testing.T) {
	boom := errors.New("boom")
	f := fixture{fails: []error{boom, boom}}
	var s Step
	require.True(t, s.Run(context.Background(), f.config(newGate(false), time.Millisecond)))
	assert.Equal(t, Step{Attempts: 3}, s, "the error is gone once it succeeds")
	assert.Equal(t, []int{1, 2}, f.backoffs, "the backoff after each failure")
	assert.Contains(t, f.reports, Step{Attempts: 1, Err: boom}, "a failure is reported at once")
	assert.Equal(t, map[slog.Level]int{slog.LevelWarn: 1, slog.LevelInfo: 1}, f.logs.levels,
		"the first failure and the success are logged, not every failure")
}

func TestRetryAfterSetsTheDelayOfTheNextAttempt(t *testing.T) {
	f := fixture{fails: []error{retryAfter(time.Millisecond)}}
	var s Step
	done := run(t, context.Background(), &s, f.config(newGate(false), time.Hour))
	require.True(t, result(t, done), "not an hour's backoff")
	assert.Empty(t, f.backoffs)
	assert.Equal(t, 2, s.Attempts)
}

func TestPauseHoldsTheNextAttempt(t *testing.T) {
	g := newGate(true)
	var f fixture
	var s Step
	done := run(t, context.Background(), &s, f.config(g, time.Hour))
	require.Eventually(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.reports) > 0
	}, 10*time.Second, time.Millisecond)
	g.mu.Lock()
	assert.Zero(t, g.enters, "no start while paused")
	g.mu.Unlock()
	g.set(false)
	require.True(t, result(t, done))
	assert.Equal(t, 1, s.Attempts)
	assert.True(t, f.paused[0], "reported paused")
	assert.False(t, f.paused[len(f.paused)-1], "then setting up")
}

func TestARefusedStartIsNoAttempt(t *testing.T) {
	g := newGate(false)
	g.refuse = 2
	var f fixture
	var s Step
	require.True(t, s.Run(context.Background(), f.config(g, time.Hour)))
	assert.Equal(t, 1, s.Attempts)
	assert.Equal(t, 3, g.enters)
}

func TestTheStepEndsWithItsContext(t *testing.T) {
	t.Run("waiting for a retry", func(t *testing.T) {
		f := fixture{fails: []error{errors.New("boom")}}
		ctx, cancel := context.WithCancel(context.Background())
		var s Step
		c := f.config(newGate(false), time.Hour)
		report := c.Report
		c.Report = func(st Step, paused bool) {
			report(st, paused)
			if st.Err != nil {
				cancel()
			}
		}
		assert.False(t, result(t, run(t, ctx, &s, c)))
		assert.Equal(t, 1, s.Attempts)
	})
	t.Run("during an attempt", func(t *testing.T) {
		var f fixture
		ctx, cancel := context.WithCancel(context.Background())
		c := f.config(newGate(false), time.Hour)
		c.Attempt = func(context.Context) error { cancel(); return nil }
		var s Step
		assert.False(t, s.Run(ctx, c), "a stop during the attempt is no success")
	})
	t.Run("paused", func(t *testing.T) {
		var f fixture
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var s Step
		assert.False(t, s.Run(ctx, f.config(newGate(true), time.Hour)))
		assert.Zero(t, s.Attempts)
	})
}

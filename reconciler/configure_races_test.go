package reconciler

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler/internal/breaker"
	"github.com/converge-go/converge/reconciler/internal/collect"
	"github.com/converge-go/converge/reconciler/internal/commit"
	"github.com/converge-go/converge/reconciler/internal/gate"
	"github.com/converge-go/converge/reconciler/internal/work"
)

// errDown is a failure about the target.
var errDown = errors.New("target down")

func key(k string) func() string { return func() string { return k } }

// The circuit breaker's probes back off up to the retry maximum (see
// WithCircuitBreaker): Configure's WithRetry changes it for the probes
// too, the one already timed included. Before, a breaker registered with
// a long retry maximum (an hour here; the chaos runs saturate it) kept
// doubling its probes' backoff towards it after Configure lowered it to
// milliseconds: the target healed, every object stayed Pending behind the
// open breaker, and the loop waited in its select for a probe due hours
// later (chaos: configure retry-max=3ms, then heal, not converged in 20s).
func TestConfigureRetryBoundsTheBreakersProbes(t *testing.T) {
	o := defaultOptions()
	o.retryMin, o.retryMax = time.Millisecond, time.Hour
	o.breakerFailures, o.breakerBackoff = 1, time.Millisecond
	g := gate.New()
	now := time.Unix(1000, 0)
	b := breaker.New(breaker.Config{Threshold: 1, AboutTarget: func(err error) bool { return errors.Is(err, errDown) },
		RetryAfter: work.RetryDelay, ProbeMin: o.breakerBackoff, ProbeMax: o.retryMax, Gate: g})
	r := &reconciler[int]{opts: o, gate: g, settings: newSettings(o), breaker: b, commit: commit.New(commit.Config[int]{}, o.commitPolicy()), collect: new(collect.Collector[int]), clock: clock{now: func() time.Time { return now }, rand: func() float64 { return 0.5 }}}

	b.Record(key("a"), breaker.Outcome{Err: errDown}, now)
	require.True(t, b.State().Open)
	// failProbe runs the probe due, failing about the target, and returns
	// when the next one is due.
	failProbe := func() time.Time {
		t.Helper()
		due, open := b.NextProbe()
		require.True(t, open)
		now = due
		room, limited := b.Limit(now)
		require.True(t, limited)
		require.Equal(t, 1, room, "a probe is granted when due")
		require.True(t, g.EnterProbe())
		g.Entered()
		require.Equal(t, breaker.Held, b.Record(key("a"), breaker.Outcome{Err: errDown, Probe: true}, now))
		next, _ := b.NextProbe()
		return next
	}
	for next := failProbe(); next.Sub(now) < time.Minute; next = failProbe() {
	}
	due, _ := b.NextProbe()
	require.Greater(t, due.Sub(now), time.Minute, "the probes back off towards the hour")

	require.NoError(t, r.settings.configure(true, []Option{WithRetry(time.Millisecond, 5*time.Millisecond)}))
	_, ok := r.applySettings()
	require.True(t, ok)
	assert.Equal(t, 5*time.Millisecond, r.opts.retryMax)
	due, _ = b.NextProbe()
	assert.LessOrEqual(t, due.Sub(now), 5*time.Millisecond, "the probe timed comes within the new maximum")
	for range 4 {
		next := failProbe()
		assert.LessOrEqual(t, next.Sub(now), 5*time.Millisecond, "a probe failing now backs off within the new maximum")
	}

	// A maximum below the probes' minimum leaves them their minimum.
	require.NoError(t, r.settings.configure(true, []Option{WithRetry(time.Microsecond, time.Microsecond)}))
	r.applySettings()
	next := failProbe()
	assert.Equal(t, time.Millisecond, next.Sub(now))
}

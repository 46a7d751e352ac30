package breaker

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	errDown   = errors.New("target down")
	errObject = errors.New("bad object")
)

// gate is a Gate that records what the breaker did to it and, as the
// reconciler's, lets one operation start while broken only as the probe.
type gate struct{ broken, probe bool }

func (g *gate) SetBroken(open bool) {
	g.broken = open
	if !open {
		g.probe = false
	}
}
func (g *gate) GrantProbe()     { g.probe = true }
func (g *gate) ProbeLeft() bool { return g.probe }
func (g *gate) enter() bool     { return !g.broken }
func (g *gate) isOpen() bool    { return !g.broken }

// enterProbe starts the probe granted, if any.
func (g *gate) enterProbe() bool {
	ok := g.probe
	g.probe = false
	return ok
}

// terminal marks an error that no attempt will mend: not about the target.
type terminal struct{ error }

// retryAfter asks for the next attempt's time.
type retryAfter struct {
	d time.Duration
	error
}

func (e retryAfter) Unwrap() error { return e.error }

func RetryAfter(d time.Duration, err error) error { return retryAfter{d, err} }
func TerminalError(err error) error               { return terminal{err} }

func newTestBreaker(threshold int) (*Breaker, *gate, *[]bool) {
	g := &gate{}
	var transits []bool
	b := New(Config{
		Threshold: threshold,
		AboutTarget: func(err error) bool {
			var t terminal
			return !errors.As(err, &t) && errors.Is(err, errDown)
		},
		RetryAfter: func(err error) (time.Duration, bool) {
			var r retryAfter
			if errors.As(err, &r) {
				return r.d, true
			}
			return 0, false
		},
		ProbeMin: 10 * time.Millisecond, ProbeMax: 35 * time.Millisecond, Gate: g,
		OnTransit: func(open, _ bool, _ error) { transits = append(transits, open) },
	})
	return b, g, &transits
}

func key(k string) func() string { return func() string { return k } }

// The breaker opens on failures about the target of distinct objects in a
// row: the same object failing again, errors about an object and terminal
// errors do not count; a success starts the count again.
func TestBreakerOpensOnDistinctTargetFailuresInARow(t *testing.T) {
	b, g, transits := newTestBreaker(3)
	now := time.Unix(1000, 0)
	fail := func(k string, err error) bool { return b.Record(key(k), Outcome{Err: err}, now) == Held }

	assert.False(t, fail("a", errDown))
	assert.False(t, fail("a", errDown))
	assert.False(t, fail("b", errObject))
	assert.False(t, fail("c", TerminalError(errDown)))
	assert.False(t, fail("a", errDown))
	assert.False(t, b.State().Open, "one object failing, however often, is not the target")

	assert.False(t, fail("b", errDown))
	assert.Equal(t, Counted, b.Record(key("x"), Outcome{}, now), "a success")
	assert.False(t, fail("c", errDown))
	assert.False(t, fail("d", errDown))
	assert.False(t, b.State().Open, "the success started the count again")

	assert.False(t, fail("e", errDown), "the failure that opens it counts for its object")
	st := b.State()
	require.True(t, st.Open)
	assert.Equal(t, uint64(1), st.Openings)
	assert.Equal(t, now, st.Since)
	assert.ErrorIs(t, st.Err, errDown)
	assert.Contains(t, st.Err.Error(), "target failing since 1970-01-01T00:16:40Z: target down")
	assert.False(t, g.isOpen(), "no operation starts")
	assert.Equal(t, []bool{true}, *transits)

	assert.True(t, fail("f", errDown), "a failure about the target while open is held")
	assert.False(t, fail("g", errObject), "a failure about an object is not")
}

// While open, one probe at a time is granted, first probeMin after
// opening, then on a doubling backoff capped at the maximum; a probe that
// the target answers, even with an error about the object, closes it.
func TestBreakerProbesOnItsOwnBackoff(t *testing.T) {
	b, g, transits := newTestBreaker(1)
	t0 := time.Unix(1000, 0)
	b.Record(key("a"), Outcome{Err: errDown}, t0)
	require.True(t, b.State().Open)

	room, limited := b.Limit(t0.Add(9 * time.Millisecond))
	assert.Equal(t, 0, room)
	assert.True(t, limited)
	due, open := b.NextProbe()
	assert.True(t, open)
	assert.Equal(t, t0.Add(10*time.Millisecond), due)

	probe := func(at time.Time, err error) {
		t.Helper()
		room, limited := b.Limit(at)
		require.Equal(t, 1, room, "a probe is granted at %s", at.Sub(t0))
		require.True(t, limited)
		assert.False(t, g.enter(), "only the probe may start")
		require.True(t, g.enterProbe())
		assert.False(t, g.enterProbe(), "one probe at a time")
		room, _ = b.Limit(at)
		assert.Equal(t, 0, room, "none while the probe runs")
		v := b.Record(key("a"), Outcome{Err: err, Probe: true}, at)
		assert.Equal(t, errors.Is(err, errDown), v == Held)
	}
	at := t0.Add(10 * time.Millisecond)
	probe(at, errDown)
	for _, wait := range []time.Duration{20, 35, 35} { // 10ms doubling, up to 35ms
		due, _ := b.NextProbe()
		assert.Equal(t, at.Add(wait*time.Millisecond), due)
		at = due
		probe(at, errDown)
	}
	assert.True(t, b.State().Open)

	due, _ = b.NextProbe()
	probe(due, errObject)
	assert.False(t, b.State().Open, "the target answered")
	assert.True(t, g.isOpen())
	assert.Equal(t, []bool{true, false}, *transits)
	_, limited = b.Limit(due)
	assert.False(t, limited)
}

// Any success closes it; a stop (reset) closes it without a log line; a
// probe granted but never taken is withdrawn when it closes.
func TestBreakerClosesOnAnySuccessAndOnReset(t *testing.T) {
	b, g, transits := newTestBreaker(1)
	now := time.Unix(1000, 0)
	b.Record(key("a"), Outcome{Err: errDown}, now)
	b.Record(key("b"), Outcome{}, now)
	assert.False(t, b.State().Open)

	b.Record(key("a"), Outcome{Err: errDown}, now)
	room, _ := b.Limit(now.Add(time.Second))
	require.Equal(t, 1, room)
	b.Reset(now)
	assert.False(t, b.State().Open)
	assert.True(t, g.isOpen())
	assert.False(t, g.ProbeLeft(), "the probe granted is withdrawn")
	assert.Equal(t, []bool{true, false, true}, *transits, "reset logs nothing")
	assert.Equal(t, uint64(2), b.State().Openings)

	var none *Breaker
	assert.Equal(t, Counted, none.Record(key("a"), Outcome{Err: errDown}, now), "a nil breaker never opens")
	_, limited := none.Limit(now)
	assert.False(t, limited)
}

// While open, a failure about the target that asks for its next attempt's
// time (RetryAfter) is spared: its object keeps the time and counts no
// attempt; the time delays the next probe, up to the probes' maximum
// backoff, and so does the time the opening failure asks.
func TestBreakerRetryAfterWhileOpenDelaysProbes(t *testing.T) {
	b, _, _ := newTestBreaker(1)
	t0 := time.Unix(1000, 0)
	assert.Equal(t, Counted, b.Record(key("a"), Outcome{Err: RetryAfter(20*time.Millisecond, errDown)}, t0), "the opening failure counts")
	due, open := b.NextProbe()
	require.True(t, open)
	assert.Equal(t, t0.Add(20*time.Millisecond), due, "not before the time the target gave")

	room, _ := b.Limit(due)
	require.Equal(t, 1, room)
	assert.Equal(t, Spared, b.Record(key("b"), Outcome{Err: RetryAfter(time.Millisecond, errDown), Probe: true}, due))
	next, _ := b.NextProbe()
	assert.Equal(t, due.Add(20*time.Millisecond), next, "a failed probe: its backoff step, though it asked for less")

	assert.Equal(t, Spared, b.Record(key("c"), Outcome{Err: RetryAfter(24*time.Hour, errDown)}, next))
	last, _ := b.NextProbe()
	assert.Equal(t, next.Add(35*time.Millisecond), last, "a day asked for waits the probes' maximum backoff")
	assert.Equal(t, Counted, b.Record(key("d"), Outcome{Err: RetryAfter(time.Hour, errObject)}, last), "about an object: its own")
}

// A failure again, with the error of its object's attempt before, is no
// news of the target: it neither counts nor breaks the run while closed;
// while open, a probe failing again is a failed probe all the same.
func TestBreakerFailureAgainIsNoNews(t *testing.T) {
	b, _, _ := newTestBreaker(2)
	now := time.Unix(1000, 0)
	b.Record(key("a"), Outcome{Err: errDown}, now)
	for _, k := range []string{"b", "c", "d"} {
		assert.Equal(t, Counted, b.Record(key(k), Outcome{Err: errDown, Again: true}, now))
	}
	assert.False(t, b.State().Open, "objects failing again opened it")
	b.Record(key("e"), Outcome{Err: errDown}, now)
	require.True(t, b.State().Open, "a new failure with the run still going")

	due, _ := b.NextProbe()
	room, _ := b.Limit(due)
	require.Equal(t, 1, room)
	assert.Equal(t, Held, b.Record(key("a"), Outcome{Err: errDown, Again: true, Probe: true}, due))
	next, _ := b.NextProbe()
	assert.True(t, next.After(due), "the probe failing again waits its backoff")
}

// A probe whose batch entry the implementation lost has no answer: the
// breaker stays open and the next probe waits its step; closed, a lost
// entry does not count toward opening.
func TestBreakerLostProbeIsNoAnswer(t *testing.T) {
	b, _, _ := newTestBreaker(2)
	now := time.Unix(1000, 0)
	b.Record(key("a"), Outcome{Lost: true}, now)
	b.Record(key("b"), Outcome{Lost: true}, now)
	assert.False(t, b.State().Open, "lost entries opened it")
	b.Record(key("a"), Outcome{Err: errDown}, now)
	b.Record(key("b"), Outcome{Err: errDown}, now)
	require.True(t, b.State().Open)
	due, _ := b.NextProbe()
	room, _ := b.Limit(due)
	require.Equal(t, 1, room)
	assert.Equal(t, Counted, b.Record(key("c"), Outcome{Lost: true, Probe: true}, due))
	assert.True(t, b.State().Open, "a lost probe closed it")
	next, _ := b.NextProbe()
	assert.True(t, next.After(due), "the next probe waits its step")
}

package reconciler

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

func newTestBreaker(threshold int) (*breaker, *gate, *[]bool) {
	g := newGate()
	var transits []bool
	b := newBreaker(threshold, func(err error) bool { return errors.Is(err, errDown) },
		10*time.Millisecond, 35*time.Millisecond, g, func(open, _ bool, _ error) { transits = append(transits, open) })
	return b, g, &transits
}

func key(k string) func() string { return func() string { return k } }

// The breaker opens on failures about the target of distinct objects in a
// row: the same object failing again, errors about an object and terminal
// errors do not count; a success starts the count again.
func TestBreakerOpensOnDistinctTargetFailuresInARow(t *testing.T) {
	b, g, transits := newTestBreaker(3)
	now := time.Unix(1000, 0)
	fail := func(k string, err error) bool { return b.record(key(k), err, false, false, now) == held }

	assert.False(t, fail("a", errDown))
	assert.False(t, fail("a", errDown))
	assert.False(t, fail("b", errObject))
	assert.False(t, fail("c", TerminalError(errDown)))
	assert.False(t, fail("a", errDown))
	assert.False(t, b.state().open, "one object failing, however often, is not the target")

	assert.False(t, fail("b", errDown))
	assert.Equal(t, counted, b.record(key("x"), nil, false, false, now), "a success")
	assert.False(t, fail("c", errDown))
	assert.False(t, fail("d", errDown))
	assert.False(t, b.state().open, "the success started the count again")

	assert.False(t, fail("e", errDown), "the failure that opens it counts for its object")
	st := b.state()
	require.True(t, st.open)
	assert.Equal(t, uint64(1), st.openings)
	assert.Equal(t, now, st.since)
	assert.ErrorIs(t, st.err, errDown)
	assert.Contains(t, st.err.Error(), "target failing since 1970-01-01T00:16:40Z: target down")
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
	b.record(key("a"), errDown, false, false, t0)
	require.True(t, b.state().open)

	room, limited := b.limit(t0.Add(9 * time.Millisecond))
	assert.Equal(t, 0, room)
	assert.True(t, limited)
	due, open := b.nextProbe()
	assert.True(t, open)
	assert.Equal(t, t0.Add(10*time.Millisecond), due)

	probe := func(at time.Time, err error) {
		t.Helper()
		room, limited := b.limit(at)
		require.Equal(t, 1, room, "a probe is granted at %s", at.Sub(t0))
		require.True(t, limited)
		assert.False(t, g.enter(), "only the probe may start")
		require.True(t, g.enterProbe())
		g.entered()
		assert.False(t, g.enterProbe(), "one probe at a time")
		room, _ = b.limit(at)
		assert.Equal(t, 0, room, "none while the probe runs")
		v := b.record(key("a"), err, false, true, at)
		assert.Equal(t, errors.Is(err, errDown), v == held)
	}
	at := t0.Add(10 * time.Millisecond)
	probe(at, errDown)
	for _, wait := range []time.Duration{20, 35, 35} { // 10ms doubling, up to 35ms
		due, _ := b.nextProbe()
		assert.Equal(t, at.Add(wait*time.Millisecond), due)
		at = due
		probe(at, errDown)
	}
	assert.True(t, b.state().open)

	due, _ = b.nextProbe()
	probe(due, errObject)
	assert.False(t, b.state().open, "the target answered")
	assert.True(t, g.isOpen())
	assert.Equal(t, []bool{true, false}, *transits)
	_, limited = b.limit(due)
	assert.False(t, limited)
}

// Any success closes it; a stop (reset) closes it without a log line; a
// probe granted but never taken is withdrawn when it closes.
func TestBreakerClosesOnAnySuccessAndOnReset(t *testing.T) {
	b, g, transits := newTestBreaker(1)
	now := time.Unix(1000, 0)
	b.record(key("a"), errDown, false, false, now)
	b.record(key("b"), nil, false, false, now)
	assert.False(t, b.state().open)

	b.record(key("a"), errDown, false, false, now)
	room, _ := b.limit(now.Add(time.Second))
	require.Equal(t, 1, room)
	b.reset(now)
	assert.False(t, b.state().open)
	assert.True(t, g.isOpen())
	assert.False(t, g.probeLeft(), "the probe granted is withdrawn")
	assert.Equal(t, []bool{true, false, true}, *transits, "reset logs nothing")
	assert.Equal(t, uint64(2), b.state().openings)

	var none *breaker
	assert.Equal(t, counted, none.record(key("a"), errDown, false, false, now), "a nil breaker never opens")
	_, limited := none.limit(now)
	assert.False(t, limited)
}

// While open, a failure about the target that asks for its next attempt's
// time (RetryAfter) is spared: its object keeps the time and counts no
// attempt; the time delays the next probe, up to the probes' maximum
// backoff, and so does the time the opening failure asks.
func TestBreakerRetryAfterWhileOpenDelaysProbes(t *testing.T) {
	b, _, _ := newTestBreaker(1)
	t0 := time.Unix(1000, 0)
	assert.Equal(t, counted, b.record(key("a"), RetryAfter(20*time.Millisecond, errDown), false, false, t0), "the opening failure counts")
	due, open := b.nextProbe()
	require.True(t, open)
	assert.Equal(t, t0.Add(20*time.Millisecond), due, "not before the time the target gave")

	room, _ := b.limit(due)
	require.Equal(t, 1, room)
	assert.Equal(t, spared, b.record(key("b"), RetryAfter(time.Millisecond, errDown), false, true, due))
	next, _ := b.nextProbe()
	assert.Equal(t, due.Add(20*time.Millisecond), next, "a failed probe: its backoff step, though it asked for less")

	assert.Equal(t, spared, b.record(key("c"), RetryAfter(24*time.Hour, errDown), false, false, next))
	last, _ := b.nextProbe()
	assert.Equal(t, next.Add(35*time.Millisecond), last, "a day asked for waits the probes' maximum backoff")
	assert.Equal(t, counted, b.record(key("d"), RetryAfter(time.Hour, errObject), false, false, last), "about an object: its own")
}

// A failure again, with the error of its object's attempt before, is no
// news of the target: it neither counts nor breaks the run while closed;
// while open, a probe failing again is a failed probe all the same.
func TestBreakerFailureAgainIsNoNews(t *testing.T) {
	b, _, _ := newTestBreaker(2)
	now := time.Unix(1000, 0)
	b.record(key("a"), errDown, false, false, now)
	for _, k := range []string{"b", "c", "d"} {
		assert.Equal(t, counted, b.record(key(k), errDown, true, false, now))
	}
	assert.False(t, b.state().open, "objects failing again opened it")
	b.record(key("e"), errDown, false, false, now)
	require.True(t, b.state().open, "a new failure with the run still going")

	due, _ := b.nextProbe()
	room, _ := b.limit(due)
	require.Equal(t, 1, room)
	assert.Equal(t, held, b.record(key("a"), errDown, true, true, due))
	next, _ := b.nextProbe()
	assert.True(t, next.After(due), "the probe failing again waits its backoff")
}

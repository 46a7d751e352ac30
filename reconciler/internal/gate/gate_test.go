package gate

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestANewGateIsOpen(t *testing.T) {
	g := New()
	require.True(t, g.IsOpen())
	require.True(t, g.MayStart())
	require.True(t, g.Enter())
	g.Entered()
}

func TestPauseAPruneAndAStopEachCloseIt(t *testing.T) {
	for name, close := range map[string]func(g *Gate) func(){
		"pause":    func(g *Gate) func() { g.SetPaused(true); return func() { g.SetPaused(false) } },
		"prune":    func(g *Gate) func() { require.True(t, g.BeginPrune()); return g.EndPrune },
		"stopping": func(g *Gate) func() { g.SetStopping(true); return func() { g.SetStopping(false) } },
		"broken":   func(g *Gate) func() { g.SetBroken(true); return func() { g.SetBroken(false) } },
	} {
		t.Run(name, func(t *testing.T) {
			g := New()
			reopen := close(g)
			require.False(t, g.Enter())
			require.False(t, g.IsOpen())
			require.False(t, g.MayStart())
			reopen()
			require.True(t, g.Enter())
			g.Entered()
		})
	}
}

func TestABrokenGateLetsOneGrantedProbeStart(t *testing.T) {
	g := New()
	g.SetBroken(true)
	require.False(t, g.EnterProbe(), "no probe granted yet")
	g.GrantProbe()
	require.True(t, g.MayStart())
	require.True(t, g.ProbeLeft())
	require.False(t, g.Enter(), "the probe is no ordinary start")
	require.True(t, g.EnterProbe())
	g.Entered()
	require.False(t, g.ProbeLeft())
	require.False(t, g.EnterProbe(), "one probe per grant")

	g.GrantProbe()
	g.SetPaused(true)
	require.False(t, g.EnterProbe(), "Pause holds the probe too")
	g.SetPaused(false)
	g.SetBroken(false)
	require.False(t, g.ProbeLeft(), "the probe is withdrawn when the breaker closes")
	require.True(t, g.Enter())
	g.Entered()
}

func TestClosingWaitsForTheStartsUnderWay(t *testing.T) {
	g := New()
	require.True(t, g.Enter()) // a start decided, its operation not yet called
	var closed atomic.Bool
	done := make(chan struct{})
	go func() {
		g.SetPaused(true)
		closed.Store(true)
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("Pause returned while a start was under way")
	case <-time.After(20 * time.Millisecond): // a bounded look: the start holds it
	}
	g.Entered()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Pause did not return once the start entered")
	}
	require.True(t, closed.Load())
}

func TestStateTellsAChangeAndWakeIsCalled(t *testing.T) {
	g := New()
	var woken atomic.Int64
	g.SetWake(func() { woken.Add(1) })
	paused, changed := g.State()
	require.False(t, paused)
	g.SetPaused(true)
	select {
	case <-changed:
	default:
		t.Fatal("the channel State returned was not closed by Pause")
	}
	paused, changed = g.State()
	require.True(t, paused)
	g.SetPaused(true) // no change: nothing told
	select {
	case <-changed:
		t.Fatal("a Pause of a paused gate told a change")
	default:
	}
	require.Equal(t, int64(1), woken.Load())
	g.SetWake(nil)
	g.SetPaused(false)
	require.Equal(t, int64(1), woken.Load())
}

func TestAPruneWaitsForResumeAndAPauseHoldsABegunPrune(t *testing.T) {
	g := New()
	g.SetPaused(true)
	require.False(t, g.BeginPrune(), "a prune does not begin while paused")
	g.SetPaused(false)
	require.True(t, g.BeginPrune())
	require.False(t, g.BeginPrune(), "one prune at a time")
	require.True(t, g.EnterPrune())
	g.Entered()
	g.SetPaused(true)
	require.False(t, g.EnterPrune(), "Pause since the prune began holds its call")
	g.SetPaused(false)
	g.EndPrune()
	require.True(t, g.IsOpen())
}

package reconciler_test

import (
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// reconciled waits until every change up to rev is applied, and checks
// that no object failed and that the target holds exactly want.
func reconciled(t *testing.T, f *fixture, tg *target, rev statedb.Revision, want map[string]string) {
	t.Helper()
	_, low := f.reconciledTo(rev)
	require.Zero(t, low, "no object failed")
	assert.Equal(t, want, tg.State())
}

// A reconciler registered from a start hook, as an agent does once a
// resource it needs exists, starts with the hive: Start returns, and the
// reconciler reconciles and stops cleanly.
func TestRegisterFromAStartHook(t *testing.T) {
	tg := newTarget()
	f := startFixture(t, tg, &with{register: inStartHook})
	rev := f.upsert(&item{ID: "a", Value: "1"})
	reconciled(t, f, tg, rev, map[string]string{"a": "1"})
	f.stop()
}

// A reconciler registered after the hive has started starts at once.
func TestRegisterAfterTheHiveStarted(t *testing.T) {
	tg := newTarget()
	f := startFixture(t, tg, &with{register: byTheTest})
	before := f.upsert(&item{ID: "a", Value: "1"})
	require.NoError(t, f.register())
	reconciled(t, f, tg, before, map[string]string{"a": "1"})
	f.upsert(&item{ID: "b", Value: "1"})
	rev := f.remove("a")
	reconciled(t, f, tg, rev, map[string]string{"b": "1"})
	f.stop()
}

// The reconciler runs inside a testing/synctest bubble, as StateDB tests
// its own: nothing it leaves behind is touched from outside the bubble.
// Writes and deletes made while the hive is stopped converge after the
// next start.
func TestRunsInASynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tg := newTarget()
		f := startFixture(t, tg, nil)
		rev := f.upsert(&item{ID: "a", Value: "1"}, &item{ID: "b", Value: "1"}, &item{ID: "c", Value: "1"})
		reconciled(t, f, tg, rev, map[string]string{"a": "1", "b": "1", "c": "1"})
		f.stop()

		f.upsert(&item{ID: "b", Value: "2"}, &item{ID: "d", Value: "1"})
		f.remove("a")
		rev = f.remove("c")
		f.start()
		reconciled(t, f, tg, rev, map[string]string{"b": "2", "d": "1"})
		f.stop()
	})
	// What the bubble left is now garbage: its cleanups run outside the
	// bubble, and must not touch it (the process would die).
	collectGarbage(t)
}

// collectGarbage collects what is unreachable and waits for the cleanups
// that queues to have run. Its own object is not a tiny one: the cleanup
// of a tiny object (16 bytes or less, without pointers) may never run, as
// it may share its memory with a live object.
func collectGarbage(t *testing.T) {
	t.Helper()
	for range 3 {
		done := make(chan struct{})
		runtime.AddCleanup(new([64]byte), func(ch chan struct{}) { close(ch) }, done)
		runtime.GC()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("cleanups did not run")
		}
	}
}

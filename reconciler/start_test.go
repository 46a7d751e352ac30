package reconciler_test

// When a reconciler starts: registered from a start hook or after the
// start, inside a synctest bubble, and held back by WithStartAfter.

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
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

// withInitializer is a with whose setup registers an initializer of the
// items table, and sets markDone to the function that completes it.
func withInitializer(name string, markDone *func(statedb.WriteTxn)) *with {
	return &with{setup: func(f *fixture) []reconciler.Option {
		wtxn := f.db.WriteTxn(f.table)
		*markDone = f.table.RegisterInitializer(wtxn, name)
		wtxn.Commit()
		return nil
	}}
}

// With WithStartAfter nothing is applied before the tables are
// initialized; with a timeout it starts anyway, and health says why until
// they are.
func TestStartAfterWaitsForTheTables(t *testing.T) {
	t.Run("initialized late", func(t *testing.T) {
		tg := newTarget()
		var markDone func(statedb.WriteTxn)
		f := startFixture(t, tg, withInitializer("late", &markDone), reconciler.WithStartAfter(0))
		rev := f.upsert(&item{ID: "a", Value: "1"})
		f.waitHealth(func(_ cell.Level, msg string) bool {
			return strings.Contains(msg, "Waiting for tables to be initialized: items")
		})
		_, _, err := f.rec.WaitUntilReconciled(ctxFor(t, 50*time.Millisecond), rev)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Empty(t, tg.applied(), "nothing applied before initialization")

		wtxn := f.db.WriteTxn(f.table)
		markDone(wtxn)
		wtxn.Commit()
		f.waitKind("a", status.KindDone)
	})
	t.Run("timeout", func(t *testing.T) {
		var markDone func(statedb.WriteTxn)
		f := startFixture(t, newTarget(), withInitializer("never", &markDone), reconciler.WithStartAfter(20*time.Millisecond))
		f.upsert(&item{ID: "a", Value: "1"})
		f.waitKind("a", status.KindDone)
		f.waitHealth(func(level cell.Level, msg string) bool {
			return level == cell.StatusDegraded && strings.Contains(msg, "tables not initialized") && strings.Contains(msg, "items")
		})
		wtxn := f.db.WriteTxn(f.table)
		markDone(wtxn)
		wtxn.Commit()
		f.upsert(&item{ID: "b", Value: "1"}) // a round notices
		f.waitHealth(func(level cell.Level, _ string) bool { return level == cell.StatusOK })
	})
}

package collect

import (
	"log/slog"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/converge-go/converge/reconciler/internal/work/worktest"
	"github.com/converge-go/converge/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture is a table of worktest.Obj and a Collector of it, with one worker.
type fixture struct {
	db    *statedb.DB
	table statedb.RWTable[*worktest.Obj]
	c     *Collector[*worktest.Obj]
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	db, table, objs, q := worktest.Table(t)
	c := New(Config[*worktest.Obj]{DB: db, Objects: objs, Queue: q, Log: slog.New(slog.DiscardHandler)}, Limits{Concurrency: 1, RoundSize: 1000})
	return &fixture{db, table, c}
}

func (f *fixture) write(fn func(wtxn statedb.WriteTxn)) {
	wtxn := f.db.WriteTxn(f.table)
	fn(wtxn)
	wtxn.Commit()
}

// A restart that finds an object deleted while stopped and put back with
// a Done of no identity (a restore) reads the recovered delete first,
// which remembers a cut for the key; the Done then read in the same pass
// is older than that, and is applied as if Pending (see stale), not
// passed over as quiet.
func TestARestoredDoneAfterADeleteWhileStoppedIsNotPassedOverAsQuiet(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	f.write(func(wtxn statedb.WriteTxn) {
		for i := range 3 {
			f.table.Insert(wtxn, &worktest.Obj{ID: uint64(i), St: status.DoneAt(now)})
		}
	})
	require.NoError(t, f.c.Open())
	require.Empty(t, f.c.Collect(f.db.ReadTxn(), now, 1000), "first read: all Done")
	// Deleted before the stop, the delete not read: the feed keeps it
	// for the next open. Put back while stopped, restored Done.
	f.write(func(wtxn statedb.WriteTxn) { f.table.Delete(wtxn, &worktest.Obj{ID: 1}) })
	f.c.Close()
	f.write(func(wtxn statedb.WriteTxn) {
		f.table.Insert(wtxn, &worktest.Obj{ID: 1, St: status.Status{Kind: status.KindDone, UpdatedAt: now}})
	})

	require.NoError(t, f.c.Open())
	defer f.c.Close()
	ops := f.c.Collect(f.db.ReadTxn(), now, 1000)
	require.Len(t, ops, 1, "second read: the restored object, stale")
	o := ops[0].Task
	require.False(t, o.Delete)
	require.Equal(t, uint64(1), o.Obj.ID)
	require.Equal(t, status.KindPending, o.Obj.St.Kind, "applied as if Pending")
	require.False(t, f.c.changes.PassingOverQuiet(), "the feed still skips after the read")
}

func TestOwnWritesAreRangesForgottenOnceRead(t *testing.T) {
	var w ownWrites
	w.add(10, 12, 0)
	w.add(13, 14, 0) // contiguous: merged
	w.add(20, 20, 0)
	require.Equal(t, []revRange{{10, 14}, {20, 20}}, w.ranges)

	// Changes are read in increasing revision order.
	require.False(t, w.has(9))
	require.True(t, w.has(10))
	require.True(t, w.has(14))
	require.False(t, w.has(15), "a user's write between two commits")
	require.True(t, w.has(20))
	require.False(t, w.has(21))
	require.Empty(t, w.ranges, "ranges passed are forgotten")

	// Ranges that reading has passed are forgotten when a commit adds one,
	// so they do not pile up while no Error change comes.
	w.add(30, 31, 0)
	w.add(40, 41, 35)
	require.Equal(t, []revRange{{40, 41}}, w.ranges)
	w.add(50, 51, 60)
	require.Equal(t, []revRange{{50, 51}}, w.ranges, "the new range is kept even if reading is past it")
}

package collect

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/reconciler/internal/work"
	"github.com/converge-go/converge/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type obj struct {
	id uint64
	st status.Status
}

func (o *obj) TableHeader() []string { return []string{"ID", "Status"} }
func (o *obj) TableRow() []string    { return []string{fmt.Sprint(o.id), o.st.String()} }

var objID = statedb.Index[*obj, uint64]{
	Name:       "id",
	FromObject: func(o *obj) index.KeySet { return index.NewKeySet(index.Uint64(o.id)) },
	FromKey:    index.Uint64,
	Unique:     true,
}

// fixture is a table of obj and a Collector of it, with one worker.
type fixture struct {
	db    *statedb.DB
	table statedb.RWTable[*obj]
	c     *Collector[*obj]
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	db := statedb.New()
	require.NoError(t, db.Start())
	t.Cleanup(func() { db.Stop() })
	table, err := statedb.NewTable(db, "objs", objID)
	require.NoError(t, err)
	objs := &work.Objects[*obj]{
		Table: table, Primary: table.PrimaryIndexer(),
		Clone:     func(o *obj) *obj { c := *o; return &c },
		SetStatus: func(o *obj, st status.Status) *obj { o.st = st; return o },
		GetStatus: func(o *obj) status.Status { return o.st },
	}
	q := keyqueue.New[*obj](func(k string) string { return k })
	c := New(Config[*obj]{DB: db, Objects: objs, Queue: q, Log: slog.New(slog.DiscardHandler)}, Limits{Concurrency: 1, RoundSize: 1000})
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
			f.table.Insert(wtxn, &obj{id: uint64(i), st: status.DoneAt(now)})
		}
	})
	require.NoError(t, f.c.Open())
	require.Empty(t, f.c.Collect(f.db.ReadTxn(), now, 1000), "first read: all Done")
	// Deleted before the stop, the delete not read: the feed keeps it
	// for the next open. Put back while stopped, restored Done.
	f.write(func(wtxn statedb.WriteTxn) { f.table.Delete(wtxn, &obj{id: 1}) })
	f.c.Close()
	f.write(func(wtxn statedb.WriteTxn) {
		f.table.Insert(wtxn, &obj{id: 1, st: status.Status{Kind: status.KindDone, UpdatedAt: now}})
	})

	require.NoError(t, f.c.Open())
	defer f.c.Close()
	ops := f.c.Collect(f.db.ReadTxn(), now, 1000)
	require.Len(t, ops, 1, "second read: the restored object, stale")
	o := ops[0].Task
	require.False(t, o.Delete)
	require.Equal(t, uint64(1), o.Obj.id)
	require.Equal(t, status.KindPending, o.Obj.st.Kind, "applied as if Pending")
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

package changes

import (
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"

	"github.com/converge-go/converge/status"
)

type object struct {
	id uint64
	st status.Status
}

func (o *object) TableHeader() []string { return []string{"ID", "Status"} }
func (o *object) TableRow() []string    { return []string{strconv.FormatUint(o.id, 10), o.st.String()} }
func statusOf(o *object) status.Status  { return o.st }

var byID = statedb.Index[*object, uint64]{
	Name:       "id",
	FromObject: func(o *object) index.KeySet { return index.NewKeySet(index.Uint64(o.id)) },
	FromKey:    index.Uint64,
	Unique:     true,
}

func newTable(t *testing.T) (*statedb.DB, statedb.RWTable[*object]) {
	t.Helper()
	db := statedb.New()
	if err := db.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Stop() })
	tbl, err := statedb.NewTable(db, "objects", byID)
	if err != nil {
		t.Fatal(err)
	}
	return db, tbl
}

func write(db *statedb.DB, tbl statedb.RWTable[*object], f func(statedb.WriteTxn)) {
	wtxn := db.WriteTxn(tbl)
	f(wtxn)
	wtxn.Commit()
}

// ids reads what Next hands out: ids, and deletes as 1000+id.
func ids(f *Feed[*object], txn statedb.ReadTxn) []uint64 {
	changes, _ := f.Next(txn)
	var got []uint64
	for change := range changes {
		if change.Deleted {
			got = append(got, 1000+change.Object.id)
			continue
		}
		got = append(got, change.Object.id)
	}
	return got
}

// With PassOverQuiet the feed passes over the upserts whose status asks
// for nothing (Done, unset), as read, and hands out every delete and every
// Pending, Refreshing and Error; without it, all.
func TestPassOverQuietHandsOutOnlyWhatAsksForWork(t *testing.T) {
	kinds := []status.Status{status.Done(), {}, status.Pending(), status.Refreshing(), status.Error(errors.New("failed")), {Kind: status.KindDone}}
	for _, skip := range []bool{false, true} {
		db, tbl := newTable(t)
		write(db, tbl, func(w statedb.WriteTxn) { tbl.Insert(w, &object{id: 100, st: status.Done()}) })
		f := New(db, statedb.Table[*object](tbl))
		if _, err := f.Open(); err != nil {
			t.Fatal(err)
		}
		write(db, tbl, func(w statedb.WriteTxn) {
			for i, st := range kinds {
				tbl.Insert(w, &object{id: uint64(i), st: st})
			}
			tbl.Delete(w, &object{id: 100})
		})
		last := tbl.Revision(db.ReadTxn())
		if skip {
			f.PassOverQuiet(statusOf)
		}
		got := ids(f, db.ReadTxn())
		f.Close()
		want := []uint64{0, 1, 2, 3, 4, 5, 1100}
		// 100 was read before it was deleted: skipped as Done, or not.
		if skip {
			want = []uint64{2, 3, 4, 1100}
		}
		if !slices.Equal(got, want) {
			t.Errorf("skip %v: handed out %v, want %v", skip, got, want)
		}
		if f.Read() != last {
			t.Errorf("skip %v: read up to %d, want %d", skip, f.Read(), last)
		}
	}
}

// A delete made while the feed is closed is handed out at the next open,
// first, beside the revision read so far (not its own); an upsert read
// before the close is not handed out again.
func TestAFeedReopenedHandsOutTheDeletesMadeWhileClosed(t *testing.T) {
	db, tbl := newTable(t)
	write(db, tbl, func(w statedb.WriteTxn) {
		tbl.Insert(w, &object{id: 1})
		tbl.Insert(w, &object{id: 2})
	})
	f := New(db, statedb.Table[*object](tbl))
	if _, err := f.Open(); err != nil {
		t.Fatal(err)
	}
	if got := ids(f, db.ReadTxn()); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("first read: %v", got)
	}
	read := f.Read()
	f.Close()
	write(db, tbl, func(w statedb.WriteTxn) {
		tbl.Delete(w, &object{id: 1})
		tbl.Insert(w, &object{id: 3})
	})
	if _, err := f.Open(); err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	changes, watch := f.Next(db.ReadTxn())
	select {
	case <-watch:
	default:
		t.Error("the watch channel of a read with recovered deletes is not closed")
	}
	var got []uint64
	for change, rev := range changes {
		if change.Deleted {
			got = append(got, 1000+change.Object.id)
			if rev != read {
				t.Errorf("the recovered delete came beside revision %d, want %d (read so far)", rev, read)
			}
			continue
		}
		got = append(got, change.Object.id)
	}
	if !slices.Equal(got, []uint64{1001, 3}) {
		t.Errorf("after the reopen: %v, want the delete of 1, then 3", got)
	}
	if f.Drained() != tbl.Revision(db.ReadTxn()) {
		t.Errorf("drained %d, want the table's revision %d", f.Drained(), tbl.Revision(db.ReadTxn()))
	}
}

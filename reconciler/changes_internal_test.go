package reconciler

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/status"
)

// TestFeedSkipsQuiet: with statusOf set the feed passes over the upserts
// whose status asks for nothing (Done, unset), as read, and hands out
// every delete and every Pending, Refreshing and Error; without it, all.
func TestFeedSkipsQuiet(t *testing.T) {
	kinds := []status.Status{status.Done(), {}, status.Pending(), status.Refreshing(), status.Error(errors.New("failed")), {Kind: status.KindDone}}
	for _, skip := range []bool{false, true} {
		db, tbl := newBenchTable(t)
		wtxn := db.WriteTxn(tbl)
		tbl.Insert(wtxn, &benchObj{id: 100, st: status.Done()})
		wtxn.Commit()
		f := newChangeFeed(db, statedb.Table[*benchObj](tbl))
		if _, err := f.open(); err != nil {
			t.Fatal(err)
		}
		wtxn = db.WriteTxn(tbl)
		for i, st := range kinds {
			tbl.Insert(wtxn, &benchObj{id: uint64(i), st: st})
		}
		tbl.Delete(wtxn, &benchObj{id: 100})
		wtxn.Commit()
		last := tbl.Revision(db.ReadTxn())
		if skip {
			f.statusOf = benchGetStatus
		}
		changes, _ := f.next(db.ReadTxn())
		var got []uint64
		for change := range changes {
			if change.Deleted {
				got = append(got, 1000+change.Object.id)
				continue
			}
			got = append(got, change.Object.id)
		}
		f.close()
		want := []uint64{0, 1, 2, 3, 4, 5, 1100}
		// 100 was read before it was deleted: skipped as Done, or not.
		if skip {
			want = []uint64{2, 3, 4, 1100}
		}
		if !slices.Equal(got, want) {
			t.Errorf("skip %v: handed out %v, want %v", skip, got, want)
		}
		if f.read != last {
			t.Errorf("skip %v: read up to %d, want %d", skip, f.read, last)
		}
	}
}

// TestCollectSkipsQuietUntilStale: a restart that finds an object deleted
// while stopped and put back with a Done of no identity (a restore) reads
// the recovered delete first, which remembers a cut for the key; the Done
// then read in the same pass is older than that, and is applied as if
// Pending (see stale), not passed over as quiet.
func TestCollectSkipsQuietUntilStale(t *testing.T) {
	r := newBenchReconciler(t, false)
	insertDone(r.db, r.objects.table, 3)
	now := time.Now()
	if err := r.feed.open(); err != nil {
		t.Fatal(err)
	}
	if work := r.collect(r.db.ReadTxn(), now, benchRound); len(work) != 0 {
		t.Fatalf("first read: %d ops, want none (all Done)", len(work))
	}
	// Deleted before the stop, the delete not read: the feed keeps it
	// for the next open. Put back while stopped, restored Done.
	wtxn := r.db.WriteTxn(r.objects.table)
	r.objects.table.Delete(wtxn, &benchObj{id: 1})
	wtxn.Commit()
	r.feed.changes.close()
	wtxn = r.db.WriteTxn(r.objects.table)
	r.objects.table.Insert(wtxn, &benchObj{id: 1, st: status.Status{Kind: status.KindDone, UpdatedAt: now}})
	wtxn.Commit()

	if err := r.feed.open(); err != nil {
		t.Fatal(err)
	}
	defer r.feed.changes.close()
	work := r.collect(r.db.ReadTxn(), now, benchRound)
	if len(work) != 1 {
		t.Fatalf("second read: %d ops, want 1 (the restored object, stale)", len(work))
	}
	if o := work[0].task; o.Delete || o.Obj.id != 1 || o.Obj.st.Kind != status.KindPending {
		t.Errorf("second read: op for object %d (delete %v, status %s), want an update of 1 as Pending", o.Obj.id, o.Delete, o.Obj.st)
	}
	if r.feed.changes.statusOf != nil {
		t.Error("the feed still skips after the read")
	}
}

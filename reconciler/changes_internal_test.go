package reconciler

import (
	"testing"
	"time"

	"github.com/converge-go/converge/status"
)

// TestCollectSkipsQuietUntilStale: a restart that finds an object deleted
// while stopped and put back with a Done of no identity (a restore) reads
// the recovered delete first, which remembers a cut for the key; the Done
// then read in the same pass is older than that, and is applied as if
// Pending (see stale), not passed over as quiet.
func TestCollectSkipsQuietUntilStale(t *testing.T) {
	r := newBenchReconciler(t, false)
	insertDone(r.db, r.objects.Table, 3)
	now := time.Now()
	if err := r.feed.open(); err != nil {
		t.Fatal(err)
	}
	if work := r.collect(r.db.ReadTxn(), now, benchRound); len(work) != 0 {
		t.Fatalf("first read: %d ops, want none (all Done)", len(work))
	}
	// Deleted before the stop, the delete not read: the feed keeps it
	// for the next open. Put back while stopped, restored Done.
	wtxn := r.db.WriteTxn(r.objects.Table)
	r.objects.Table.Delete(wtxn, &benchObj{id: 1})
	wtxn.Commit()
	r.feed.changes.Close()
	wtxn = r.db.WriteTxn(r.objects.Table)
	r.objects.Table.Insert(wtxn, &benchObj{id: 1, st: status.Status{Kind: status.KindDone, UpdatedAt: now}})
	wtxn.Commit()

	if err := r.feed.open(); err != nil {
		t.Fatal(err)
	}
	defer r.feed.changes.Close()
	work := r.collect(r.db.ReadTxn(), now, benchRound)
	if len(work) != 1 {
		t.Fatalf("second read: %d ops, want 1 (the restored object, stale)", len(work))
	}
	if o := work[0].Task; o.Delete || o.Obj.id != 1 || o.Obj.st.Kind != status.KindPending {
		t.Errorf("second read: op for object %d (delete %v, status %s), want an update of 1 as Pending", o.Obj.id, o.Delete, o.Obj.st)
	}
	if r.feed.changes.PassingOverQuiet() {
		t.Error("the feed still skips after the read")
	}
}

package reconciler

import (
	"context"
	"testing"
	"time"
)

// TestAwaitLandedPublishesTheProgressOwed: a round whose statuses were
// written with the table's other reconcilers owes its progress until the
// write lands, and the loop waits for that (owedC). A prune that waits
// for the write first (awaitLanded) takes that wake-up away and publishes
// no progress itself: before, a late reconciler whose first prune came
// right after its first round stayed at revision 0 for good
// (TestOutsider53LateReconcilerJoinsTheTable, now TestAReconcilerRegisteredLateJoinsTheOthersWrites, about once in a few hundred
// runs beside other tests).
func TestAwaitLandedPublishesTheProgressOwed(t *testing.T) {
	r := newBenchReconciler(t, false)
	insertDone(r.db, r.objects.Table, 3)
	if err := r.collect.Open(); err != nil {
		t.Fatal(err)
	}
	defer r.collect.Close()
	r.collect.Collect(r.db.ReadTxn(), time.Now(), benchRound) // read up to the table's revision
	r.rep.owed = true                                         // as the round's report found the write not landed (progressOwed)
	r.awaitLanded()
	if r.owedC() != nil {
		t.Error("progress still owed once landed")
	}
	want := r.objects.Table.Revision(r.db.ReadTxn())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got, _, err := r.rep.progress.Wait(ctx, want); err != nil || got < want {
		t.Fatalf("progress after awaitLanded: %d, %v; want %d published", got, err, want)
	}
}

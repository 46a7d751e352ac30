package reconciler

import (
	"context"
	"testing"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/collect"
	"github.com/converge-go/converge/status"
)

// restartObjects is how many Done objects the restart benchmarks find in
// the table.
const restartObjects = 100_000

// insertDone writes objects 0..n-1 Done, as a restart restores them.
func insertDone(db *statedb.DB, tbl statedb.RWTable[*benchObj], n int) {
	wtxn := db.WriteTxn(tbl)
	for i := range n {
		tbl.Insert(wtxn, &benchObj{id: uint64(i), st: status.Done()})
	}
	wtxn.Commit()
}

// floorGetStatus is benchGetStatus called through a function value, as
// the StateDB reconciler calls its Config.GetObjectStatus.
var floorGetStatus = benchGetStatus

// BenchmarkRestartDone measures a restart's first round: a new feed of a
// table that holds restartObjects objects Done, read to its end, none of
// which asks for work, and the round's report. It reports the time per
// object; upstream is the same read with the StateDB change iterator and
// the status check alone, which is all the StateDB reconciler does with a
// Done change.
func BenchmarkRestartDone(b *testing.B) {
	b.Run("converge", func(b *testing.B) {
		r := newBenchReconciler(b, false)
		insertDone(r.db, r.objects.Table, restartObjects)
		ctx := context.Background()
		health, _ := cell.NewSimpleHealth()
		for b.Loop() {
			r.collect = collect.New(collect.Config[*benchObj]{DB: r.db, Objects: &r.objects, Queue: r.queue, Log: r.log}, r.opts.collectLimits())
			if err := r.collect.Open(); err != nil {
				b.Fatal(err)
			}
			r.resetRun(health)
			l := &loop[*benchObj]{r: r, exec: newExecutor(ctx, r)}
			l.round(ctx, false)
			if got, want := r.collect.Progress(r.queue.Lows()), r.objects.Table.Revision(r.db.ReadTxn()); got != want {
				b.Fatalf("read up to %d, want %d", got, want)
			}
			r.collect.Close()
		}
		reportPerObject(b, restartObjects)
	})
	b.Run("floor", func(b *testing.B) {
		db, tbl := newBenchTable(b)
		insertDone(db, tbl, restartObjects)
		for b.Loop() {
			wtxn := db.WriteTxn(tbl)
			it, err := tbl.Changes(wtxn)
			wtxn.Commit()
			if err != nil {
				b.Fatal(err)
			}
			changes, _ := it.Next(db.ReadTxn())
			n := 0
			for change := range changes {
				if change.Deleted || floorGetStatus(change.Object).IsPendingOrRefreshing() {
					b.Fatal("work asked")
				}
				n++
			}
			it.Close()
			if n != restartObjects {
				b.Fatalf("read %d changes, want %d", n, restartObjects)
			}
		}
		reportPerObject(b, restartObjects)
	})
}

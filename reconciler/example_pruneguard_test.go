package reconciler_test

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// planPrune is the board's dry run of Prune: how many messages a prune
// given want would remove, of how many the board holds.
func (b *board) planPrune(_ context.Context, _ statedb.ReadTxn, want iter.Seq2[*Greeting, statedb.Revision]) (remove, held int, err error) {
	keep := map[string]bool{}
	for g := range want {
		keep[g.Name] = true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for name := range b.msgs {
		if !keep[name] {
			remove++
		}
	}
	return remove, len(b.msgs), nil
}

// The board still holds what an earlier run applied, and the table comes
// up with only one greeting of three (a source that had not synced): the
// first prune would remove two thirds of the board, over the guard's
// half, so it is held and the reconcilers table says so, until
// ConfirmPrune lets it run.
func Example_pruneGuard() {
	target := &board{msgs: map[string]string{"ada": "hello", "bob": "hi", "cy": "hey"}}
	var (
		db        *statedb.DB
		greetings statedb.RWTable[*Greeting]
		rec       reconciler.Reconciler[*Greeting]
		rows      *tables.Tables
		synced    func(statedb.WriteTxn)
	)
	h := hive.New(
		statedb.Cell,
		job.Cell,
		tables.Cell,
		cell.Provide(cell.NewSimpleHealth),
		cell.Module("greetings", "Greetings reconciler",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(db_ *statedb.DB, p reconciler.Params, t *tables.Tables) (err error) {
				db, rows = db_, t
				if greetings, err = statedb.NewTable(db, "greetings", greetingName); err != nil {
					return err
				}
				// Prunes wait until the table's source says it is synced.
				wtxn := db.WriteTxn(greetings)
				synced = greetings.RegisterInitializer(wtxn, "source")
				wtxn.Commit()
				rec, err = reconciler.Register(p, greetings,
					(*Greeting).Clone, (*Greeting).SetStatus, (*Greeting).GetStatus, target, nil,
					// Hold a prune that would remove more than half of the board.
					reconciler.WithPruneGuard(0, 0.5, target.planPrune))
				return err
			}),
		),
	)
	log := slog.New(slog.DiscardHandler)
	if err := h.Start(log, context.Background()); err != nil {
		panic(err)
	}
	defer h.Stop(log, context.Background())

	wtxn := db.WriteTxn(greetings)
	greetings.Insert(wtxn, &Greeting{Name: "ada", Message: "hello", Status: status.Pending()})
	synced(wtxn) // synced, yet short of bob and cy
	wtxn.Commit()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	row := func(cond func(*tables.Info) bool) *tables.Info {
		for {
			info, _, watch, found := rows.Reconcilers().GetWatch(db.ReadTxn(), tables.InfoByID.Query("greetings"))
			if found && cond(info) {
				return info
			}
			select {
			case <-watch:
			case <-ctx.Done():
				panic(ctx.Err())
			}
		}
	}
	held := row(func(i *tables.Info) bool { return i.PruneHeld })
	fmt.Printf("%s, prune held: would remove %d of %d\n", held.State, held.PruneHeldRemove, held.PruneHeldOf)

	rec.ConfirmPrune()
	pruned := row(func(i *tables.Info) bool { return !i.PruneHeld && !i.LastPrune.IsZero() })
	fmt.Println(pruned.State, "after ConfirmPrune")
	target.mu.Lock()
	defer target.mu.Unlock()
	fmt.Println(slices.Sorted(maps.Keys(target.msgs)))
	// Output:
	// degraded, prune held: would remove 2 of 3
	// running after ConfirmPrune
	// [ada]
}

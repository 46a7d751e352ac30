package reconciler_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"

	convergeindex "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// countingBoard is a board that counts its writes.
type countingBoard struct {
	board
	writes atomic.Int64
}

func (b *countingBoard) Update(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, g *Greeting) error {
	b.writes.Add(1)
	return b.board.Update(ctx, txn, rev, g)
}

// inSync is the drift check: the board holds g's message.
func (b *countingBoard) inSync(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, g *Greeting) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	msg, ok := b.msgs[g.Name]
	return ok && msg == g.Message, nil
}

// A refresh with a drift check rewrites only what drifted: here ada is in
// sync and left alone, bob was changed behind the reconciler's back and is
// repaired.
func Example_driftCheck() {
	target := &countingBoard{board: board{msgs: map[string]string{}}}
	statusIndex := convergeindex.NewStatusIndex((*Greeting).GetStatus)
	var (
		db        *statedb.DB
		greetings statedb.RWTable[*Greeting]
	)
	h := hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth),
		cell.Module("greetings", "Greetings reconciler",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(db_ *statedb.DB, p reconciler.Params) (err error) {
				db = db_
				if greetings, err = statedb.NewTable(db, "greetings", greetingName, statusIndex); err != nil {
					return err
				}
				_, err = reconciler.Register(p, greetings,
					(*Greeting).Clone, (*Greeting).SetStatus, (*Greeting).GetStatus,
					target, nil,
					// WithRefreshing marks Done objects Refreshing; the check
					// decides which of them Update is called for.
					reconciler.WithDriftCheck(target.inSync))
				return err
			})))
	log := slog.New(slog.DiscardHandler)
	if err := h.Start(log, context.Background()); err != nil {
		panic(err)
	}
	defer h.Stop(log, context.Background())

	write := func(kind func() status.Status, gs ...*Greeting) {
		wtxn := db.WriteTxn(greetings)
		for _, g := range gs {
			g.Status = kind()
			greetings.Insert(wtxn, g)
		}
		wtxn.Commit()
		if err := reconciler.WaitForReconciliation(context.Background(), db, greetings, statusIndex); err != nil {
			panic(err)
		}
	}
	write(status.Pending, &Greeting{Name: "ada", Message: "hello"}, &Greeting{Name: "bob", Message: "hi"})
	fmt.Println("writes after the first round:", target.writes.Load())

	target.mu.Lock()
	target.msgs["bob"] = "tampered"
	target.mu.Unlock()
	// As a refresh sweep marks them:
	write(status.Refreshing, &Greeting{Name: "ada", Message: "hello"}, &Greeting{Name: "bob", Message: "hi"})
	fmt.Println("writes after the refresh:", target.writes.Load())
	target.mu.Lock()
	fmt.Println("bob:", target.msgs["bob"])
	target.mu.Unlock()
	// Output:
	// writes after the first round: 2
	// writes after the refresh: 3
	// bob: hi
}

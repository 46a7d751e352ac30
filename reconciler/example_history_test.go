package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// flakyBoard fails bob's updates with one error after another, then holds
// the next one until release is closed, and succeeds.
type flakyBoard struct {
	errs    []string // bob's next errors; read and written by Update only
	release chan struct{}
}

func (b *flakyBoard) Update(ctx context.Context, _ statedb.ReadTxn, _ statedb.Revision, g *Greeting) error {
	if g.Name != "bob" {
		return nil
	}
	if len(b.errs) > 0 {
		err := errors.New(b.errs[0])
		b.errs = b.errs[1:]
		return err
	}
	select {
	case <-b.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *flakyBoard) Delete(context.Context, statedb.ReadTxn, statedb.Revision, *Greeting) error {
	return nil
}

func (b *flakyBoard) Prune(context.Context, statedb.ReadTxn, iter.Seq2[*Greeting, statedb.Revision]) error {
	return nil
}

// A failing object's recent errors, in its row of the reconciler-retries
// table (tables.Cell): the last four distinct errors, oldest first, each
// with the attempt at which it last happened. The row, history included,
// goes once the object is Done.
func Example_errorHistory() {
	ops := &flakyBoard{
		errs:    []string{"disk full", "disk full", "connection reset", "disk full", "quota exceeded", "permission denied"},
		release: make(chan struct{}),
	}
	var (
		db        *statedb.DB
		greetings statedb.RWTable[*Greeting]
		retries   statedb.Table[*tables.RetryInfo]
	)
	h := hive.New(
		statedb.Cell, job.Cell, tables.Cell,
		cell.Provide(cell.NewSimpleHealth),
		cell.Module("greetings", "Greetings reconciler",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(db_ *statedb.DB, p reconciler.Params, r statedb.Table[*tables.RetryInfo]) (err error) {
				db, retries = db_, r
				if greetings, err = statedb.NewTable(db, "greetings", greetingName); err != nil {
					return err
				}
				_, err = reconciler.Register(p, greetings,
					(*Greeting).Clone, (*Greeting).SetStatus, (*Greeting).GetStatus,
					ops, nil, reconciler.WithRetry(time.Millisecond, time.Millisecond))
				return err
			}),
		),
	)
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Start(log, ctx); err != nil {
		panic(err)
	}
	defer h.Stop(log, context.Background())

	wtxn := db.WriteTxn(greetings)
	greetings.Insert(wtxn, &Greeting{Name: "bob", Message: "hi", Status: status.Pending()})
	wtxn.Commit()

	// bobRow waits until bob's row satisfies ok (nil: no row), or ctx ends.
	bobRow := func(ok func(*tables.RetryInfo) bool) *tables.RetryInfo {
		for {
			var found *tables.RetryInfo
			rows, watch := retries.AllWatch(db.ReadTxn())
			for r := range rows {
				if r.Key == "bob" {
					found = r
				}
			}
			if ok(found) {
				return found
			}
			select {
			case <-watch:
			case <-ctx.Done():
				panic(ctx.Err())
			}
		}
	}
	row := bobRow(func(r *tables.RetryInfo) bool { return r != nil && r.Attempts == 6 })
	fmt.Println("attempts:", row.Attempts, "last error:", row.LastError)
	for _, e := range row.Errors {
		fmt.Printf("  #%d %s\n", e.Attempt, e.Error)
	}

	close(ops.release)
	bobRow(func(r *tables.RetryInfo) bool { return r == nil })
	fmt.Println("bob is Done: no row, no history")
	// Output:
	// attempts: 6 last error: permission denied
	//   #3 connection reset
	//   #4 disk full
	//   #5 quota exceeded
	//   #6 permission denied
	// bob is Done: no row, no history
}

package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"

	convergeindex "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// Change settings of a running reconciler: more workers and smaller rounds
// for a burst, a shorter backoff, refreshing turned on. Configure returns at
// once; the settings apply before the next round. An option it does not
// take, or a value Register would refuse, changes nothing.
func Example_configure() {
	target := &board{msgs: map[string]string{}}
	statusIndex := convergeindex.NewStatusIndex((*Greeting).GetStatus)
	var (
		db        *statedb.DB
		greetings statedb.RWTable[*Greeting]
		rec       reconciler.Reconciler[*Greeting]
	)
	h := hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth),
		cell.Module("greetings", "Greetings reconciler",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(db_ *statedb.DB, p reconciler.Params) (err error) {
				db = db_
				if greetings, err = statedb.NewTable(db, "greetings", greetingName, statusIndex); err != nil {
					return err
				}
				rec, err = reconciler.Register(p, greetings,
					(*Greeting).Clone, (*Greeting).SetStatus, (*Greeting).GetStatus, target, nil)
				return err
			})))
	log := slog.New(slog.DiscardHandler)
	if err := h.Start(log, context.Background()); err != nil {
		panic(err)
	}
	defer h.Stop(log, context.Background())

	err := rec.Configure(
		reconciler.WithConcurrency(8),
		reconciler.WithRoundLimits(100, nil),
		reconciler.WithRetry(10*time.Millisecond, 10*time.Second),
		reconciler.WithRefreshing(30*time.Minute, nil),
	)
	fmt.Println("configured:", err)

	wtxn := db.WriteTxn(greetings)
	for _, name := range []string{"ada", "bob", "cy"} {
		greetings.Insert(wtxn, &Greeting{Name: name, Message: "hello", Status: status.Pending()})
	}
	wtxn.Commit()
	if err := reconciler.WaitForReconciliation(context.Background(), db, greetings, statusIndex); err != nil {
		panic(err)
	}
	target.mu.Lock()
	fmt.Println("applied:", len(target.msgs))
	target.mu.Unlock()

	err = rec.Configure(reconciler.WithConcurrency(2), reconciler.WithName("other"))
	fmt.Println(errors.Is(err, reconciler.ErrInvalidConfig), err)
	err = rec.Configure(reconciler.WithRetry(time.Second, time.Millisecond))
	fmt.Println(errors.Is(err, reconciler.ErrInvalidConfig))
	// Output:
	// configured: <nil>
	// applied: 3
	// true reconciler.Configure: option 1: WithName cannot be changed on a registered reconciler; Configure takes WithConcurrency, WithRoundLimits, WithRefreshing, WithPruning, WithRetry, WithRetryJitter: invalid reconciler configuration
	// true
}

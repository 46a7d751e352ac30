package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"

	convergeindex "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// numbered is a target that gives each greeting a number, and must learn
// the numbers it gave before (read back from the target at start) so as
// not to give one twice: what a setup step is for.
type numbered struct {
	board
	mu      sync.Mutex
	next    int
	loaded  bool
	failing int // setup fails this many more times (the target not readable yet)
}

// setup reads the target before the first round: here the highest number
// given, from the board.
func (n *numbered) setup(context.Context, statedb.ReadTxn) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.failing > 0 {
		n.failing--
		return errors.New("board not readable yet")
	}
	n.next, n.loaded = 7, true // ... as read back from the target ...
	return nil
}

func (n *numbered) Update(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, g *Greeting) error {
	n.mu.Lock()
	if !n.loaded {
		n.mu.Unlock()
		panic("Update before setup") // never: setup gates every operation
	}
	n.next++
	g.Message = fmt.Sprintf("%s #%d", g.Message, n.next)
	n.mu.Unlock()
	return n.board.Update(ctx, txn, rev, g)
}

// A reconciler whose operations must read the target before their first
// write: setup fails twice, is retried with the backoff, and no Update
// runs until it succeeded.
func Example_setup() {
	target := &numbered{board: board{msgs: map[string]string{}}, failing: 2}
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
					(*Greeting).Clone, (*Greeting).SetStatus, (*Greeting).GetStatus, target, nil,
					reconciler.WithSetup(target.setup),
					reconciler.WithRetry(time.Millisecond, 10*time.Millisecond))
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
	wtxn.Commit()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := reconciler.WaitForReconciliation(ctx, db, greetings, statusIndex); err != nil {
		panic(err)
	}
	target.board.mu.Lock()
	defer target.board.mu.Unlock()
	fmt.Println("ada:", target.msgs["ada"])
	// Output:
	// ada: hello #8
}

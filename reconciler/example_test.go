package reconciler_test

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"

	convergeindex "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// Greeting is the desired state: a message for a name.
type Greeting struct {
	Name    string
	Message string
	Status  status.Status
}

func (g *Greeting) Clone() *Greeting                    { c := *g; return &c }
func (g *Greeting) GetStatus() status.Status            { return g.Status }
func (g *Greeting) SetStatus(s status.Status) *Greeting { g.Status = s; return g }
func (g *Greeting) TableHeader() []string               { return []string{"Name", "Message", "Status"} }
func (g *Greeting) TableRow() []string                  { return []string{g.Name, g.Message, g.Status.String()} }

var greetingName = statedb.Index[*Greeting, string]{
	Name:       "name",
	FromObject: func(g *Greeting) index.KeySet { return index.NewKeySet(index.String(g.Name)) },
	FromKey:    index.String,
	FromString: index.FromString,
	Unique:     true,
}

// board is the target system: a map guarded by a mutex.
type board struct {
	mu   sync.Mutex
	msgs map[string]string
}

func (b *board) Update(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, g *Greeting) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.msgs[g.Name] = g.Message
	return nil
}

func (b *board) Delete(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, g *Greeting) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.msgs, g.Name)
	return nil
}

func (b *board) Prune(_ context.Context, _ statedb.ReadTxn, want iter.Seq2[*Greeting, statedb.Revision]) error {
	keep := map[string]bool{}
	for g := range want {
		keep[g.Name] = true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	maps.DeleteFunc(b.msgs, func(name, _ string) bool { return !keep[name] })
	return nil
}

// Register a reconciler in a hive module, write desired state, and wait for
// it to reach the target.
func Example() {
	target := &board{msgs: map[string]string{}}
	statusIndex := convergeindex.NewStatusIndex((*Greeting).GetStatus)
	var (
		db        *statedb.DB
		greetings statedb.RWTable[*Greeting]
	)
	h := hive.New(
		statedb.Cell,
		job.Cell,
		cell.Provide(cell.NewSimpleHealth), // or the application's health provider
		cell.Module("greetings", "Greetings reconciler",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(db_ *statedb.DB, p reconciler.Params) (err error) {
				db = db_
				greetings, err = statedb.NewTable(db, "greetings", greetingName, statusIndex)
				if err != nil {
					return err
				}
				_, err = reconciler.Register(p, greetings,
					(*Greeting).Clone, (*Greeting).SetStatus, (*Greeting).GetStatus,
					target, nil)
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
	greetings.Insert(wtxn, &Greeting{Name: "bob", Message: "hi", Status: status.Pending()})
	wtxn.Commit()

	if err := reconciler.WaitForReconciliation(context.Background(), db, greetings, statusIndex); err != nil {
		panic(err)
	}
	for g := range greetings.All(db.ReadTxn()) {
		fmt.Println(g.Name, g.Status.Kind)
	}
	target.mu.Lock()
	defer target.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(target.msgs)) {
		fmt.Printf("%s: %s\n", name, target.msgs[name])
	}
	// Output:
	// ada Done
	// bob Done
	// ada: hello
	// bob: hi
}

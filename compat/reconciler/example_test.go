package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"
	"golang.org/x/time/rate"

	// The only line that changes when a program moves from the StateDB
	// reconciler to converge: it imported
	// "github.com/cilium/statedb/reconciler".
	"github.com/converge-go/converge/compat/reconciler"

	convergereconciler "github.com/converge-go/converge/reconciler"
)

// Note is the desired state: a text under a name. It is written as for the
// StateDB reconciler.
type Note struct {
	Name   string
	Text   string
	Status reconciler.Status
}

func (n *Note) Clone() *Note                        { c := *n; return &c }
func (n *Note) GetStatus() reconciler.Status        { return n.Status }
func (n *Note) SetStatus(s reconciler.Status) *Note { n.Status = s; return n }
func (n *Note) TableHeader() []string               { return []string{"Name", "Text", "Status"} }
func (n *Note) TableRow() []string                  { return []string{n.Name, n.Text, n.Status.String()} }

func newNotesTable(db *statedb.DB) (statedb.RWTable[*Note], error) {
	return statedb.NewTable(db, "notes", noteIndex)
}

var noteIndex = statedb.Index[*Note, string]{
	Name:       "name",
	FromObject: func(n *Note) index.KeySet { return index.NewKeySet(index.String(n.Name)) },
	FromKey:    index.String,
	Unique:     true,
}

// notebook is the target system: a map guarded by a mutex.
type notebook struct {
	mu    sync.Mutex
	notes map[string]string
}

func (b *notebook) Update(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, n *Note) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.notes[n.Name] = n.Text
	return nil
}

func (b *notebook) Delete(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, n *Note) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.notes, n.Name)
	return nil
}

func (b *notebook) Prune(_ context.Context, _ statedb.ReadTxn, want iter.Seq2[*Note, statedb.Revision]) error {
	keep := map[string]bool{}
	for n := range want {
		keep[n.Name] = true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	maps.DeleteFunc(b.notes, func(name, _ string) bool { return !keep[name] })
	return nil
}

// A program written for the StateDB reconciler, running on converge. Only
// the import path of package reconciler differs.
func Example() {
	target := &notebook{notes: map[string]string{}}
	var (
		db    *statedb.DB
		notes statedb.RWTable[*Note]
		r     reconciler.Reconciler[*Note]
	)
	h := hive.New(
		statedb.Cell,
		job.Cell,
		cell.Provide(cell.NewSimpleHealth),
		cell.Module("notes", "Notes reconciler",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(db_ *statedb.DB, params reconciler.Params) (err error) {
				db = db_
				if notes, err = newNotesTable(db); err != nil {
					return err
				}
				r, err = reconciler.Register(params, notes,
					(*Note).Clone, (*Note).SetStatus, (*Note).GetStatus,
					target, nil,
					reconciler.WithRetry(time.Second, time.Minute))
				return err
			}),
		),
	)
	log := slog.New(slog.DiscardHandler)
	if err := h.Start(log, context.Background()); err != nil {
		panic(err)
	}
	defer h.Stop(log, context.Background())

	wtxn := db.WriteTxn(notes)
	notes.Insert(wtxn, &Note{Name: "ada", Text: "hello", Status: reconciler.StatusPending()})
	notes.Insert(wtxn, &Note{Name: "bob", Text: "hi", Status: reconciler.StatusPending()})
	rev := notes.Revision(wtxn)
	wtxn.Commit()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, _, err := r.WaitUntilReconciled(ctx, rev); err != nil {
		panic(err)
	}
	for n := range notes.All(db.ReadTxn()) {
		fmt.Println(n.Name, n.Status.Kind == reconciler.StatusKindDone)
	}
	target.mu.Lock()
	defer target.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(target.notes)) {
		fmt.Printf("%s: %s\n", name, target.notes[name])
	}
	// Output:
	// ada true
	// bob true
	// ada: hello
	// bob: hi
}

// Register takes converge's own options too, since Option is converge's:
// here several workers next to the StateDB reconciler's options. The
// reconciler it returns is converge's, with Pause and Resume.
func ExampleRegister() {
	target := &notebook{notes: map[string]string{}}
	var (
		db    *statedb.DB
		notes statedb.RWTable[*Note]
		r     reconciler.Reconciler[*Note]
	)
	h := hive.New(
		statedb.Cell,
		job.Cell,
		cell.Provide(cell.NewSimpleHealth),
		cell.Module("notes", "Notes reconciler",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(db_ *statedb.DB, params reconciler.Params) (err error) {
				db = db_
				if notes, err = newNotesTable(db); err != nil {
					return err
				}
				r, err = reconciler.Register(params, notes,
					(*Note).Clone, (*Note).SetStatus, (*Note).GetStatus,
					target, nil,
					reconciler.WithName("notes"),
					reconciler.WithRefreshing(10*time.Minute, rate.NewLimiter(10, 1)),
					convergereconciler.WithConcurrency(4))
				return err
			}),
		),
	)
	log := slog.New(slog.DiscardHandler)
	if err := h.Start(log, context.Background()); err != nil {
		panic(err)
	}
	defer h.Stop(log, context.Background())

	// Hold the work back while writing, then let it go.
	full := r.(convergereconciler.Reconciler[*Note])
	full.Pause()
	wtxn := db.WriteTxn(notes)
	for _, name := range []string{"ada", "bob", "cy"} {
		notes.Insert(wtxn, &Note{Name: name, Text: "hi " + name, Status: reconciler.StatusPending()})
	}
	rev := notes.Revision(wtxn)
	wtxn.Commit()
	full.Resume()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, _, err := r.WaitUntilReconciled(ctx, rev); err != nil {
		panic(err)
	}
	target.mu.Lock()
	defer target.mu.Unlock()
	fmt.Println(len(target.notes), "notes:", target.notes["cy"])
	// Output:
	// 3 notes: hi cy
}

// deviceReconciler stands for an agent's reconciler on a platform where the
// target does not exist: it implements Reconciler with the StateDB
// reconciler's two methods and does nothing.
type deviceReconciler struct{}

func (deviceReconciler) Prune() {}

func (deviceReconciler) WaitUntilReconciled(_ context.Context, untilRevision statedb.Revision) (statedb.Revision, statedb.Revision, error) {
	return untilRevision, 0, nil
}

// An agent's own implementation of Reconciler, with the StateDB
// reconciler's method set, still satisfies it.
func ExampleReconciler() {
	var r reconciler.Reconciler[*Note] = deviceReconciler{}
	r.Prune()
	rev, low, err := r.WaitUntilReconciled(context.Background(), 42)
	fmt.Println(rev, low, err)
	// Output:
	// 42 0 <nil>
}

// An object reconciled by two reconcilers keeps a StatusSet.
func ExampleStatusSet() {
	set := reconciler.NewStatusSet()
	set = set.Set("routes", reconciler.StatusDone())
	set = set.Set("maps", reconciler.StatusError(errors.New("map full")))
	for name, s := range set.All() {
		fmt.Printf("%s: %s %q\n", name, s.Kind, s.GetError())
	}
	fmt.Println(set.IsDone())
	set = set.Pending()
	fmt.Println(set.Get("routes").Kind, set.Get("maps").Kind)
	// Output:
	// maps: Error "map full"
	// routes: Done ""
	// false
	// Pending Pending
}

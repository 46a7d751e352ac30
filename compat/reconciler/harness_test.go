package reconciler_test

import (
	"context"
	"errors"
	"iter"
	"sync"
	"testing"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/compat/reconciler"
)

// item is the object the tests reconcile; its status is this package's
// Status, as in a program written for the StateDB reconciler.
type item struct {
	ID     string
	Status reconciler.Status
}

func (it *item) clone() *item { c := *it; return &c }

func (it *item) getStatus() reconciler.Status { return it.Status }

func (it *item) setStatus(s reconciler.Status) *item { it.Status = s; return it }

func (it *item) TableHeader() []string { return []string{"ID", "Status"} }

func (it *item) TableRow() []string { return []string{it.ID, it.Status.String()} }

var itemID = statedb.Index[*item, string]{
	Name:       "id",
	FromObject: func(it *item) index.KeySet { return index.NewKeySet(index.String(it.ID)) },
	FromKey:    index.String,
	Unique:     true,
}

// call is one operation the target was asked for.
type call struct {
	op   string // "update", "delete" or "prune"
	id   string // the object's ID; for a prune, empty
	kind reconciler.StatusKind
	at   time.Time
}

// recorder is a target that records every call, and fails updates of the
// IDs in failing.
type recorder struct {
	mu      sync.Mutex
	calls   []call
	failing map[string]bool
}

func newRecorder(failing ...string) *recorder {
	r := &recorder{failing: map[string]bool{}}
	for _, id := range failing {
		r.failing[id] = true
	}
	return r
}

var errFailing = errors.New("failing on purpose")

func (r *recorder) add(c call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
}

func (r *recorder) Update(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, it *item) error {
	r.add(call{op: "update", id: it.ID, kind: it.Status.Kind, at: time.Now()})
	if r.failing[it.ID] {
		return errFailing
	}
	return nil
}

func (r *recorder) Delete(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, it *item) error {
	r.add(call{op: "delete", id: it.ID, at: time.Now()})
	return nil
}

func (r *recorder) Prune(context.Context, statedb.ReadTxn, iter.Seq2[*item, statedb.Revision]) error {
	r.add(call{op: "prune", at: time.Now()})
	return nil
}

// of returns the calls of operation op, for id if id is not empty.
func (r *recorder) of(op, id string) []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []call
	for _, c := range r.calls {
		if c.op == op && (id == "" || c.id == id) {
			out = append(out, c)
		}
	}
	return out
}

// fixture is a started hive with an items table and a reconciler
// registered through this package.
type fixture struct {
	hive  *hive.Hive
	db    *statedb.DB
	table statedb.RWTable[*item]
	rec   reconciler.Reconciler[*item]
	tgt   *recorder
}

// start starts a hive whose reconciler is registered with opts and reports
// to tgt. The hive is stopped when the test ends.
func start(t *testing.T, tgt *recorder, opts ...reconciler.Option) *fixture {
	t.Helper()
	f := &fixture{tgt: tgt}
	f.hive = hive.New(
		statedb.Cell,
		job.Cell,
		cell.Provide(cell.NewSimpleHealth),
		cell.Module("test", "Test module",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(db *statedb.DB, p reconciler.Params) (err error) {
				f.db = db
				if f.table, err = statedb.NewTable(db, "items", itemID); err != nil {
					return err
				}
				f.rec, err = reconciler.Register(p, f.table, (*item).clone, (*item).setStatus, (*item).getStatus, tgt, nil, opts...)
				return err
			}),
		),
	)
	log := hivetest.Logger(t)
	require.NoError(t, f.hive.Start(log, context.Background()))
	t.Cleanup(func() { require.NoError(t, f.hive.Stop(log, context.Background())) })
	return f
}

// insert writes the items with a Pending status in one transaction and
// returns its revision.
func (f *fixture) insert(t *testing.T, ids ...string) statedb.Revision {
	t.Helper()
	wtxn := f.db.WriteTxn(f.table)
	for _, id := range ids {
		_, _, err := f.table.Insert(wtxn, &item{ID: id, Status: reconciler.StatusPending()})
		require.NoError(t, err)
	}
	rev := f.table.Revision(wtxn)
	wtxn.Commit()
	return rev
}

// kinds returns the status kind of every item, by ID.
func (f *fixture) kinds() map[string]reconciler.StatusKind {
	out := map[string]reconciler.StatusKind{}
	for it := range f.table.All(f.db.ReadTxn()) {
		out[it.ID] = it.Status.Kind
	}
	return out
}

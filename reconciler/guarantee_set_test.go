package reconciler_test

// Claim 4 with two reconcilers sharing objects through a status.Set: an
// object put back as it was after its delete is applied again by both.

import (
	"context"
	"fmt"
	"iter"
	"testing"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

type o30SetObj struct {
	ID       string
	Value    string
	Statuses status.Set
}

func (o *o30SetObj) TableHeader() []string { return []string{"ID", "Value", "Statuses"} }
func (o *o30SetObj) TableRow() []string    { return []string{o.ID, o.Value, o.Statuses.String()} }

var o30SetByID = statedb.Index[*o30SetObj, string]{
	Name:       "id",
	FromObject: func(o *o30SetObj) index.KeySet { return index.NewKeySet(index.String(o.ID)) },
	FromKey:    index.String,
	FromString: index.FromString,
	Unique:     true,
}

// o30SetOps adapts an o30Target to o30SetObj.
type o30SetOps struct{ t *o30Target }

func (s o30SetOps) conv(o *o30SetObj) *o30Obj { return &o30Obj{ID: o.ID, Value: o.Value} }
func (s o30SetOps) Update(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, o *o30SetObj) error {
	return s.t.Update(ctx, txn, rev, s.conv(o))
}
func (s o30SetOps) Delete(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, o *o30SetObj) error {
	return s.t.Delete(ctx, txn, rev, s.conv(o))
}
func (s o30SetOps) Prune(ctx context.Context, txn statedb.ReadTxn, objs iter.Seq2[*o30SetObj, statedb.Revision]) error {
	keep := map[string]bool{}
	for o := range objs {
		keep[o.ID] = true
	}
	s.t.mu.Lock()
	for id := range s.t.data {
		if !keep[id] {
			delete(s.t.data, id)
		}
	}
	s.t.prunes++
	s.t.mu.Unlock()
	s.t.notify(s.t.pruneCh)
	return nil
}

func TestGuaranteeSetPutBack(t *testing.T) {
	names := []string{"a", "b"}
	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			var (
				db   *statedb.DB
				tbl  statedb.RWTable[*o30SetObj]
				recs = map[string]reconciler.Reconciler[*o30SetObj]{}
			)
			tgts := map[string]*o30Target{"a": newO30Target(), "b": newO30Target()}
			h := hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth),
				cell.Module("o30set", "outsider set module",
					cell.Provide(job.Registry.NewGroup),
					cell.Invoke(func(d *statedb.DB, p reconciler.Params) error {
						db = d
						var err error
						tbl, err = statedb.NewTable(d, "o30set", o30SetByID)
						if err != nil {
							return err
						}
						for _, n := range names {
							get := func(o *o30SetObj) status.Status { return o.Statuses.Get(n) }
							set := func(o *o30SetObj, s status.Status) *o30SetObj { o.Statuses = o.Statuses.Set(n, s); return o }
							clone := func(o *o30SetObj) *o30SetObj { c := *o; return &c }
							recs[n], err = reconciler.Register(p, tbl, clone, set, get,
								reconciler.Operations[*o30SetObj](o30SetOps{tgts[n]}), nil,
								reconciler.WithName(n), reconciler.WithConcurrency(workers), reconciler.WithPruning(0))
							if err != nil {
								return err
							}
						}
						return nil
					})))
			log := hivetest.Logger(t)
			require.NoError(t, h.Start(log, context.Background()))
			t.Cleanup(func() { _ = h.Stop(log, context.Background()) })
			put := func(o *o30SetObj) statedb.Revision {
				w := db.WriteTxn(tbl)
				_, _, err := tbl.Insert(w, o)
				require.NoError(t, err)
				rev := tbl.Revision(w)
				w.Commit()
				return rev
			}
			wait := func(rev statedb.Revision) {
				for _, n := range names {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					_, _, err := recs[n].WaitUntilReconciled(ctx, rev)
					cancel()
					require.NoError(t, err)
				}
			}
			for i := range 10 {
				id := fmt.Sprintf("k%d", i)
				wait(put(&o30SetObj{ID: id, Value: "1", Statuses: status.NewSet().Pending(names...)}))
				wait(put(&o30SetObj{ID: "marker", Value: fmt.Sprint(i), Statuses: status.NewSet().Pending(names...)}))
				w := db.WriteTxn(tbl)
				was, _, _ := tbl.Get(w, o30SetByID.Query(id))
				_, _, err := tbl.Delete(w, was)
				require.NoError(t, err)
				w.Commit()
				for _, n := range names {
					require.Equal(t, status.KindDone, was.Statuses.Get(n).Kind)
				}
				switch i % 3 {
				case 0: // after both read the delete
					wait(put(&o30SetObj{ID: "marker", Value: "x", Statuses: status.NewSet().Pending(names...)}))
				case 1: // after a prune of a only
					before := tgts["a"].pruneCount()
					recs["a"].Prune()
					o30WaitPrunes(t, tgts["a"], before+1)
				case 2: // at once
				}
				put(was)
				wait(put(&o30SetObj{ID: "marker", Value: fmt.Sprint(i), Statuses: status.NewSet().Pending(names...)}))
				for _, n := range names {
					v, ok := tgts[n].get(id)
					require.True(t, ok && v == "1", "reconciler %s: %s put back (case %d) not applied: %q %v", n, id, i%3, v, ok)
				}
			}
		})
	}
}

package reconciler_test

import (
	"context"
	"fmt"
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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// keyless is an object whose primary index gives it no key once Gone is
// set: StateDB v0.9 lets a primary indexer say so, and then stores nothing.
type keyless struct {
	ID     string
	Gone   bool
	Status status.Status
}

func (o *keyless) TableHeader() []string { return []string{"ID", "Status"} }
func (o *keyless) TableRow() []string    { return []string{o.ID, o.Status.String()} }

var keylessID = statedb.Index[*keyless, string]{
	Name: "id",
	FromObject: func(o *keyless) index.KeySet {
		if o.Gone {
			return index.EmptyKeySet
		}
		return index.NewKeySet(index.String(o.ID))
	},
	FromKey:    index.String,
	FromString: index.FromString,
	Unique:     true,
}

type keylessOps struct {
	mu      sync.Mutex
	applied map[string]bool
}

func (o *keylessOps) Update(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, obj *keyless) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.applied[obj.ID] = true
	if obj.ID == "bad" {
		obj.Gone = true // a buggy Update changes what the primary index reads
	}
	return nil
}

func (o *keylessOps) Delete(context.Context, statedb.ReadTxn, statedb.Revision, *keyless) error {
	return nil
}

func (o *keylessOps) Prune(context.Context, statedb.ReadTxn, iter.Seq2[*keyless, statedb.Revision]) error {
	return nil
}

// An Update that leaves its object without a primary key gets an Error
// status wrapping ErrNoPrimaryKey on the object as it was, and is retried;
// the other objects of the round are reconciled as usual. A dependency mark
// whose setStatus drops the key leaves that object alone, never panics, and
// still marks the others.
func TestObjectWithoutPrimaryKey(t *testing.T) {
	for _, workers := range []int{1, 3} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			ops := &keylessOps{applied: map[string]bool{}}
			var (
				db    *statedb.DB
				table statedb.RWTable[*keyless]
				deps  statedb.RWTable[*keyless]
			)
			dropKeyOf := "" // setStatus drops the key of this object
			var mu sync.Mutex
			setStatus := func(o *keyless, s status.Status) *keyless {
				mu.Lock()
				defer mu.Unlock()
				o.Status = s
				if o.ID == dropKeyOf && s.Kind == status.KindRefreshing {
					o.Gone = true
				}
				return o
			}
			h := hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth),
				cell.Module("test", "test",
					cell.Provide(job.Registry.NewGroup),
					cell.Invoke(func(d *statedb.DB, p reconciler.Params) error {
						db = d
						var err error
						if table, err = statedb.NewTable(d, "keyless", keylessID); err != nil {
							return err
						}
						if deps, err = statedb.NewTable(d, "keyless-deps", keylessID); err != nil {
							return err
						}
						_, err = reconciler.Register(p, table,
							func(o *keyless) *keyless { c := *o; return &c }, setStatus,
							func(o *keyless) status.Status { return o.Status },
							ops, nil,
							reconciler.WithConcurrency(workers),
							reconciler.WithRetry(time.Hour, time.Hour),
							reconciler.WithDependency(deps, func(d *keyless, _ bool) []statedb.Query[*keyless] {
								return []statedb.Query[*keyless]{keylessID.Query(d.ID)}
							}))
						return err
					})))
			require.NoError(t, h.Start(hivetest.Logger(t), context.Background()))
			t.Cleanup(func() { require.NoError(t, h.Stop(hivetest.Logger(t), context.Background())) })

			wtxn := db.WriteTxn(table)
			for _, id := range []string{"a", "bad", "b"} {
				_, _, err := table.Insert(wtxn, &keyless{ID: id, Status: status.Pending()})
				require.NoError(t, err)
			}
			wtxn.Commit()

			want := map[string]status.Kind{"a": status.KindDone, "bad": status.KindError, "b": status.KindDone}
			got := waitKeyless(t, db, table, want)
			assert.Contains(t, got["bad"].Status.Error, reconciler.ErrNoPrimaryKey.Error())
			assert.False(t, got["bad"].Gone, "the object is stored as it was before Update")

			// A dependency mark of a and b, whose setStatus drops a's key.
			mu.Lock()
			dropKeyOf = "a"
			mu.Unlock()
			wtxn = db.WriteTxn(deps)
			for _, id := range []string{"a", "b"} {
				_, _, err := deps.Insert(wtxn, &keyless{ID: id})
				require.NoError(t, err)
			}
			wtxn.Commit()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for {
				obj, _, watch, found := table.GetWatch(db.ReadTxn(), keylessID.Query("b"))
				require.True(t, found)
				if obj.Status.Kind == status.KindDone && obj.Status.ID() != got["b"].Status.ID() {
					break // b was marked and reconciled again
				}
				select {
				case <-watch:
				case <-ctx.Done():
					t.Fatalf("b was not reconciled again after the mark: %+v", obj.Status)
				}
			}
			a, _, found := table.Get(db.ReadTxn(), keylessID.Query("a"))
			require.True(t, found, "a is still in the table")
			assert.Equal(t, status.KindDone, a.Status.Kind, "a's mark was left out")
		})
	}
}

// waitKeyless waits until the objects have the kinds in want.
func waitKeyless(t *testing.T, db *statedb.DB, table statedb.Table[*keyless], want map[string]status.Kind) map[string]*keyless {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		txn := db.ReadTxn()
		got := map[string]*keyless{}
		ok := true
		for id, kind := range want {
			obj, _, found := table.Get(txn, keylessID.Query(id))
			if !found || obj.Status.Kind != kind {
				ok = false
				break
			}
			got[id] = obj
		}
		if ok {
			return got
		}
		_, watch := table.AllWatch(txn)
		select {
		case <-watch:
		case <-ctx.Done():
			t.Fatalf("objects did not reach %v", want)
		}
	}
}

// A refresh mark whose setStatus drops the key leaves that object alone
// and still refreshes the others.
func TestRefreshMarkWithoutPrimaryKey(t *testing.T) {
	ops := &keylessOps{applied: map[string]bool{}}
	var (
		db    *statedb.DB
		table statedb.RWTable[*keyless]
	)
	setStatus := func(o *keyless, s status.Status) *keyless {
		o.Status = s
		if o.ID == "a" && s.Kind == status.KindRefreshing {
			o.Gone = true
		}
		return o
	}
	h := hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth),
		cell.Module("test", "test",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(d *statedb.DB, p reconciler.Params) error {
				db = d
				var err error
				if table, err = statedb.NewTable(d, "keyless", keylessID); err != nil {
					return err
				}
				_, err = reconciler.Register(p, table,
					func(o *keyless) *keyless { c := *o; return &c }, setStatus,
					func(o *keyless) status.Status { return o.Status },
					ops, nil, reconciler.WithRefreshing(10*time.Millisecond, nil))
				return err
			})))
	require.NoError(t, h.Start(hivetest.Logger(t), context.Background()))
	t.Cleanup(func() { require.NoError(t, h.Stop(hivetest.Logger(t), context.Background())) })

	wtxn := db.WriteTxn(table)
	for _, id := range []string{"a", "b"} {
		_, _, err := table.Insert(wtxn, &keyless{ID: id, Status: status.Pending()})
		require.NoError(t, err)
	}
	wtxn.Commit()
	first := waitKeyless(t, db, table, map[string]status.Kind{"a": status.KindDone, "b": status.KindDone})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for refreshes := 0; refreshes < 3; {
		obj, _, watch, found := table.GetWatch(db.ReadTxn(), keylessID.Query("b"))
		require.True(t, found)
		if obj.Status.Kind == status.KindDone && obj.Status.ID() != first["b"].Status.ID() {
			refreshes++
			first["b"] = obj
			continue
		}
		select {
		case <-watch:
		case <-ctx.Done():
			t.Fatalf("b was not refreshed: %+v", obj.Status)
		}
	}
	a, _, found := table.Get(db.ReadTxn(), keylessID.Query("a"))
	require.True(t, found, "a is still in the table")
	assert.Equal(t, first["a"].Status.ID(), a.Status.ID(), "a was left alone")
}

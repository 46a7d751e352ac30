// Package worktest is the small table the tests of the stages (packages
// collect and commit) run on: objects of type Obj keyed by ID, each with
// a status, and the work.Objects and key queue of them.
package worktest

import (
	"fmt"
	"testing"

	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"

	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/reconciler/internal/work"
	"github.com/converge-go/converge/status"
)

// Obj is an object of the table: its key and its status.
type Obj struct {
	ID uint64
	St status.Status
}

func (o *Obj) TableHeader() []string { return []string{"ID", "Status"} }
func (o *Obj) TableRow() []string    { return []string{fmt.Sprint(o.ID), o.St.String()} }

// ByID is the table's primary index.
var ByID = statedb.Index[*Obj, uint64]{
	Name:       "id",
	FromObject: func(o *Obj) index.KeySet { return index.NewKeySet(index.Uint64(o.ID)) },
	FromKey:    index.Uint64,
	Unique:     true,
}

// Table starts a database with a table of Obj, stopped when tb ends, and
// returns them with the work.Objects of the table and an empty key queue.
func Table(tb testing.TB) (*statedb.DB, statedb.RWTable[*Obj], *work.Objects[*Obj], *keyqueue.Queue[*Obj]) {
	tb.Helper()
	db := statedb.New()
	if err := db.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Stop() })
	table, err := statedb.NewTable(db, "objs", ByID)
	if err != nil {
		tb.Fatal(err)
	}
	objs := &work.Objects[*Obj]{
		Table: table, Primary: table.PrimaryIndexer(),
		Clone:     func(o *Obj) *Obj { c := *o; return &c },
		SetStatus: func(o *Obj, st status.Status) *Obj { o.St = st; return o },
		GetStatus: func(o *Obj) status.Status { return o.St },
	}
	return db, table, objs, keyqueue.New[*Obj](func(k string) string { return k })
}

// Command pathcount measures which of converge's functions one user action
// runs, by coverage: it starts a hive with one reconciler (single
// operations, the defaults), waits until the reconciler is idle, clears
// the coverage counters, does one thing, waits for its end and writes the
// counters. The paths are issue 46's measures:
//
//	insert  one object inserted Pending, until the reconciler wrote it Done
//	prune   Reconciler.Prune() until the reconcilers table reports the prune
//
// Build it with coverage of the packages to count (and of itself, or
// the runtime refuses to clear counters), run it with GOCOVERDIR set (where
// the runtime writes at exit: not read), and read the functions the path
// ran, in the directory -o, with go tool covdata:
//
//	go build -cover -covermode=atomic -o /tmp/pathcount \
//	    -coverpkg=github.com/converge-go/converge/reconciler/...,github.com/converge-go/converge/internal/pathcount ./internal/pathcount
//	mkdir -p /tmp/pc-exit /tmp/pc-insert && GOCOVERDIR=/tmp/pc-exit /tmp/pathcount -path insert -o /tmp/pc-insert
//	go tool covdata func -i /tmp/pc-insert -pkg github.com/converge-go/converge/reconciler/... | awk '$NF != "0.0%"'
//
// The hive, StateDB and the reconciler's own goroutines run meanwhile:
// anything they do in that window counts, as it would for a user. It
// writes nothing but the counters.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"runtime/coverage"
	"sync/atomic"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

type object struct {
	Name   string
	Status status.Status
}

func (o *object) clone() *object                    { c := *o; return &c }
func (o *object) getStatus() status.Status          { return o.Status }
func (o *object) setStatus(s status.Status) *object { o.Status = s; return o }
func (o *object) TableHeader() []string             { return []string{"Name", "Status"} }
func (o *object) TableRow() []string                { return []string{o.Name, o.Status.String()} }
func (o *object) String() string                    { return o.Name }
func nameKey(o *object) index.KeySet                { return index.NewKeySet(index.String(o.Name)) }

var byName = statedb.Index[*object, string]{Name: "name", FromObject: nameKey, FromKey: index.String, FromString: index.FromString, Unique: true}

type ops struct{ prunes atomic.Int64 }

func (*ops) Update(context.Context, statedb.ReadTxn, statedb.Revision, *object) error { return nil }
func (*ops) Delete(context.Context, statedb.ReadTxn, statedb.Revision, *object) error { return nil }
func (o *ops) Prune(context.Context, statedb.ReadTxn, iter.Seq2[*object, statedb.Revision]) error {
	o.prunes.Add(1)
	return nil
}

func main() {
	path := flag.String("path", "insert", "the path to measure: insert or prune")
	out := flag.String("o", "", "the directory to write the counters of the path into (it must exist)")
	flag.Parse()
	if err := run(*path, *out); err != nil {
		fmt.Fprintln(os.Stderr, "pathcount:", err)
		os.Exit(1)
	}
}

func run(path, out string) error {
	if path != "insert" && path != "prune" {
		return fmt.Errorf("-path: want insert or prune, got %q", path)
	}
	if out == "" {
		return errors.New("-o: give the directory for the path's counters")
	}
	if fi, err := os.Stat(out); err != nil || !fi.IsDir() {
		return fmt.Errorf("-o %s: not a directory", out)
	}
	var (
		db    *statedb.DB
		table statedb.RWTable[*object]
		rec   reconciler.Reconciler[*object]
		info  statedb.Table[*tables.Info]
	)
	target := &ops{}
	h := hive.New(
		statedb.Cell,
		job.Cell,
		cell.Provide(cell.NewSimpleHealth),
		tables.Cell,
		cell.Module("pathcount", "One reconciler measured",
			cell.ProvidePrivate(func(db *statedb.DB) (statedb.RWTable[*object], error) {
				return statedb.NewTable(db, "objects", byName)
			}),
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(d *statedb.DB, t statedb.RWTable[*object], tb *tables.Tables, p reconciler.Params) error {
				db, table, info = d, t, tb.Reconcilers()
				var err error
				rec, err = reconciler.Register(p, t, (*object).clone, (*object).setStatus, (*object).getStatus, target, nil)
				return err
			}),
		),
	)
	log := slog.New(slog.DiscardHandler)
	if err := h.Start(log, context.Background()); err != nil {
		return err
	}
	defer h.Stop(log, context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Idle first: an object written and Done, the first prune reported.
	txn := db.WriteTxn(table)
	table.Insert(txn, &object{Name: "warm", Status: status.Pending()})
	rev := table.Revision(txn)
	txn.Commit()
	if _, _, err := rec.WaitUntilReconciled(ctx, rev); err != nil {
		return err
	}
	lastPrune := func() time.Time {
		var t time.Time
		for row := range info.All(db.ReadTxn()) {
			t = row.LastPrune
		}
		return t
	}
	for lastPrune().IsZero() { // the first prune, made once the table is initialized
		_, watch := info.AllWatch(db.ReadTxn())
		if !lastPrune().IsZero() {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the first prune: %w", ctx.Err())
		case <-watch:
		}
	}
	before := lastPrune()
	if err := coverage.ClearCounters(); err != nil {
		return err
	}
	switch path {
	case "insert":
		txn := db.WriteTxn(table)
		table.Insert(txn, &object{Name: "one", Status: status.Pending()})
		rev := table.Revision(txn)
		txn.Commit()
		if _, _, err := rec.WaitUntilReconciled(ctx, rev); err != nil {
			return err
		}
	case "prune":
		rec.Prune()
		for {
			rtxn := db.ReadTxn()
			_, watch := info.AllWatch(rtxn)
			if lastPrune() != before && target.prunes.Load() > 0 {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for the prune: %w", ctx.Err())
			case <-watch:
			}
		}
	}
	// The counters now, not at exit: the hive's stop would count.
	if err := coverage.WriteMetaDir(out); err != nil {
		return err
	}
	return coverage.WriteCountersDir(out)
}

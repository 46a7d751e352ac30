package main

import (
	"context"
	"fmt"
	"iter"
	"strconv"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"
	upstream "github.com/cilium/statedb/reconciler"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// setObject is the row of the shared-status workload: two reconcilers, "a"
// and "b", keep their statuses in one set per object. As with object, it
// carries one set per library and a run uses only its library's.
type setObject struct {
	id   uint64
	conv status.Set
	up   upstream.StatusSet
}

func (o *setObject) clone() *setObject {
	c := *o
	return &c
}

func (o *setObject) TableHeader() []string { return []string{"ID", "Converge", "Upstream"} }
func (o *setObject) TableRow() []string {
	return []string{strconv.FormatUint(o.id, 10), o.conv.String(), o.up.String()}
}

var setIDIndex = statedb.Index[*setObject, uint64]{
	Name: "id",
	FromObject: func(o *setObject) index.KeySet {
		return index.NewKeySet(index.Uint64(o.id))
	},
	FromKey: index.Uint64,
	Unique:  true,
}

// setOps are no-op operations for both libraries.
type setOps struct{}

func (setOps) Update(context.Context, statedb.ReadTxn, statedb.Revision, *setObject) error {
	return nil
}
func (setOps) Delete(context.Context, statedb.ReadTxn, statedb.Revision, *setObject) error {
	return nil
}
func (setOps) Prune(context.Context, statedb.ReadTxn, iter.Seq2[*setObject, statedb.Revision]) error {
	return nil
}

// sharedEnv is a started hive with one table of setObjects and two
// reconcilers of one library on it, each in its own module.
type sharedEnv struct {
	h    *hive.Hive
	db   *statedb.DB
	tbl  statedb.RWTable[*setObject]
	wait []func(context.Context, statedb.Revision) error
}

var sharedNames = []string{"a", "b"}

func startShared(ctx context.Context, im impl) (*sharedEnv, error) {
	e := &sharedEnv{}
	cells := []cell.Cell{
		cell.SimpleHealthCell, statedb.Cell, job.Cell,
		cell.Invoke(func(db *statedb.DB) error {
			tbl, err := statedb.NewTable(db, "objects", setIDIndex)
			e.db, e.tbl = db, tbl
			return err
		}),
	}
	for _, name := range sharedNames {
		cells = append(cells, cell.Module("bench-"+name, "Benchmark reconciler "+name,
			cell.ProvidePrivate(job.Registry.NewGroup),
			cell.Invoke(func(p reconciler.Params, up upstream.Params) error {
				return e.register(im, name, p, up)
			}),
		))
	}
	e.h = hive.New(cells...)
	if err := e.h.Start(quietLog, ctx); err != nil {
		return nil, fmt.Errorf("starting %s hive: %w", im, err)
	}
	return e, nil
}

func (e *sharedEnv) register(im impl, name string, p reconciler.Params, up upstream.Params) error {
	switch im {
	case implConverge:
		r, err := reconciler.Register(p, e.tbl, (*setObject).clone,
			func(o *setObject, s status.Status) *setObject { o.conv = o.conv.Set(name, s); return o },
			func(o *setObject) status.Status { return o.conv.Get(name) },
			setOps{}, nil, reconciler.WithName(name), reconciler.WithPruning(0))
		if err != nil {
			return err
		}
		e.wait = append(e.wait, func(ctx context.Context, rev statedb.Revision) error {
			_, _, err := r.WaitUntilReconciled(ctx, rev)
			return err
		})
	case implUpstream:
		r, err := upstream.Register(up, e.tbl, (*setObject).clone,
			func(o *setObject, s upstream.Status) *setObject { o.up = o.up.Set(name, s); return o },
			func(o *setObject) upstream.Status { return o.up.Get(name) },
			setOps{}, nil, upstream.WithoutPruning())
		if err != nil {
			return err
		}
		e.wait = append(e.wait, func(ctx context.Context, rev statedb.Revision) error {
			_, _, err := r.WaitUntilReconciled(ctx, rev)
			return err
		})
	default:
		return fmt.Errorf("the shared-status workload has no %s run", im)
	}
	return nil
}

// sharedStatus inserts cfg.objects objects with an empty status set, 1000
// per transaction, while two reconcilers run, and measures until both have
// read every write (their own and each other's status writes included):
// objects per second, and nanoseconds per object.
func sharedStatus(ctx context.Context, cfg config, im impl) (measurement, error) {
	m := newMeasurement()
	settle()
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	e, err := startShared(ctx, im)
	if err != nil {
		return m, err
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		_ = e.h.Stop(quietLog, sctx)
	}()
	t0 := time.Now()
	for id := 0; id < cfg.objects; {
		wtxn := e.db.WriteTxn(e.tbl)
		for end := min(id+cfg.txnSize, cfg.objects); id < end; id++ {
			o := &setObject{id: uint64(id)}
			if im == implUpstream {
				o.up = upstream.NewStatusSet()
			} else {
				o.conv = status.NewSet()
			}
			e.tbl.Insert(wtxn, o)
		}
		wtxn.Commit()
	}
	// Twice: the first wait covers the inserts, the second the status
	// writes each reconciler made meanwhile, which the other must read.
	for range 2 {
		rev := e.tbl.Revision(e.db.ReadTxn())
		for _, wait := range e.wait {
			if err := wait(ctx, rev); err != nil {
				return m, fmt.Errorf("%s: %w", im, err)
			}
		}
	}
	d := time.Since(t0)
	m.set("obj/s", float64(cfg.objects)/d.Seconds())
	m.set("ns/obj", float64(d.Nanoseconds())/float64(cfg.objects))
	return m, e.checkAllDone(im, cfg.objects)
}

func (e *sharedEnv) checkAllDone(im impl, n int) error {
	txn := e.db.ReadTxn()
	if got := e.tbl.NumObjects(txn); got != n {
		return fmt.Errorf("%s: table holds %d objects, want %d", im, got, n)
	}
	for o := range e.tbl.All(txn) {
		for _, name := range sharedNames {
			done := o.conv.Get(name).Kind == status.KindDone
			if im == implUpstream {
				done = o.up.Get(name).Kind == upstream.StatusKindDone
			}
			if !done {
				return fmt.Errorf("%s: object %d not Done for %q: converge %s, upstream %s", im, o.id, name, o.conv, o.up)
			}
		}
	}
	return nil
}

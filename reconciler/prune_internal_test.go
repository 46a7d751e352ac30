package reconciler

import (
	"context"
	"iter"
	"sync"
	"testing"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/status"
)

// gatedBenchOps is a target of benchObj ids. The update of object held
// waits for gate to close; entered receives once it has started.
type gatedBenchOps struct {
	held    uint64
	gate    chan struct{}
	entered chan struct{}
	mu      sync.Mutex
	data    map[uint64]bool
}

func (g *gatedBenchOps) Update(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, o *benchObj) error {
	if o.id == g.held {
		g.entered <- struct{}{}
		<-g.gate
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.data[o.id] = true
	return nil
}

func (g *gatedBenchOps) Delete(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, o *benchObj) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.data, o.id)
	return nil
}

func (g *gatedBenchOps) Prune(_ context.Context, _ statedb.ReadTxn, objs iter.Seq2[*benchObj, statedb.Revision]) error {
	want := map[uint64]bool{}
	for o := range objs {
		want[o.id] = true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for id := range g.data {
		if !want[id] {
			delete(g.data, id)
		}
	}
	return nil
}

func (g *gatedBenchOps) has(id uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.data[id]
}

// A prune runs after the commit of its round, and must see what that
// commit wrote. With workers an update may finish in a round whose snapshot
// no longer holds its object (deleted while the update ran) while the
// object has meanwhile been written back as that very version: the commit
// marks it Done, so a prune working from the round's snapshot would remove
// it from the target for good.
func TestPruneSeesWhatTheCommitBeforeItWrote(t *testing.T) {
	g := &gatedBenchOps{held: 1, gate: make(chan struct{}), entered: make(chan struct{}, 1), data: map[uint64]bool{}}
	db, tbl := newBenchTable(t)
	reg, err := Register(Params{DB: db, JobGroup: benchGroup{}}, tbl,
		(*benchObj).clone, benchSetStatus, benchGetStatus, g, nil, WithConcurrency(2))
	require.NoError(t, err)
	r := reg.(*reconciler[*benchObj])
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	health, _ := cell.NewSimpleHealth()
	l := &loop[*benchObj]{r: r, changes: r.changes, op: newOperator(ctx, r),
		prune: newPruneSchedule(r), health: healthReporter{health: health}}
	defer l.prune.stop()
	defer l.op.stop()
	l.prune.setInitialized()
	write := func(o *benchObj) {
		wtxn := db.WriteTxn(tbl)
		_, _, err := tbl.Insert(wtxn, o)
		require.NoError(t, err)
		wtxn.Commit()
	}

	// Object 1 is written and its update starts, held.
	v1 := &benchObj{id: 1, st: status.Pending()}
	write(v1.clone())
	l.round(ctx, false)
	<-g.entered

	// It is deleted; the delete is parked behind the update in flight.
	wtxn := db.WriteTxn(tbl)
	_, _, err = tbl.Delete(wtxn, v1)
	require.NoError(t, err)
	wtxn.Commit()
	l.round(ctx, false)

	// The update finishes.
	select {
	case <-l.op.finished():
	default:
	}
	close(g.gate)
	<-l.op.finished()

	// The next round's snapshot has no object 1. While it commits the
	// update, object 1 is written back as it was, status included; the
	// round prunes too.
	var once sync.Once
	r.setStatus = func(o *benchObj, st status.Status) *benchObj {
		if o.id == 1 {
			once.Do(func() { write(v1.clone()) })
		}
		return benchSetStatus(o, st)
	}
	l.prune.request()
	l.round(ctx, false)
	r.setStatus = benchSetStatus

	for range 3 {
		l.round(ctx, false)
	}
	obj, _, found := tbl.Get(db.ReadTxn(), benchIDIndex.Query(1))
	require.True(t, found)
	assert.Equal(t, status.KindDone, obj.st.Kind, "status of object 1")
	assert.True(t, g.has(1), "the target lost object 1, which the table holds as Done")
}

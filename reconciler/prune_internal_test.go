package reconciler

import (
	"context"
	"iter"
	"sync"
	"testing"
	"time"

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

func (g *gatedBenchOps) Update(ctx context.Context, _ statedb.ReadTxn, _ statedb.Revision, o *benchObj) error {
	if o.id == g.held {
		g.entered <- struct{}{}
		select {
		case <-g.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
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
	err = r.collect.Open()
	require.NoError(t, err)
	defer r.collect.Close()
	r.resetRun(health)
	l := &loop[*benchObj]{r: r, exec: newExecutor(ctx, r), prune: newPruneSchedule(r)}
	defer l.prune.Stop()
	defer l.exec.Stop()
	l.prune.Initialized(nil, nil)
	// No prune until the test asks for one: the first round would close
	// the gate for it, and a worker taking object 1's update meanwhile
	// would hand it back unstarted, for a round this test does not run.
	l.prune.Withdraw()
	within := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(20 * time.Second):
			t.Fatalf("timed out waiting for %s", what)
		}
	}
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
	within(g.entered, "the update of object 1 to start")

	// It is deleted; the delete is parked behind the update in flight.
	wtxn := db.WriteTxn(tbl)
	_, _, err = tbl.Delete(wtxn, v1)
	require.NoError(t, err)
	wtxn.Commit()
	l.round(ctx, false)

	// The update finishes.
	select {
	case <-l.exec.Finished():
	default:
	}
	close(g.gate)
	within(l.exec.Finished(), "the update of object 1 to finish")

	// The next round's snapshot has no object 1. While it commits the
	// update, object 1 is written back as it was, status included; the
	// round prunes too.
	var once sync.Once
	r.objects.SetStatus = func(o *benchObj, st status.Status) *benchObj {
		if o.id == 1 {
			once.Do(func() { write(v1.clone()) })
		}
		return benchSetStatus(o, st)
	}
	l.prune.Request()
	l.round(ctx, false)
	r.objects.SetStatus = benchSetStatus

	// Rounds go on until object 1 is Done: the delete, then the
	// write-back, are applied in turn, each when the one before finished.
	deadline := time.After(10 * time.Second)
	for {
		obj, _, found := tbl.Get(db.ReadTxn(), benchIDIndex.Query(1))
		require.True(t, found)
		if obj.st.Kind == status.KindDone && r.queue.Figures().Active == 0 {
			break
		}
		l.round(ctx, false)
		if r.queue.Figures().Queued > 0 {
			continue
		}
		select {
		case <-l.exec.Finished():
		case <-r.collect.Watch():
		case <-deadline:
			t.Fatalf("object 1 not Done: %+v", obj.st)
		}
	}
	assert.True(t, g.has(1), "the target lost object 1, which the table holds as Done")
}

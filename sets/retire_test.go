package sets_test

import (
	"context"
	"iter"
	"log/slog"
	"testing"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/sets"
	"github.com/converge-go/converge/status"
)

func TestOfRefusesNilArguments(t *testing.T) {
	db, tbl, _ := newTable(t)
	for name, call := range map[string]func() error{
		"db":    func() error { _, err := sets.Of(nil, tbl, (*node).clone, getSet, setSet); return err },
		"table": func() error { _, err := sets.Of[*node](db, nil, (*node).clone, getSet, setSet); return err },
		"clone": func() error { _, err := sets.Of(db, tbl, nil, getSet, setSet); return err },
		"get":   func() error { _, err := sets.Of(db, tbl, (*node).clone, nil, setSet); return err },
		"set":   func() error { _, err := sets.Of(db, tbl, (*node).clone, getSet, nil); return err },
	} {
		err := call()
		require.ErrorIs(t, err, reconciler.ErrInvalidConfig, name)
		assert.Contains(t, err.Error(), name+" must not be nil")
	}
}

func TestRetireRemovesTheNameAndKeepsTheOthers(t *testing.T) {
	db, tbl, st := newTable(t)
	const n = 2*sets.MaxObjectsPerTxn + 500
	fill(t, db, tbl, n, func() status.Set { return status.NewSet().Set("a", status.Done()).Set("gone", status.Pending()) })
	before := get(t, db, tbl, "n0042").Statuses.Get("a")

	changed, err := st.Retire(ctx(t), "gone")
	require.NoError(t, err)
	assert.Equal(t, n, changed)
	for obj := range tbl.All(db.ReadTxn()) {
		for name := range obj.Statuses.All() {
			require.Equal(t, "a", name, "only a's entry is left on %s", obj.Name)
		}
		require.False(t, obj.Statuses.IsPendingOrRefreshing(), "no object waits for the name retired")
	}
	after := get(t, db, tbl, "n0042").Statuses.Get("a")
	assert.Equal(t, before.ID(), after.ID(), "a's status keeps its identity: its reconciler does not redo work")

	changed, err = st.Retire(ctx(t), "gone")
	require.NoError(t, err)
	assert.Zero(t, changed, "a name retired is retired once")
}

// TestRetireWritesInBoundedTransactions counts the objects written between
// two commits: set runs in the write transaction, while the committed
// revision stays the one before it.
func TestRetireWritesInBoundedTransactions(t *testing.T) {
	db, tbl, _ := newTable(t)
	const n = 2*sets.MaxObjectsPerTxn + 1
	fill(t, db, tbl, n, func() status.Set { return status.NewSet().Set("gone", status.Done()) })
	perTxn := map[statedb.Revision]int{}
	st, err := sets.Of(db, tbl, (*node).clone, getSet, func(o *node, s status.Set) *node {
		perTxn[tbl.Revision(db.ReadTxn())]++
		return setSet(o, s)
	})
	require.NoError(t, err)
	changed, err := st.Retire(ctx(t), "gone")
	require.NoError(t, err)
	require.Equal(t, n, changed)
	assert.Len(t, perTxn, 3, "three transactions")
	for rev, k := range perTxn {
		assert.LessOrEqual(t, k, sets.MaxObjectsPerTxn, "transaction after revision %d", rev)
	}
}

func TestRetireRefusesBadInput(t *testing.T) {
	db, tbl, st := newTable(t)
	fill(t, db, tbl, 3, func() status.Set { return status.NewSet().Set("gone", status.Done()) })
	for _, name := range []string{"", "a b", "a\n"} {
		_, err := st.Retire(ctx(t), name)
		require.ErrorIs(t, err, reconciler.ErrInvalidConfig, "%q", name)
	}
	var zero sets.Table[*node]
	_, err := zero.Retire(ctx(t), "gone")
	require.ErrorIs(t, err, reconciler.ErrInvalidConfig, "the zero Table")

	done, cancel := context.WithCancel(context.Background())
	cancel()
	changed, err := st.Retire(done, "gone")
	require.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, changed)
	assert.Equal(t, status.KindDone, get(t, db, tbl, "n0000").Statuses.Get("gone").Kind, "nothing written once ctx ended")
}

func TestRetireReturnsAPanicOfAFunctionAsAnError(t *testing.T) {
	db, tbl, _ := newTable(t)
	fill(t, db, tbl, 10, func() status.Set { return status.NewSet().Set("gone", status.Done()) })
	for what, st := range map[string]func() (*sets.Table[*node], error){
		"get": func() (*sets.Table[*node], error) {
			return sets.Of(db, tbl, (*node).clone, func(*node) status.Set { panic("get") }, setSet)
		},
		"clone": func() (*sets.Table[*node], error) {
			return sets.Of(db, tbl, func(*node) *node { panic("clone") }, getSet, setSet)
		},
		"set": func() (*sets.Table[*node], error) {
			return sets.Of(db, tbl, (*node).clone, getSet, func(*node, status.Set) *node { panic("set") })
		},
	} {
		s, err := st()
		require.NoError(t, err)
		changed, err := s.Retire(ctx(t), "gone")
		require.ErrorIs(t, err, sets.ErrFuncPanicked, what)
		assert.Contains(t, err.Error(), what)
		assert.Zero(t, changed, what)
	}
	assert.Equal(t, status.KindDone, get(t, db, tbl, "n0003").Statuses.Get("gone").Kind, "the transaction was aborted")
}

func TestRetireRefusesASetThatChangesThePrimaryKey(t *testing.T) {
	db, tbl, _ := newTable(t)
	fill(t, db, tbl, 1, func() status.Set { return status.NewSet().Set("gone", status.Done()) })
	st, err := sets.Of(db, tbl, (*node).clone, getSet, func(n *node, s status.Set) *node { n.Name += "x"; return setSet(n, s) })
	require.NoError(t, err)
	_, err = st.Retire(ctx(t), "gone")
	require.ErrorIs(t, err, reconciler.ErrInvalidConfig)
	assert.Equal(t, 1, tbl.NumObjects(db.ReadTxn()), "no object added")
}

// TestRetiredRetiresOnceInitializedAndFollows: the job writes nothing
// before the table is initialized, then retires the names, and keeps
// objects written later free of them.
func TestRetiredRetiresOnceInitializedAndFollows(t *testing.T) {
	var (
		db   *statedb.DB
		tbl  statedb.RWTable[*node]
		done func(statedb.WriteTxn)
	)
	var hp *cell.SimpleHealth
	h := hive.New(statedb.Cell, job.Cell,
		cell.Provide(cell.NewSimpleHealth),
		cell.Invoke(func(s *cell.SimpleHealth) { hp = s }),
		cell.Module("nodes", "Nodes",
			cell.Provide(job.Registry.NewGroup),
			cell.Provide(func(db_ *statedb.DB) (*sets.Table[*node], error) {
				var err error
				db = db_
				if tbl, err = statedb.NewTable(db, "nodes", nodeName); err != nil {
					return nil, err
				}
				wtxn := db.WriteTxn(tbl)
				done = tbl.RegisterInitializer(wtxn, "restore")
				for _, name := range []string{"x", "y"} {
					_, _, err = tbl.Insert(wtxn, &node{Name: name, Statuses: status.NewSet().Set("a", status.Done()).Set("gone", status.Pending()).Set("old", status.Done())})
					if err != nil {
						return nil, err
					}
				}
				wtxn.Commit()
				return sets.Of(db, tbl, (*node).clone, getSet, setSet)
			}),
			sets.Retired[*node]("gone", "old"),
		),
	)
	log := hivetest.Logger(t, hivetest.LogLevel(slog.LevelError))
	require.NoError(t, h.Start(log, ctx(t)))
	t.Cleanup(func() { require.NoError(t, h.Stop(log, context.Background())) })

	waitHealth(t, hp, "Waiting for table \"nodes\" to be initialized")
	assert.Equal(t, status.KindPending, get(t, db, tbl, "x").Statuses.Get("gone").Kind, "nothing retired before the table is initialized")

	wtxn := db.WriteTxn(tbl)
	done(wtxn)
	wtxn.Commit()
	noneNamed := func(objs iter.Seq2[*node, statedb.Revision]) bool {
		for obj := range objs {
			for name := range obj.Statuses.All() {
				if name != "a" {
					return false
				}
			}
		}
		return true
	}
	eventually(t, db, tbl, "the names retired", noneNamed)
	waitHealth(t, hp, "Retired gone, old: 2 object(s) changed")

	// A writer that still names "gone": the job takes it out again.
	insert(t, db, tbl, &node{Name: "z", Statuses: status.NewSet().Pending("a", "gone")})
	eventually(t, db, tbl, "z's gone entry retired", noneNamed)
	assert.Equal(t, status.KindPending, get(t, db, tbl, "z").Statuses.Get("a").Kind, "a's entry is left alone")
	waitHealth(t, hp, "Retired gone, old: 3 object(s) changed")
}

// waitHealth waits for the message of the job's health to be want,
// polling (the simple health provider has no change notification) within
// the timeout.
func waitHealth(t *testing.T, hp *cell.SimpleHealth, want string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		h := hp.GetChild("job-retire-sets")
		if !assert.NotNil(c, h, "the job's health") {
			return
		}
		h.Lock()
		defer h.Unlock()
		assert.Equal(c, cell.StatusOK, h.Level)
		assert.Equal(c, want, h.Status)
	}, timeout, tick)
}

func TestRetiredRefusesBadNames(t *testing.T) {
	for _, names := range [][]string{nil, {""}, {"a", "b c"}} {
		h := hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth),
			cell.Module("nodes", "Nodes",
				cell.Provide(job.Registry.NewGroup),
				cell.Provide(func(db *statedb.DB) (*sets.Table[*node], error) {
					tbl, err := statedb.NewTable(db, "nodes", nodeName)
					if err != nil {
						return nil, err
					}
					return sets.Of(db, tbl, (*node).clone, getSet, setSet)
				}),
				sets.Retired[*node](names...),
			))
		err := h.Populate(hivetest.Logger(t))
		require.Error(t, err, "%q", names)
		assert.Contains(t, err.Error(), reconciler.ErrInvalidConfig.Error(), "%q", names)
	}
}

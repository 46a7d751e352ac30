package index_test

import (
	"errors"
	"iter"
	"slices"
	"strconv"
	"testing"

	"github.com/cilium/statedb"
	statedbindex "github.com/cilium/statedb/index"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/index"
	"github.com/converge-go/converge/status"
)

// object is a minimal table row with an embedded status.
type object struct {
	ID     uint64
	Status status.Status
}

func (o object) TableHeader() []string { return []string{"ID", "Status"} }
func (o object) TableRow() []string {
	return []string{strconv.FormatUint(o.ID, 10), o.Status.String()}
}

var idIndex = statedb.Index[object, uint64]{
	Name: "id",
	FromObject: func(o object) statedbindex.KeySet {
		return statedbindex.NewKeySet(statedbindex.Uint64(o.ID))
	},
	FromKey:    statedbindex.Uint64,
	FromString: statedbindex.Uint64String,
	Unique:     true,
}

func objectStatus(o object) status.Status { return o.Status }

func newTable(t *testing.T) (*statedb.DB, statedb.RWTable[object], statedb.Index[object, status.Kind]) {
	t.Helper()
	db := statedb.New()
	statusIndex := index.NewStatusIndex(objectStatus)
	tbl, err := statedb.NewTable(db, "objects", idIndex, statusIndex)
	require.NoError(t, err)
	return db, tbl, statusIndex
}

func ids[Obj any](seq iter.Seq2[Obj, statedb.Revision], id func(Obj) uint64) []uint64 {
	var out []uint64
	for obj := range seq {
		out = append(out, id(obj))
	}
	slices.Sort(out)
	return out
}

func objectID(o object) uint64 { return o.ID }

func TestNewStatusIndexDefinition(t *testing.T) {
	idx := index.NewStatusIndex(objectStatus)
	assert.Equal(t, "status", idx.Name)
	assert.Equal(t, index.DefaultStatusIndexName, idx.Name)
	assert.False(t, idx.Unique, "many objects share a kind")
	require.NotNil(t, idx.FromObject)
	require.NotNil(t, idx.FromKey)
	require.NotNil(t, idx.FromString)

	for _, k := range []status.Kind{status.KindUnset, status.KindPending, status.KindRefreshing, status.KindDone, status.KindError} {
		assert.Equal(t, k.Key(), idx.FromKey(k), "FromKey(%s)", k)
		keys := idx.FromObject(object{Status: status.Status{Kind: k}})
		first, ok := keys.First()
		assert.True(t, ok, "FromObject of a %s object has a key", k)
		assert.Equal(t, k.Key(), first, "FromObject of a %s object", k)
		n := 0
		keys.Foreach(func(statedbindex.Key) { n++ })
		assert.Equal(t, 1, n, "one key per object")
	}
}

func TestStatusIndexQueries(t *testing.T) {
	db, tbl, statusIndex := newTable(t)

	wtxn := db.WriteTxn(tbl)
	for _, o := range []object{
		{1, status.Pending()},
		{2, status.Done()},
		{3, status.Error(errors.New("boom"))},
		{4, status.Pending()},
		{5, status.Refreshing()},
		{6, status.Status{}},
		{7, status.Done()},
		{8, status.Error(nil)},
	} {
		_, _, err := tbl.Insert(wtxn, o)
		require.NoError(t, err)
	}
	wtxn.Commit()

	query := func(txn statedb.ReadTxn, k status.Kind) []uint64 {
		return ids(tbl.List(txn, statusIndex.Query(k)), objectID)
	}

	txn := db.ReadTxn()
	assert.Equal(t, []uint64{1, 4}, query(txn, status.KindPending))
	assert.Equal(t, []uint64{5}, query(txn, status.KindRefreshing))
	assert.Equal(t, []uint64{2, 7}, query(txn, status.KindDone))
	assert.Equal(t, []uint64{3, 8}, query(txn, status.KindError))
	assert.Equal(t, []uint64{6}, query(txn, status.KindUnset))
	assert.Equal(t, []uint64{6}, query(txn, status.Kind(42)), "unknown kinds share the Unset key")

	obj, _, found := tbl.Get(txn, statusIndex.Query(status.KindRefreshing))
	require.True(t, found)
	assert.Equal(t, uint64(5), obj.ID)

	// Reconciling changes the index: 1 and 4 become Done, 3 is retried to
	// Done, 2 is deleted, 7 is marked Refreshing.
	wtxn = db.WriteTxn(tbl)
	for _, o := range []object{{1, status.Done()}, {4, status.Done()}, {3, status.Done()}, {7, status.Refreshing()}} {
		_, hadOld, err := tbl.Insert(wtxn, o)
		require.NoError(t, err)
		require.True(t, hadOld)
	}
	_, hadOld, err := tbl.Delete(wtxn, object{ID: 2})
	require.NoError(t, err)
	require.True(t, hadOld)
	wtxn.Commit()

	txn2 := db.ReadTxn()
	assert.Empty(t, query(txn2, status.KindPending))
	assert.Equal(t, []uint64{5, 7}, query(txn2, status.KindRefreshing))
	assert.Equal(t, []uint64{1, 3, 4}, query(txn2, status.KindDone))
	assert.Equal(t, []uint64{8}, query(txn2, status.KindError))

	// The old snapshot is unaffected.
	assert.Equal(t, []uint64{1, 4}, query(txn, status.KindPending))
}

func TestStatusIndexWatch(t *testing.T) {
	db, tbl, statusIndex := newTable(t)
	wtxn := db.WriteTxn(tbl)
	_, _, err := tbl.Insert(wtxn, object{1, status.Pending()})
	require.NoError(t, err)
	wtxn.Commit()

	pending, watch := tbl.ListWatch(db.ReadTxn(), statusIndex.Query(status.KindPending))
	assert.Equal(t, []uint64{1}, ids(pending, objectID))
	select {
	case <-watch:
		t.Fatal("watch closed before any change")
	default:
	}

	wtxn = db.WriteTxn(tbl)
	_, _, err = tbl.Insert(wtxn, object{1, status.Done()})
	require.NoError(t, err)
	wtxn.Commit()

	select {
	case <-watch:
	default:
		t.Fatal("watch on the Pending query not closed after the object left it")
	}
	pending, _ = tbl.ListWatch(db.ReadTxn(), statusIndex.Query(status.KindPending))
	assert.Empty(t, ids(pending, objectID))
}

func TestStatusIndexFromString(t *testing.T) {
	idx := index.NewStatusIndex(objectStatus)
	for _, k := range []status.Kind{status.KindUnset, status.KindPending, status.KindRefreshing, status.KindDone, status.KindError} {
		key, err := idx.FromString(k.String())
		require.NoError(t, err, k.String())
		assert.Equal(t, k.Key(), key, k.String())
	}
	key, err := idx.FromString("")
	require.NoError(t, err)
	assert.Equal(t, status.KindUnset.Key(), key)

	for _, bad := range []string{"pending", "Bogus", "P", "Kind(1)", " Done"} {
		key, err := idx.FromString(bad)
		require.Error(t, err, bad)
		assert.ErrorIs(t, err, status.ErrMalformed, bad)
		assert.Nil(t, key, bad)
	}
}

func TestStatusIndexQueryByString(t *testing.T) {
	// Tools such as the "db" script commands query through FromString.
	db, tbl, _ := newTable(t)
	wtxn := db.WriteTxn(tbl)
	for _, o := range []object{{1, status.Pending()}, {2, status.Done()}, {3, status.Pending()}} {
		_, _, err := tbl.Insert(wtxn, o)
		require.NoError(t, err)
	}
	wtxn.Commit()

	anyTbl := statedb.AnyTable{Meta: tbl}
	seq, err := anyTbl.List(db.ReadTxn(), "status", "Pending")
	require.NoError(t, err)
	assert.Equal(t, []uint64{1, 3}, ids(seq, func(o any) uint64 { return o.(object).ID }))

	seq, err = anyTbl.List(db.ReadTxn(), "status", "Done")
	require.NoError(t, err)
	assert.Equal(t, []uint64{2}, ids(seq, func(o any) uint64 { return o.(object).ID }))

	_, err = anyTbl.List(db.ReadTxn(), "status", "Nope")
	require.Error(t, err)
	assert.ErrorIs(t, err, status.ErrMalformed)
}

// multi is an object reconciled by two reconcilers, each with its own
// status in a set.
type multi struct {
	ID       uint64
	Statuses status.Set
}

func (m multi) TableHeader() []string { return []string{"ID", "Statuses"} }
func (m multi) TableRow() []string {
	return []string{strconv.FormatUint(m.ID, 10), m.Statuses.String()}
}

func TestNewNamedStatusIndex(t *testing.T) {
	db := statedb.New()
	routesIdx := index.NewNamedStatusIndex("routes-status", func(m multi) status.Status { return m.Statuses.Get("routes") })
	filesIdx := index.NewNamedStatusIndex("files-status", func(m multi) status.Status { return m.Statuses.Get("files") })
	assert.Equal(t, "routes-status", routesIdx.Name)
	assert.Equal(t, "files-status", filesIdx.Name)
	assert.False(t, routesIdx.Unique)

	multiID := statedb.Index[multi, uint64]{
		Name: "id",
		FromObject: func(m multi) statedbindex.KeySet {
			return statedbindex.NewKeySet(statedbindex.Uint64(m.ID))
		},
		FromKey: statedbindex.Uint64,
		Unique:  true,
	}
	tbl, err := statedb.NewTable(db, "multi", multiID, routesIdx, filesIdx)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"id", "routes-status", "files-status"}, tbl.Indexes())

	set := status.NewSet()
	wtxn := db.WriteTxn(tbl)
	for _, m := range []multi{
		{1, set},                              // both pending
		{2, set.Set("routes", status.Done())}, // files pending
		{3, set.Set("files", status.Done())},  // routes pending
		{4, set.Set("routes", status.Done()).Set("files", status.Error(errors.New("x")))},
	} {
		_, _, err := tbl.Insert(wtxn, m)
		require.NoError(t, err)
	}
	wtxn.Commit()

	txn := db.ReadTxn()
	id := func(m multi) uint64 { return m.ID }
	assert.Equal(t, []uint64{1, 3}, ids(tbl.List(txn, routesIdx.Query(status.KindPending)), id))
	assert.Equal(t, []uint64{2, 4}, ids(tbl.List(txn, routesIdx.Query(status.KindDone)), id))
	assert.Equal(t, []uint64{1, 2}, ids(tbl.List(txn, filesIdx.Query(status.KindPending)), id))
	assert.Equal(t, []uint64{3}, ids(tbl.List(txn, filesIdx.Query(status.KindDone)), id))
	assert.Equal(t, []uint64{4}, ids(tbl.List(txn, filesIdx.Query(status.KindError)), id))
	assert.Empty(t, ids(tbl.List(txn, routesIdx.Query(status.KindError)), id))

	// Two status indexes with the default name clash.
	_, err = statedb.NewTable(statedb.New(), "clash", multiID,
		index.NewStatusIndex(func(m multi) status.Status { return m.Statuses.Get("a") }),
		index.NewStatusIndex(func(m multi) status.Status { return m.Statuses.Get("b") }))
	require.Error(t, err, "statedb rejects duplicate index names")
}

func TestStatusIndexManyObjects(t *testing.T) {
	db, tbl, statusIndex := newTable(t)
	kinds := []status.Status{status.Pending(), status.Refreshing(), status.Done(), status.Error(errors.New("e"))}
	const n = 1000
	wtxn := db.WriteTxn(tbl)
	for i := range uint64(n) {
		_, _, err := tbl.Insert(wtxn, object{i, kinds[i%4]})
		require.NoError(t, err)
	}
	wtxn.Commit()
	txn := db.ReadTxn()
	total := 0
	for i, st := range kinds {
		got := ids(tbl.List(txn, statusIndex.Query(st.Kind)), objectID)
		require.Len(t, got, n/4, st.Kind.String())
		for _, id := range got {
			require.Equal(t, uint64(i), id%4, "object %d under %s", id, st.Kind)
		}
		total += len(got)
	}
	assert.Equal(t, n, total)
	assert.Equal(t, n, tbl.NumObjects(txn))
}

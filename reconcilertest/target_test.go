package reconcilertest_test

import (
	"context"
	"testing"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
)

func TestTargetRecordsCallsAndState(t *testing.T) {
	ctx := context.Background()
	tgt := reconcilertest.NewTarget(itemKey, itemValue)
	_, watch := tgt.CallsWatch()

	require.NoError(t, tgt.Update(ctx, nil, 3, &item{ID: "a", Value: "1"}))
	select {
	case <-watch:
	default:
		t.Fatal("CallsWatch's channel was not closed by a call")
	}
	require.NoError(t, tgt.Update(ctx, nil, 4, &item{ID: "b", Value: "2"}))
	require.NoError(t, tgt.Delete(ctx, nil, 5, &item{ID: "b"}))
	tgt.Set("stray", "x")
	assert.Equal(t, map[string]string{"a": "1", "stray": "x"}, tgt.State())

	desired := func(yield func(*item, statedb.Revision) bool) { yield(&item{ID: "a"}, 3) }
	require.NoError(t, tgt.Prune(ctx, nil, desired))
	assert.Equal(t, map[string]string{"a": "1"}, tgt.State())

	var lines []string
	for _, c := range tgt.Calls() {
		lines = append(lines, c.String())
	}
	assert.Equal(t, []string{
		"update a rev=3 value=1",
		"update b rev=4 value=2",
		"delete b rev=5",
		"prune desired=1 removed=stray",
	}, lines, "Set is not a call")

	tgt.ResetCalls()
	assert.Empty(t, tgt.Calls())
	assert.Equal(t, map[string]string{"a": "1"}, tgt.State(), "ResetCalls keeps the state")
}

func TestTargetHonoursContext(t *testing.T) {
	tgt := reconcilertest.NewTarget(itemKey, itemValue)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, tgt.Update(ctx, nil, 1, &item{ID: "a", Value: "1"}), context.Canceled)
	assert.Empty(t, tgt.State(), "nothing is applied once the context has ended")
	require.Len(t, tgt.Calls(), 1)
	assert.ErrorIs(t, tgt.Calls()[0].Err, context.Canceled)
}

func TestTargetBatches(t *testing.T) {
	tgt := reconcilertest.NewTarget(itemKey, itemValue)
	batch := []reconciler.BatchEntry[*item]{
		{Object: &item{ID: "a", Value: "1"}, Revision: 1},
		{Object: &item{ID: "b", Value: "1"}, Revision: 2},
	}
	tgt.UpdateBatch(context.Background(), nil, batch)
	tgt.DeleteBatch(context.Background(), nil, batch[:1])
	assert.Equal(t, map[string]string{"b": "1"}, tgt.State())
	var numbers []int
	for _, c := range tgt.Calls() {
		numbers = append(numbers, c.Batch)
	}
	assert.Equal(t, []int{1, 1, 2}, numbers, "entries carry their batch's number")
}

func TestTargetDiff(t *testing.T) {
	db := statedb.New()
	table, err := statedb.NewTable(db, "items", itemID)
	require.NoError(t, err)
	wtxn := db.WriteTxn(table)
	for _, it := range []*item{{ID: "a", Value: "1"}, {ID: "b", Value: "2"}, {ID: "c", Value: "3", Status: status.Pending()}} {
		_, _, err := table.Insert(wtxn, it)
		require.NoError(t, err)
	}
	txn := wtxn.Commit()

	tgt := reconcilertest.NewTarget(itemKey, itemValue)
	tgt.Set("a", "1")
	tgt.Set("b", "old")
	tgt.Set("stray", "x")
	assert.Equal(t, "differs b: target old, table 2\nmissing c=3\nextra stray=x", tgt.Diff(txn, table))

	tgt.Set("b", "2")
	tgt.Set("c", "3")
	tgt.Remove("stray")
	assert.Equal(t, "", tgt.Diff(txn, table), "the target equals the table")
}

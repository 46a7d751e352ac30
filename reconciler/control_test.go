package reconciler_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// recorder is a target that records the updates and deletes it applies.
type recorder struct {
	mu    sync.Mutex
	data  map[string]string
	calls []string // "update key=value" or "delete key", in order
}

func newRecorder() *recorder { return &recorder{data: map[string]string{}} }

func (rc *recorder) ops() *funcOps {
	return &funcOps{
		update: func(_ context.Context, _ statedb.Revision, it *item) error {
			rc.mu.Lock()
			defer rc.mu.Unlock()
			rc.data[it.ID] = it.Value
			rc.calls = append(rc.calls, "update "+it.ID+"="+it.Value)
			return nil
		},
		delete: func(_ context.Context, _ statedb.Revision, it *item) error {
			rc.mu.Lock()
			defer rc.mu.Unlock()
			delete(rc.data, it.ID)
			rc.calls = append(rc.calls, "delete "+it.ID)
			return nil
		},
	}
}

func (rc *recorder) snapshot() (map[string]string, []string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	data := map[string]string{}
	for k, v := range rc.data {
		data[k] = v
	}
	return data, append([]string(nil), rc.calls...)
}

// With WithStartAfter nothing is applied before the tables are
// initialized; with a timeout it starts anyway and health says why until
// they are.
func TestStartAfterTablesAreInitialized(t *testing.T) {
	t.Run("initialized late", func(t *testing.T) {
		rc := newRecorder()
		var markDone func(statedb.WriteTxn)
		f := startFixture(t, rc.ops(), &with{setup: func(f *fixture) []reconciler.Option {
			db, tbl := f.db, f.table
			wtxn := db.WriteTxn(tbl)
			markDone = tbl.RegisterInitializer(wtxn, "late")
			wtxn.Commit()
			return nil
		}}, reconciler.WithStartAfter(0))
		rev := f.upsert(&item{ID: "a", Value: "1"})
		f.waitHealth(func(_ cell.Level, msg string) bool {
			return strings.Contains(msg, "Waiting for tables to be initialized: items")
		})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, _, err := f.rec.WaitUntilReconciled(ctx, rev)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		_, calls := rc.snapshot()
		assert.Empty(t, calls, "nothing applied before initialization")

		wtxn := f.db.WriteTxn(f.table)
		markDone(wtxn)
		wtxn.Commit()
		f.waitKind("a", status.KindDone)
	})
	t.Run("timeout", func(t *testing.T) {
		rc := newRecorder()
		var markDone func(statedb.WriteTxn)
		f := startFixture(t, rc.ops(), &with{setup: func(f *fixture) []reconciler.Option {
			db, tbl := f.db, f.table
			wtxn := db.WriteTxn(tbl)
			markDone = tbl.RegisterInitializer(wtxn, "never")
			wtxn.Commit()
			return nil
		}}, reconciler.WithStartAfter(20*time.Millisecond))
		f.upsert(&item{ID: "a", Value: "1"})
		f.waitKind("a", status.KindDone)
		f.waitHealth(func(level cell.Level, msg string) bool {
			return level == cell.StatusDegraded && strings.Contains(msg, "tables not initialized") && strings.Contains(msg, "items")
		})
		wtxn := f.db.WriteTxn(f.table)
		markDone(wtxn)
		wtxn.Commit()
		f.upsert(&item{ID: "b", Value: "1"}) // a round notices
		f.waitHealth(func(level cell.Level, _ string) bool { return level == cell.StatusOK })
	})
}

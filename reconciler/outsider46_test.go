package reconciler_test

// Outside attacks on the tables of issue 46 (package tables fed through
// reconciler.Params.Tables), from the documentation only.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// o46Hive starts a hive with tables.Cell and one reconciler per name on one
// items table whose objects carry a status.Set; every Update of an object
// named in fail[name] fails. It returns the DB, the table and the tables.
func o46Hive(t *testing.T, fail map[string]map[string]bool, names ...string) (*statedb.DB, statedb.RWTable[*item], *tables.Tables) {
	t.Helper()
	var (
		db  *statedb.DB
		tbl statedb.RWTable[*item]
		tbs *tables.Tables
	)
	h := hive.New(statedb.Cell, job.Cell, tables.Cell, cell.Provide(cell.NewSimpleHealth),
		cell.Module("test", "Test module",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(p reconciler.Params, tt *tables.Tables) error {
				db, tbs = p.DB, tt
				var err error
				if tbl, err = statedb.NewTable(p.DB, "items", itemID); err != nil {
					return err
				}
				for _, name := range names {
					ops := newKitOps()
					ops.setFail(func(op reconcilertest.Op, it *item) error {
						if fail[name][it.ID] {
							return errKitObject
						}
						return nil
					})
					_, err := reconciler.Register(p, tbl, (*item).clone,
						func(it *item, s status.Status) *item { it.Statuses = it.Statuses.Set(name, s); return it },
						func(it *item) status.Status { return it.Statuses.Get(name) },
						ops, nil, reconciler.WithName(name), reconciler.WithPruning(0), reconciler.WithRetry(time.Hour, time.Hour))
					if err != nil {
						return err
					}
				}
				return nil
			})))
	log := hivetest.Logger(t)
	require.NoError(t, h.Start(log, ctxFor(t, timeout)))
	t.Cleanup(func() { assert.NoError(t, h.Stop(log, context.Background())) })
	return db, tbl, tbs
}

// RetryKey joins a reconciler's ID and an object's key with a space, so a
// name with a space could make two reconcilers' rows one ("test/x" with
// "y k", "test/x y" with "k"): Register refuses such a name.
func TestOutsider46NameWithSpaceIsRefused(t *testing.T) {
	for _, name := range []string{"x y", "x\ty", "x\ny", "x\x00"} {
		var regErr error
		h := hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth), tables.Cell,
			cell.Module("test", "Test module",
				cell.ProvidePrivate(job.Registry.NewGroup),
				cell.Invoke(func(p reconciler.Params) error {
					tbl, err := statedb.NewTable(p.DB, "items", itemID)
					if err != nil {
						return err
					}
					_, regErr = reconciler.Register(p, tbl, (*item).clone, (*item).setStatus, (*item).getStatus, newKitOps(), nil,
						reconciler.WithName(name), reconciler.WithMetrics(newKitMetrics()))
					return nil
				})))
		require.NoError(t, h.Populate(hivetest.Logger(t)))
		require.ErrorIs(t, regErr, reconciler.ErrInvalidConfig, "name %q", name)
		assert.Contains(t, regErr.Error(), "white space or a control character")
	}
}

var _ = errors.New

// RetryInfo.Key is "the object's primary key, in hex if not printable":
// two failing objects of one reconciler, keyed "\x01" and "0x01", are two
// failing objects and must have two rows of their own.
func TestOutsider46HexKeysCollideWithPrintableKeys(t *testing.T) {
	bin := "\x01"
	fail := map[string]map[string]bool{"x": {bin: true, "0x01": true}}
	db, tbl, tbs := o46Hive(t, fail, "x")
	wtxn := db.WriteTxn(tbl)
	for _, id := range []string{bin, "0x01"} {
		_, _, err := tbl.Insert(wtxn, &item{ID: id, Value: "1", Statuses: status.NewSet()})
		require.NoError(t, err)
	}
	wtxn.Commit()
	waitUntil(t, "two failing objects", func() (bool, <-chan struct{}) {
		txn := db.ReadTxn()
		_, watch := tbs.Reconcilers().AllWatch(txn)
		a, _, ok := tbs.Reconcilers().Get(txn, tables.InfoByID.Query("test/x"))
		return ok && a.Retrying == 2, watch
	})
	var keys []string
	for r := range tbs.Retries().List(db.ReadTxn(), tables.RetryByReconciler.Query("test/x")) {
		keys = append(keys, r.Key)
	}
	assert.Len(t, keys, 2, "one row per failing object; got keys %q", keys)
}

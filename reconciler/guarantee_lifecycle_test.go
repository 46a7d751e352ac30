package reconciler_test

// Claim 1 of the guarantee review: Register works from a start hook (run
// before or after the job registry's), from a cell.Invoke and after the
// hive has started; hive.Start returns, the reconciler reconciles and stops
// cleanly, also across a stop and a start and when hive.Start fails.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// o30HookEnv is a hive whose reconcilers are registered by the caller's
// function at a chosen moment.
type o30HookEnv struct {
	t      testing.TB
	hive   *hive.Hive
	db     *statedb.DB
	params reconciler.Params
	mu     sync.Mutex
	recs   map[string]reconciler.Reconciler[*o30Obj]
	// returned is set once hive.Start has returned: only then can the
	// cleanup stop the hive without blocking on its lifecycle.
	returned bool
	tables   map[string]statedb.RWTable[*o30Obj]
	targets  map[string]*o30Target
}

func (h *o30HookEnv) register(name string, opts ...reconciler.Option) error {
	h.mu.Lock()
	tbl := h.tables[name]
	tgt := h.targets[name]
	h.mu.Unlock()
	rec, err := reconciler.Register(h.params, tbl, (*o30Obj).clone, (*o30Obj).setStatus, (*o30Obj).getStatus, tgt, nil,
		append([]reconciler.Option{reconciler.WithName(name)}, opts...)...)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.recs[name] = rec
	h.mu.Unlock()
	return nil
}

func (h *o30HookEnv) rec(name string) reconciler.Reconciler[*o30Obj] {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.recs[name]
}

// newO30HookEnv builds a hive with a table (and target) per name.
// early cells come before everything else in the hive (their invokes run
// before the job registry exists); late cells after the module.
func newO30HookEnv(t testing.TB, names []string, early, late []cell.Cell) *o30HookEnv {
	h := &o30HookEnv{
		t:       t,
		recs:    map[string]reconciler.Reconciler[*o30Obj]{},
		tables:  map[string]statedb.RWTable[*o30Obj]{},
		targets: map[string]*o30Target{},
	}
	cells := append([]cell.Cell{}, early...)
	cells = append(cells,
		statedb.Cell,
		job.Cell,
		cell.Provide(cell.NewSimpleHealth),
		cell.Module("o30hook", "outsider hook module",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(db *statedb.DB, p reconciler.Params) error {
				h.db, h.params = db, p
				for _, n := range names {
					tbl, err := o30NewTable(db, "o30-"+n)
					if err != nil {
						return err
					}
					h.tables[n] = tbl
					h.targets[n] = newO30Target()
				}
				return nil
			}),
		),
	)
	cells = append(cells, late...)
	h.hive = hive.New(cells...)
	t.Cleanup(func() {
		if h.returned {
			_ = h.hive.Stop(hivetest.Logger(t), context.Background())
		}
	})
	return h
}

// putAndWait writes an object to the named table and waits for the target
// to hold it with the table saying Done.
func (h *o30HookEnv) putAndWait(name, id, value string) {
	h.t.Helper()
	tbl := h.tables[name]
	wtxn := h.db.WriteTxn(tbl)
	_, _, err := tbl.Insert(wtxn, &o30Obj{ID: id, Value: value, Status: status.Pending()})
	require.NoError(h.t, err)
	rev := tbl.Revision(wtxn)
	wtxn.Commit()
	rec := h.rec(name)
	require.NotNil(h.t, rec, "reconciler %s not registered", name)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, _, err = rec.WaitUntilReconciled(ctx, rev)
	require.NoError(h.t, err, "reconciler %s: WaitUntilReconciled", name)
	got, ok := h.targets[name].get(id)
	require.True(h.t, ok && got == value, "reconciler %s: target %s=%q (present %v), want %q", name, id, got, ok, value)
	obj, _, _ := tbl.Get(h.db.ReadTxn(), o30ByID.Query(id))
	require.Equal(h.t, status.KindDone, obj.Status.Kind, "reconciler %s: status of %s", name, id)
}

func (h *o30HookEnv) start() error {
	err := o30Within(h.t, 20*time.Second, "hive.Start", func() error {
		return h.hive.Start(hivetest.Logger(h.t), context.Background())
	})
	h.returned = true
	return err
}

func (h *o30HookEnv) stop() error {
	return o30Within(h.t, 20*time.Second, "hive.Stop", func() error {
		return h.hive.Stop(hivetest.Logger(h.t), context.Background())
	})
}

// o30NoLeak checks, once the test and its cleanups are done, that no
// goroutine started during the test is left.
func o30NoLeak(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// A start hook appended after the job registry's start hook (in the
// module, after Params were built) registers the reconciler.
func TestGuaranteeRegisterInStartHookAfterRegistry(t *testing.T) {
	o30NoLeak(t)
	var h *o30HookEnv
	late := []cell.Cell{cell.Invoke(func(lc cell.Lifecycle, _ reconciler.Params) {
		lc.Append(cell.Hook{OnStart: func(cell.HookContext) error { return h.register("a") }})
	})}
	h = newO30HookEnv(t, []string{"a"}, nil, late)
	require.NoError(t, h.start())
	h.putAndWait("a", "x", "1")
	require.NoError(t, h.stop())
}

// Several reconcilers registered from start hooks after the registry's,
// one from an invoke and one after the start, all work.
func TestGuaranteeSeveralRegisteredFromHooks(t *testing.T) {
	o30NoLeak(t)
	var h *o30HookEnv
	late := []cell.Cell{
		cell.Invoke(func(_ reconciler.Params) error { return h.register("invoke") }),
		cell.Invoke(func(lc cell.Lifecycle, _ reconciler.Params) {
			lc.Append(cell.Hook{OnStart: func(cell.HookContext) error {
				if err := h.register("late1"); err != nil {
					return err
				}
				return h.register("late2")
			}})
			lc.Append(cell.Hook{OnStart: func(cell.HookContext) error { return h.register("late3") }})
		}),
	}
	names := []string{"invoke", "late1", "late2", "late3", "after"}
	h = newO30HookEnv(t, names, nil, late)
	require.NoError(t, h.start())
	require.NoError(t, h.register("after"))
	for _, n := range names {
		h.putAndWait(n, "x", "1")
	}
	require.NoError(t, h.stop())
}

// A reconciler registered from an invoke keeps working over two stop and
// start cycles (the baseline of the two tests above).
func TestGuaranteeRegisterInInvokeThenRestart(t *testing.T) {
	o30NoLeak(t)
	var h *o30HookEnv
	late := []cell.Cell{cell.Invoke(func(_ reconciler.Params) error { return h.register("a") })}
	h = newO30HookEnv(t, []string{"a"}, nil, late)
	for i := range 3 {
		require.NoError(t, h.start())
		h.putAndWait("a", fmt.Sprintf("x%d", i), "1")
		require.NoError(t, h.stop())
	}
}

var errO30Hook = errors.New("outsider: start hook fails")

// Register from an invoke, then a start hook that runs before the
// reconciler's jobs fails: they never start; hive.Stop returns and no
// goroutine is left behind.
func TestGuaranteeRegisterInInvokeThenStartFails(t *testing.T) {
	o30NoLeak(t)
	var h *o30HookEnv
	early := []cell.Cell{cell.Invoke(func(lc cell.Lifecycle) {
		lc.Append(cell.Hook{OnStart: func(cell.HookContext) error { return errO30Hook }})
	})}
	late := []cell.Cell{cell.Invoke(func(_ reconciler.Params) error { return h.register("a") })}
	h = newO30HookEnv(t, []string{"a"}, early, late)
	require.ErrorIs(t, h.start(), errO30Hook)
	require.NoError(t, h.stop())
}

// Register from a start hook that itself fails after registering.
func TestGuaranteeRegisterInFailingStartHook(t *testing.T) {
	o30NoLeak(t)
	var h *o30HookEnv
	late := []cell.Cell{cell.Invoke(func(lc cell.Lifecycle, _ reconciler.Params) {
		lc.Append(cell.Hook{OnStart: func(cell.HookContext) error {
			if err := h.register("a"); err != nil {
				return err
			}
			return errO30Hook
		}})
	})}
	h = newO30HookEnv(t, []string{"a"}, nil, late)
	require.ErrorIs(t, h.start(), errO30Hook)
	require.NoError(t, h.stop())
}

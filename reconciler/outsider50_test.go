package reconciler_test

// Outside attacks on the capabilities of issue 50 (WithSetup, WithDriftCheck,
// error history, Configure, WithPruneGuard), from the documentation only.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

const o50Timeout = 10 * time.Second

// o50Ops is a map target with hooks.
type o50Ops struct {
	mu       sync.Mutex
	target   map[string]string
	updates  map[string]int
	deletes  map[string]int
	prunes   int
	updateFn func(ctx context.Context, it *item) error
	pruneFn  func(ctx context.Context) error
	inflight atomic.Int32
	maxIn    atomic.Int32
}

func newO50Ops() *o50Ops {
	return &o50Ops{target: map[string]string{}, updates: map[string]int{}, deletes: map[string]int{}}
}

func (o *o50Ops) Update(ctx context.Context, _ statedb.ReadTxn, _ statedb.Revision, it *item) error {
	n := o.inflight.Add(1)
	defer o.inflight.Add(-1)
	for {
		m := o.maxIn.Load()
		if n <= m || o.maxIn.CompareAndSwap(m, n) {
			break
		}
	}
	o.mu.Lock()
	o.updates[it.ID]++
	fn := o.updateFn
	o.mu.Unlock()
	if fn != nil {
		if err := fn(ctx, it); err != nil {
			return err
		}
	}
	o.mu.Lock()
	o.target[it.ID] = it.Value
	o.mu.Unlock()
	return nil
}

func (o *o50Ops) Delete(ctx context.Context, _ statedb.ReadTxn, _ statedb.Revision, it *item) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.deletes[it.ID]++
	delete(o.target, it.ID)
	return nil
}

func (o *o50Ops) Prune(ctx context.Context, txn statedb.ReadTxn, objs iter.Seq2[*item, statedb.Revision]) error {
	o.mu.Lock()
	o.prunes++
	fn := o.pruneFn
	o.mu.Unlock()
	if fn != nil {
		if err := fn(ctx); err != nil {
			return err
		}
	}
	want := map[string]bool{}
	for it := range objs {
		want[it.ID] = true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for k := range o.target {
		if !want[k] {
			delete(o.target, k)
		}
	}
	return nil
}

func (o *o50Ops) get(f func(o *o50Ops) int) int { o.mu.Lock(); defer o.mu.Unlock(); return f(o) }
func (o *o50Ops) nUpdates(id string) int        { return o.get(func(o *o50Ops) int { return o.updates[id] }) }
func (o *o50Ops) nPrunes() int                  { return o.get(func(o *o50Ops) int { return o.prunes }) }
func (o *o50Ops) targetLen() int                { return o.get(func(o *o50Ops) int { return len(o.target) }) }
func (o *o50Ops) setTarget(k, v string)         { o.mu.Lock(); o.target[k] = v; o.mu.Unlock() }
func (o *o50Ops) targetHas(k, v string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	got, ok := o.target[k]
	return ok && got == v
}

type o50 struct {
	t      *testing.T
	log    *slog.Logger
	h      *hive.Hive
	db     *statedb.DB
	tbl    statedb.RWTable[*item]
	tbs    *tables.Tables
	rec    reconciler.Reconciler[*item]
	health *cell.SimpleHealth
	up     bool
}

// newO50 builds (not starts) a hive with one reconciler; a Register error is returned.
func newO50(t *testing.T, ops reconciler.Operations[*item], batch reconciler.BatchOperations[*item], opts ...reconciler.Option) (*o50, error) {
	return newO50With(t, ops, batch, func(*statedb.DB) []reconciler.Option { return opts })
}

// newO50With builds the options once the DB exists (for WithDependency).
func newO50With(t *testing.T, ops reconciler.Operations[*item], batch reconciler.BatchOperations[*item], mk func(*statedb.DB) []reconciler.Option) (*o50, error) {
	f := &o50{t: t, log: hivetest.Logger(t)}
	var regErr error
	f.h = hive.New(statedb.Cell, job.Cell, tables.Cell, cell.Provide(cell.NewSimpleHealth),
		cell.Module("test", "Test module",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(p reconciler.Params, tt *tables.Tables, sh *cell.SimpleHealth) error {
				f.db, f.tbs, f.health = p.DB, tt, sh
				var err error
				if f.tbl, err = statedb.NewTable(p.DB, "items", itemID); err != nil {
					return err
				}
				f.rec, regErr = reconciler.Register(p, f.tbl, (*item).clone, (*item).setStatus, (*item).getStatus, ops, batch, mk(p.DB)...)
				return nil
			})))
	require.NoError(t, f.h.Populate(f.log))
	t.Cleanup(func() {
		if f.up {
			assert.NoError(t, f.h.Stop(f.log, context.Background()))
		}
	})
	return f, regErr
}

func startO50(t *testing.T, ops reconciler.Operations[*item], batch reconciler.BatchOperations[*item], opts ...reconciler.Option) *o50 {
	t.Helper()
	f, err := newO50(t, ops, batch, opts...)
	require.NoError(t, err)
	f.start()
	return f
}

func (f *o50) start() {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), o50Timeout)
	defer cancel()
	require.NoError(f.t, f.h.Start(f.log, ctx))
	f.up = true
}

func (f *o50) stop() {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), o50Timeout)
	defer cancel()
	require.NoError(f.t, f.h.Stop(f.log, ctx))
	f.up = false
}

func (f *o50) insert(id, value string) statedb.Revision {
	wtxn := f.db.WriteTxn(f.tbl)
	f.tbl.Insert(wtxn, &item{ID: id, Value: value, Status: status.Pending()})
	wtxn.Commit()
	return f.tbl.Revision(f.db.ReadTxn())
}

func (f *o50) del(id string) {
	wtxn := f.db.WriteTxn(f.tbl)
	f.tbl.Delete(wtxn, &item{ID: id})
	wtxn.Commit()
}

// markRefreshing writes the object back with a Refreshing status.
func (f *o50) markRefreshing(id string) {
	wtxn := f.db.WriteTxn(f.tbl)
	it, _, ok := f.tbl.Get(wtxn, itemID.Query(id))
	require.True(f.t, ok)
	c := it.clone()
	c.Status = status.Refreshing()
	f.tbl.Insert(wtxn, c)
	wtxn.Commit()
}

func (f *o50) obj(id string) (*item, bool) {
	it, _, ok := f.tbl.Get(f.db.ReadTxn(), itemID.Query(id))
	return it, ok
}

// eventually waits (≤ o50Timeout) for cond, re-checking on every table change
// and every millisecond (for conditions on the target or health).
func (f *o50) eventually(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.After(o50Timeout)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		_, w1 := f.tbl.AllWatch(f.db.ReadTxn())
		if cond() {
			return
		}
		select {
		case <-w1:
		case <-tick.C:
		case <-deadline:
			f.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (f *o50) waitDone(id string) *item {
	f.t.Helper()
	var it *item
	f.eventually(id+" Done", func() bool {
		var ok bool
		it, ok = f.obj(id)
		return ok && it.Status.Kind == status.KindDone
	})
	return it
}

func (f *o50) waitReconciled() {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), o50Timeout)
	defer cancel()
	rev := f.tbl.Revision(f.db.ReadTxn())
	_, _, err := f.rec.WaitUntilReconciled(ctx, rev)
	require.NoError(f.t, err)
}

func (f *o50) info() *tables.Info {
	for i := range f.tbs.Reconcilers().All(f.db.ReadTxn()) {
		return i
	}
	return nil
}

func (f *o50) retry(key string) *tables.RetryInfo {
	for r := range f.tbs.Retries().All(f.db.ReadTxn()) {
		if r.Key == key {
			return r
		}
	}
	return nil
}

func (f *o50) healthOf() (cell.Level, string) {
	c := f.health.GetChild("job-reconcile")
	if c == nil {
		c = f.health.GetChild("test.job-reconcile")
	}
	if c == nil {
		return "", ""
	}
	c.Lock()
	defer c.Unlock()
	msg := c.Status
	if c.Error != nil {
		msg += ": " + c.Error.Error()
	}
	return c.Level, msg
}

func (f *o50) waitHealth(what string, ok func(cell.Level, string) bool) {
	f.t.Helper()
	f.eventually("health "+what, func() bool { l, m := f.healthOf(); return ok(l, m) })
}

func o50Fast() reconciler.Option { return reconciler.WithRetry(time.Millisecond, 5*time.Millisecond) }

// ---- 1. WithSetup ----

// ---- 2. Drift check ----

func o50Check(ops *o50Ops, errFor map[string]error, calls *atomic.Int32) func(context.Context, statedb.ReadTxn, statedb.Revision, *item) (bool, error) {
	return func(ctx context.Context, _ statedb.ReadTxn, _ statedb.Revision, it *item) (bool, error) {
		calls.Add(1)
		if err := errFor[it.ID]; err != nil {
			return false, err
		}
		return ops.targetHas(it.ID, it.Value), nil
	}
}

// Drift check with batch operations: in-sync entries leave the batch.
type o50Batch struct{ *o50Ops }

func (b o50Batch) UpdateBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	for i := range batch {
		batch[i].Result = b.Update(ctx, txn, batch[i].Revision, batch[i].Object)
	}
}

func (b o50Batch) DeleteBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	for i := range batch {
		batch[i].Result = b.Delete(ctx, txn, batch[i].Revision, batch[i].Object)
	}
}

// o50BatchOnly has no Prune method.
type o50BatchOnly struct{ b o50Batch }

func (b o50BatchOnly) UpdateBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	b.b.UpdateBatch(ctx, txn, batch)
}

func (b o50BatchOnly) DeleteBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	b.b.DeleteBatch(ctx, txn, batch)
}

// ---- 3. Error history ----

func TestOutsider50ErrorHistory(t *testing.T) {
	ops := newO50Ops()
	huge := strings.Repeat("é", 300) // 600 bytes, 2-byte runes
	errs := []string{"e1", "e2", "e2", "e2", "e3", "e1", "e4", "e5", huge}
	var idx atomic.Int32
	release := make(chan struct{})
	ops.updateFn = func(ctx context.Context, it *item) error {
		if it.ID != "a" {
			return nil
		}
		n := int(idx.Add(1)) - 1
		if n < len(errs) {
			return errors.New(errs[n])
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f := startO50(t, ops, nil, reconciler.WithRetry(time.Millisecond, time.Millisecond), reconciler.WithRetryJitter(0), reconciler.WithPruning(0))
	f.insert("a", "1")
	var row *tables.RetryInfo
	f.eventually("9 attempts", func() bool { row = f.retry("a"); return row != nil && row.Attempts == len(errs) })
	require.Equal(t, huge, row.LastError, "last-error is not cut")
	require.Len(t, row.Errors, 4)
	got := []string{}
	atts := []int{}
	for _, e := range row.Errors {
		got = append(got, e.Error)
		atts = append(atts, e.Attempt)
		require.False(t, e.At.IsZero())
	}
	cut := row.Errors[3].Error
	require.True(t, utf8.ValidString(cut), "cut at a character boundary")
	require.True(t, strings.HasSuffix(cut, "…"))
	require.LessOrEqual(t, len(strings.TrimSuffix(cut, "…")), 256)
	require.GreaterOrEqual(t, len(strings.TrimSuffix(cut, "…")), 255)
	require.Equal(t, []string{"e1", "e4", "e5"}, got[:3])
	require.Equal(t, []int{6, 7, 8, 9}, atts)
	close(release)
	f.eventually("row gone", func() bool { return f.retry("a") == nil })
}

// Identical errors a thousand times: one record; a new version starts afresh.
func TestOutsider50ErrorHistoryIdenticalAndNewVersion(t *testing.T) {
	ops := newO50Ops()
	var mode atomic.Value
	mode.Store("same")
	ops.updateFn = func(ctx context.Context, it *item) error {
		if it.Value == "1" {
			return errors.New("always the same")
		}
		return errors.New("v2 error")
	}
	f := startO50(t, ops, nil, reconciler.WithRetry(time.Microsecond, time.Microsecond), reconciler.WithPruning(0))
	f.insert("a", "1")
	var row *tables.RetryInfo
	f.eventually("many attempts", func() bool { row = f.retry("a"); return row != nil && row.Attempts >= 200 })
	require.Len(t, row.Errors, 1)
	require.Equal(t, "always the same", row.Errors[0].Error)
	require.Greater(t, row.Errors[0].Attempt, 1)
	f.insert("a", "2")
	f.eventually("v2 history", func() bool {
		row = f.retry("a")
		return row != nil && row.LastError == "v2 error"
	})
	for _, e := range row.Errors {
		require.NotEqual(t, "always the same", e.Error, "new version must not carry old history")
	}
	f.del("a")
	f.eventually("row gone on delete", func() bool { return f.retry("a") == nil })
}

// Many objects with distinct errors, with workers.
func TestOutsider50ErrorHistoryConcurrent(t *testing.T) {
	ops := newO50Ops()
	var cnt sync.Map
	ops.updateFn = func(ctx context.Context, it *item) error {
		v, _ := cnt.LoadOrStore(it.ID, new(atomic.Int32))
		n := v.(*atomic.Int32).Add(1)
		if n <= 6 {
			return fmt.Errorf("%s err %d", it.ID, n)
		}
		return errors.New("stuck")
	}
	f := startO50(t, ops, nil, reconciler.WithRetry(time.Millisecond, time.Millisecond), reconciler.WithPruning(0), reconciler.WithConcurrency(8))
	for i := range 50 {
		f.insert(fmt.Sprint("k", i), "1")
	}
	f.eventually("all rows at ≥7 attempts", func() bool {
		for i := range 50 {
			r := f.retry(fmt.Sprint("k", i))
			if r == nil || r.Attempts < 7 {
				return false
			}
		}
		return true
	})
	for i := range 50 {
		k := fmt.Sprint("k", i)
		r := f.retry(k)
		require.Len(t, r.Errors, 4, k)
		require.Equal(t, "stuck", r.Errors[3].Error)
		require.Equal(t, r.LastError, r.Errors[3].Error)
		require.Equal(t, r.Attempts, r.Errors[3].Attempt, k)
		require.Equal(t, k+" err 4", r.Errors[0].Error)
	}
}

// ---- 4. Configure ----

// ---- 5. Prune guard ----

type o50Plan struct {
	mu           sync.Mutex
	remove, held int
	err          error
	panics       bool
	calls        int
}

func (p *o50Plan) set(remove, held int, err error, panics bool) {
	p.mu.Lock()
	p.remove, p.held, p.err, p.panics = remove, held, err, panics
	p.mu.Unlock()
}

func (p *o50Plan) plan(ctx context.Context, txn statedb.ReadTxn, objs iter.Seq2[*item, statedb.Revision]) (int, int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if p.panics {
		panic("plan panics")
	}
	return p.remove, p.held, p.err
}

func (p *o50Plan) nCalls() int { p.mu.Lock(); defer p.mu.Unlock(); return p.calls }

func runtimeGosched() { runtime.Gosched() }

// ---- round 2 ----

// A failing delete has its own history; an Error status found in the table
// starts a history of one record at the time that status was written.
func TestOutsider50ErrorHistoryFoundError(t *testing.T) {
	ops := newO50Ops()
	ops.updateFn = func(ctx context.Context, it *item) error { return errors.New("new error") }
	f, err := newO50(t, ops, nil, reconciler.WithRetry(time.Hour, time.Hour), reconciler.WithPruning(0))
	require.NoError(t, err)
	written := time.Now().Add(-time.Minute).Truncate(time.Second)
	wtxn := f.db.WriteTxn(f.tbl)
	st := status.Status{Kind: status.KindError, Error: "old error", UpdatedAt: written}
	f.tbl.Insert(wtxn, &item{ID: "a", Value: "1", Status: st})
	wtxn.Commit()
	f.start()
	var row *tables.RetryInfo
	f.eventually("row after retry", func() bool { row = f.retry("a"); return row != nil && row.LastError == "new error" })
	require.Len(t, row.Errors, 2, "%+v", row.Errors)
	require.Equal(t, "old error", row.Errors[0].Error)
	require.True(t, row.Errors[0].At.Equal(written), "at %v, want %v", row.Errors[0].At, written)
	require.Equal(t, "new error", row.Errors[1].Error)
}

// Text edges: exactly 256 bytes is not cut; 257 is; invalid UTF-8 and
// 3-byte runes straddling the boundary.
func TestOutsider50ErrorHistoryCutEdges(t *testing.T) {
	for name, text := range map[string]string{
		"256":     strings.Repeat("x", 256),
		"257":     strings.Repeat("x", 257),
		"rune3":   "x" + strings.Repeat("€", 100), // 301 bytes; 256 falls inside a rune
		"invalid": strings.Repeat("\xff", 300),
		"empty":   "",
	} {
		t.Run(name, func(t *testing.T) {
			ops := newO50Ops()
			ops.updateFn = func(ctx context.Context, it *item) error { return errors.New(text) }
			f := startO50(t, ops, nil, reconciler.WithRetry(time.Hour, time.Hour), reconciler.WithPruning(0))
			f.insert("a", "1")
			var row *tables.RetryInfo
			f.eventually("row", func() bool { row = f.retry("a"); return row != nil && row.Attempts == 1 })
			require.Len(t, row.Errors, 1)
			got := row.Errors[0].Error
			if len(text) <= 256 {
				if text != "" {
					require.Equal(t, text, got)
				}
				return
			}
			require.True(t, strings.HasSuffix(got, "…"), "%q", got)
			body := strings.TrimSuffix(got, "…")
			require.LessOrEqual(t, len(body), 256)
			require.True(t, strings.HasPrefix(text, body))
			if utf8.ValidString(text) {
				require.True(t, utf8.ValidString(got))
				require.Greater(t, len(body), 253)
			}
			require.Equal(t, text, row.LastError)
		})
	}
}

// ---- converge-inspect ----

// converge-inspect marks a failing object with earlier errors "(+3 earlier)",
// --json shows every record, and a held prune shows in LAST PRUNE.
func TestOutsider50InspectHistoryAndHeldPrune(t *testing.T) {
	if testing.Short() {
		t.Skip("builds converge-inspect")
	}
	bin := t.TempDir() + "/converge-inspect"
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/converge-inspect").CombinedOutput()
	require.NoError(t, err, "%s", out)

	ops := newO50Ops()
	errs := []string{"e1", "e2", "e3\x1b[31mred", "e4", "e5"}
	var n atomic.Int32
	ops.updateFn = func(ctx context.Context, it *item) error {
		i := int(n.Add(1)) - 1
		if i < len(errs) {
			return errors.New(errs[i])
		}
		<-ctx.Done()
		return ctx.Err()
	}
	p := &o50Plan{}
	p.set(10, 10, nil, false)
	f := startO50(t, ops, nil, reconciler.WithRetry(time.Millisecond, time.Millisecond), reconciler.WithPruneGuard(5, 0, p.plan),
		reconciler.WithPruning(0))
	f.insert("a", "1")
	f.rec.Prune()
	f.eventually("held and 5 attempts", func() bool {
		i := f.info()
		r := f.retry("a")
		return i != nil && i.PruneHeld && r != nil && r.Attempts == 5 && len(r.Errors) == 4
	})
	srv := httptest.NewServer(http.StripPrefix("/statedb", f.db.HTTPHandler()))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), o50Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--url", srv.URL+"/statedb")
	cmd.Env = append(os.Environ(), "CONVERGE_INSPECT_TOKEN=")
	text, _ := cmd.CombinedOutput()
	t.Logf("inspect:\n%s", text)
	require.Contains(t, string(text), "earlier)")
	require.NotContains(t, string(text), "\x1b")
	require.Contains(t, string(text), "would remove 10 of 10")
	cmd = exec.CommandContext(ctx, bin, "--url", srv.URL+"/statedb", "--json")
	cmd.Env = append(os.Environ(), "CONVERGE_INSPECT_TOKEN=")
	js, _ := cmd.Output()
	var doc struct {
		Retries []tables.RetryInfo `json:"retries"`
	}
	require.NoError(t, json.Unmarshal(js, &doc), "%s", js)
	require.NotEmpty(t, doc.Retries)
	require.GreaterOrEqual(t, len(doc.Retries[0].Errors), 4, "%s", js)
}

// ---- round 3 ----

// ---- round 4 ----

// A failing delete has a history of its own; it goes when the delete succeeds.
func TestOutsider50ErrorHistoryDelete(t *testing.T) {
	ops := &o50DelFail{o50Ops: newO50Ops()}
	f := startO50(t, ops, nil, reconciler.WithRetry(time.Millisecond, time.Millisecond), reconciler.WithPruning(0))
	f.insert("a", "1")
	f.waitDone("a")
	ops.fail.Store(4)
	f.del("a")
	f.eventually("delete row", func() bool { r := f.retry("a"); return r != nil && r.Delete && r.Attempts >= 3 })
	r := f.retry("a")
	require.NotEmpty(t, r.Errors)
	for _, e := range r.Errors {
		require.Contains(t, e.Error, "del err")
	}
	f.eventually("row gone", func() bool { return f.retry("a") == nil })
}

type o50DelFail struct {
	*o50Ops
	fail atomic.Int32
	n    atomic.Int32
}

func (o *o50DelFail) Delete(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, it *item) error {
	if o.fail.Add(-1) >= 0 {
		return fmt.Errorf("del err %d", o.n.Add(1))
	}
	return o.o50Ops.Delete(ctx, txn, rev, it)
}

// ---- round 5 ----

// An Error status written back while running starts a history of one record
// at the time that status was written; the retry's failure is appended.
func TestOutsider50ErrorHistoryWrittenBack(t *testing.T) {
	ops := newO50Ops()
	var fail atomic.Bool
	ops.updateFn = func(ctx context.Context, it *item) error {
		if fail.Load() {
			return errors.New("new error")
		}
		return nil
	}
	f := startO50(t, ops, nil, reconciler.WithRetry(time.Hour, time.Hour), reconciler.WithPruning(0))
	f.insert("a", "1")
	f.waitDone("a")
	fail.Store(true)
	written := time.Now().Add(-time.Hour).Truncate(time.Second)
	wtxn := f.db.WriteTxn(f.tbl)
	f.tbl.Insert(wtxn, &item{ID: "a", Value: "1", Status: status.Status{Kind: status.KindError, Error: "user error", UpdatedAt: written}})
	wtxn.Commit()
	var row *tables.RetryInfo
	f.eventually("row", func() bool { row = f.retry("a"); return row != nil && row.LastError == "new error" })
	require.Len(t, row.Errors, 2, "%+v", row.Errors)
	require.Equal(t, "user error", row.Errors[0].Error)
	require.True(t, row.Errors[0].At.Equal(written), "%v", row.Errors[0].At)
}

// ---- round 6: re-entrancy ----

// The Reconciler's methods are safe for concurrent use, never block
// (Pause, Resume, Prune, ConfirmPrune) or do not block on operations
// (Configure): calling them from inside setup, a check, Update and a plan
// must not deadlock.
func TestOutsider50ReentrantCalls(t *testing.T) {
	ops := newO50Ops()
	var rec atomic.Pointer[reconciler.Reconciler[*item]]
	call := func(where string, i int) {
		r := *rec.Load()
		if err := r.Configure(reconciler.WithConcurrency(1+i%3), reconciler.WithRetry(time.Millisecond, time.Duration(1+i%2)*time.Millisecond)); err != nil {
			t.Errorf("%s: %v", where, err)
		}
		r.Prune()
		r.ConfirmPrune()
	}
	var ns atomic.Int32
	setup := func(ctx context.Context, txn statedb.ReadTxn) error { call("setup", int(ns.Add(1))); return nil }
	check := func(ctx context.Context, _ statedb.ReadTxn, _ statedb.Revision, it *item) (bool, error) {
		call("check", int(ns.Add(1)))
		return ops.targetHas(it.ID, it.Value), nil
	}
	plan := func(ctx context.Context, txn statedb.ReadTxn, objs iter.Seq2[*item, statedb.Revision]) (int, int, error) {
		call("plan", int(ns.Add(1)))
		return 10, 10, nil
	}
	ops.updateFn = func(ctx context.Context, it *item) error {
		call("update", int(ns.Add(1)))
		return nil
	}
	f, err := newO50(t, ops, nil, reconciler.WithSetup(setup), reconciler.WithDriftCheck(check), reconciler.WithPruneGuard(5, 0, plan),
		reconciler.WithPruning(0), o50Fast())
	require.NoError(t, err)
	rec.Store(&f.rec)
	f.start()
	for i := range 10 {
		f.insert(fmt.Sprint("k", i), "1")
	}
	f.waitReconciled()
	for i := range 10 {
		f.markRefreshing(fmt.Sprint("k", i))
	}
	f.waitReconciled()
	f.eventually("a prune ran (confirmed from inside)", func() bool { return ops.nPrunes() >= 1 })
	// Pause/Resume from inside an Update
	ops.mu.Lock()
	ops.updateFn = func(ctx context.Context, it *item) error {
		r := *rec.Load()
		r.Pause()
		r.Resume()
		return nil
	}
	ops.mu.Unlock()
	f.insert("p", "1")
	f.waitDone("p")
}

// ---- round 7: edge values ----

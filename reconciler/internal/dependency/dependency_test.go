package dependency

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"
	"go.uber.org/goleak"

	"github.com/converge-go/converge/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type object struct {
	id  uint64
	dep string // the name of the dep it follows
	st  status.Status
}

func (o *object) TableHeader() []string { return []string{"ID", "Status"} }
func (o *object) TableRow() []string    { return []string{strconv.FormatUint(o.id, 10), o.st.String()} }

type dep struct{ name string }

func (d *dep) TableHeader() []string { return []string{"Name"} }
func (d *dep) TableRow() []string    { return []string{d.name} }

var (
	byID = statedb.Index[*object, uint64]{
		Name:       "id",
		FromObject: func(o *object) index.KeySet { return index.NewKeySet(index.Uint64(o.id)) },
		FromKey:    index.Uint64,
		Unique:     true,
	}
	byDep = statedb.Index[*object, string]{
		Name:       "dep",
		FromObject: func(o *object) index.KeySet { return index.NewKeySet(index.String(o.dep)) },
		FromKey:    index.String,
	}
	byName = statedb.Index[*dep, string]{
		Name:       "name",
		FromObject: func(d *dep) index.KeySet { return index.NewKeySet(index.String(d.name)) },
		FromKey:    index.String,
		Unique:     true,
	}
	// notAnIndex is on no table: a query on it panics in Get.
	notAnIndex = statedb.Index[*object, uint64]{
		Name:       "nope",
		FromObject: func(o *object) index.KeySet { return index.NewKeySet(index.Uint64(o.id)) },
		FromKey:    index.Uint64,
	}
)

// health records what the tracker reports.
type health struct {
	mu      sync.Mutex
	reports []string // "OK: ..." or "Degraded: ..."
	changed chan struct{}
}

func newHealth() *health { return &health{changed: make(chan struct{}, 1)} }

func (h *health) add(s string) {
	h.mu.Lock()
	h.reports = append(h.reports, s)
	h.mu.Unlock()
	select {
	case h.changed <- struct{}{}:
	default:
	}
}

func (h *health) OK(s string)                  { h.add("OK: " + s) }
func (h *health) Stopped(string)               {}
func (h *health) Degraded(s string, err error) { h.add("Degraded: " + s + ": " + err.Error()) }
func (h *health) NewScope(string) cell.Health  { return h }
func (h *health) Close()                       {}
func (h *health) last() string                 { h.mu.Lock(); defer h.mu.Unlock(); return h.reports[len(h.reports)-1] }
func (h *health) count() int                   { h.mu.Lock(); defer h.mu.Unlock(); return len(h.reports) }
func (h *health) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.reports...)
}
func (h *health) String() string { return strings.Join(h.all(), "\n") }
func (h *health) waitFor(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for h.count() < n {
		select {
		case <-h.changed:
		case <-deadline:
			t.Fatalf("health reported %d times, want %d:\n%s", h.count(), n, h)
		}
	}
}

type fixture struct {
	db      *statedb.DB
	objects statedb.RWTable[*object]
	deps    statedb.RWTable[*dep]
	now     time.Time

	mu     sync.Mutex
	marked []int
	failed []error
	noKey  int
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{db: statedb.New(), now: time.Unix(1000, 0)}
	if err := f.db.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.db.Stop() })
	var err error
	if f.objects, err = statedb.NewTable(f.db, "objects", byID, byDep); err != nil {
		t.Fatal(err)
	}
	if f.deps, err = statedb.NewTable(f.db, "deps", byName); err != nil {
		t.Fatal(err)
	}
	return f
}

// config maps a dep to the objects that follow it (by the non-unique
// index: the first only) and to the object whose id is its name, if it is
// a number.
func (f *fixture) config(mapper func(*dep, bool) []statedb.Query[*object]) Config[*object, *dep] {
	if mapper == nil {
		mapper = func(d *dep, _ bool) []statedb.Query[*object] {
			qs := []statedb.Query[*object]{byDep.Query(d.name)}
			if id, err := strconv.ParseUint(d.name, 10, 64); err == nil {
				qs = append(qs, byID.Query(id))
			}
			return qs
		}
	}
	return Config[*object, *dep]{
		DB: f.db, Table: f.objects, Dep: f.deps, Mapper: mapper,
		Status:     func(o *object) status.Status { return o.st },
		WithStatus: func(o *object, st status.Status) *object { c := *o; c.st = st; return &c },
		Keyed: func(o *object) bool {
			if o.id == 0 {
				f.mu.Lock()
				f.noKey++
				f.mu.Unlock()
			}
			return o.id != 0
		},
		Now:    func() time.Time { return f.now },
		Marked: func(n int) { f.mu.Lock(); f.marked = append(f.marked, n); f.mu.Unlock() },
		Failed: func(err error) { f.mu.Lock(); f.failed = append(f.failed, err); f.mu.Unlock() },
	}
}

func (f *fixture) insert(objs ...*object) {
	w := f.db.WriteTxn(f.objects)
	for _, o := range objs {
		f.objects.Insert(w, o)
	}
	w.Commit()
}

func (f *fixture) change(names ...string) {
	w := f.db.WriteTxn(f.deps)
	for _, n := range names {
		f.deps.Insert(w, &dep{name: n})
	}
	w.Commit()
}

func (f *fixture) status(id uint64) status.Status {
	o, _, _ := f.objects.Get(f.db.ReadTxn(), byID.Query(id))
	return o.st
}

// run runs the tracker until the returned function is called, which
// waits for Run to return nil.
func run(t *testing.T, tr *Tracker[*object, *dep], h cell.Health) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx, h) }()
	return func() {
		t.Helper()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return")
		}
	}
}

func TestMarkKeepsPendingAndRefreshingAndLeavesUnset(t *testing.T) {
	then, now := time.Unix(10, 0), time.Unix(20, 0)
	for _, c := range []struct {
		old  status.Status
		want status.Kind
		at   time.Time
		ok   bool
	}{
		{status.Status{}, status.KindUnset, time.Time{}, false},
		{status.PendingAt(then), status.KindPending, then, true},
		{status.RefreshingAt(then), status.KindRefreshing, then, true},
		{status.Done(), status.KindRefreshing, now, true},
		{status.Error(errors.New("failed")), status.KindPending, now, true},
		{status.TerminalError(errors.New("failed")), status.KindPending, now, true},
	} {
		st, ok := Mark(c.old, now)
		if ok != c.ok || st.Kind != c.want || !st.UpdatedAt.Equal(c.at) {
			t.Errorf("Mark(%v) = %v (at %v), %v; want %v at %v, %v", c.old, st, st.UpdatedAt, ok, c.want, c.at, c.ok)
		}
		if ok && st.ID() == c.old.ID() {
			t.Errorf("Mark(%v) kept the status identity %d: an operation running with the old dependency would count", c.old, st.ID())
		}
	}
}

// A change made between New and Run is not missed, nor one made while
// the job is stopped; health says the tracker watches.
func TestTrackerMarksWhatChangesFromNewOnAcrossStops(t *testing.T) {
	f := newFixture(t)
	f.insert(&object{id: 1, dep: "a", st: status.Done()}, &object{id: 2, dep: "b", st: status.Done()},
		&object{id: 3, dep: "c"}) // 3 is never to be reconciled
	tr := New(f.config(nil))
	f.change("a", "c", "missing")
	h := newHealth()
	stop := run(t, tr, h)
	h.waitFor(t, 1)
	if got := h.last(); got != "OK: Watching deps" {
		t.Errorf("health = %q", got)
	}
	if st := f.status(1); st.Kind != status.KindRefreshing || !st.UpdatedAt.Equal(f.now) {
		t.Errorf("object 1 = %v at %v, want Refreshing now", st, st.UpdatedAt)
	}
	if st := f.status(2); st.Kind != status.KindDone {
		t.Errorf("object 2 (dep not changed) = %v, want Done", st)
	}
	if st := f.status(3); st.Kind != status.KindUnset {
		t.Errorf("object 3 (Unset) = %v, want left alone", st)
	}
	stop()

	f.change("b") // while stopped
	h = newHealth()
	stop = run(t, tr, h)
	h.waitFor(t, 1)
	stop()
	if st := f.status(2); st.Kind != status.KindRefreshing {
		t.Errorf("object 2, its dep changed while stopped = %v, want Refreshing", st)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if fmt.Sprint(f.marked) != "[1 1]" {
		t.Errorf("Marked told %v, want [1 1]", f.marked)
	}
}

// A panic of the mapper, recovered, degrades health and leaves the other
// changes' objects marked; a pass that sees changes and no failure makes
// health OK again.
func TestTrackerMapperPanicIsRecovered(t *testing.T) {
	f := newFixture(t)
	f.insert(&object{id: 1, dep: "a", st: status.Done()}, &object{id: 2, dep: "b", st: status.Done()})
	cfg := f.config(nil)
	mapper := cfg.Mapper
	cfg.Mapper = func(d *dep, deleted bool) []statedb.Query[*object] {
		if d.name == "boom" {
			panic("mapper bug")
		}
		return mapper(d, deleted)
	}
	cfg.Recover = func(what string, v any) error { return fmt.Errorf("%s: panic: %v", what, v) }
	tr := New(cfg)
	f.change("boom", "a")
	h := newHealth()
	stop := run(t, tr, h)
	defer stop()
	h.waitFor(t, 1)
	if got, want := h.last(), "Degraded: Failed to map a change of deps: WithDependency mapper of deps: panic: mapper bug"; got != want {
		t.Errorf("health = %q, want %q", got, want)
	}
	if st := f.status(1); st.Kind != status.KindRefreshing {
		t.Errorf("object 1 = %v, want Refreshing despite the other change's panic", st)
	}
	f.change("b")
	h.waitFor(t, 2)
	if got := h.last(); got != "OK: Watching deps" {
		t.Errorf("health after a good pass = %q", got)
	}
}

// A query StateDB rejects marks nothing of its transaction, is told to
// Failed and degrades health.
func TestTrackerBadQueryMarksNothing(t *testing.T) {
	f := newFixture(t)
	f.insert(&object{id: 1, dep: "a", st: status.Done()})
	tr := New(f.config(func(*dep, bool) []statedb.Query[*object] {
		return []statedb.Query[*object]{byDep.Query("a"), notAnIndex.Query(1)}
	}))
	f.change("a")
	h := newHealth()
	stop := run(t, tr, h)
	h.waitFor(t, 1)
	stop()
	if got := h.last(); !strings.HasPrefix(got, "Degraded: Failed to mark objects that depend on deps: WithDependency mapper for \"deps\" returned a bad query") {
		t.Errorf("health = %q", got)
	}
	if st := f.status(1); st.Kind != status.KindDone {
		t.Errorf("object 1 = %v, want Done: the transaction was aborted", st)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.failed) != 1 || len(f.marked) != 0 {
		t.Errorf("Failed told %v, Marked %v; want one failure, no mark", f.failed, f.marked)
	}
}

// Marks are written in transactions of at most a thousand objects; one
// that WithStatus leaves without a key is not written.
func TestTrackerMarksInBatches(t *testing.T) {
	f := newFixture(t)
	const n = 2500
	objs := make([]*object, n)
	names := make([]string, n)
	for i := range objs {
		objs[i] = &object{id: uint64(i + 1), dep: "x", st: status.Done()}
		names[i] = strconv.Itoa(i + 1)
	}
	f.insert(objs...)
	cfg := f.config(nil)
	withStatus := cfg.WithStatus
	cfg.WithStatus = func(o *object, st status.Status) *object {
		c := withStatus(o, st)
		if o.id == 7 {
			c.id = 0 // the primary key gone
		}
		return c
	}
	tr := New(cfg)
	f.change(names...)
	h := newHealth()
	stop := run(t, tr, h)
	h.waitFor(t, 1)
	stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	// Each change maps to two queries, the objects following a dep of
	// its name (none) and the object of its id: 5000 queries in batches
	// of 1000, 500 objects each, 7's copy not written.
	if fmt.Sprint(f.marked) != "[499 500 500 500 500]" || f.noKey != 1 {
		t.Errorf("Marked told %v, %d without key; want [499 500 500 500 500], 1", f.marked, f.noKey)
	}
	if st := f.status(7); st.Kind != status.KindDone {
		t.Errorf("object 7 = %v, want Done: its marked copy had no key", st)
	}
}

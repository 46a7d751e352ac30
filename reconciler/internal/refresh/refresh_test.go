package refresh

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"
	"go.uber.org/goleak"
	"golang.org/x/time/rate"

	"github.com/converge-go/converge/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type object struct {
	id uint64
	st status.Status
}

func (o *object) TableHeader() []string { return []string{"ID", "Status"} }
func (o *object) TableRow() []string    { return []string{strconv.FormatUint(o.id, 10), o.st.String()} }

var byID = statedb.Index[*object, uint64]{
	Name: "id",
	FromObject: func(o *object) index.KeySet {
		if o.id == 0 {
			return index.KeySet{} // no primary key
		}
		return index.NewKeySet(index.Uint64(o.id))
	},
	FromKey: index.Uint64,
	Unique:  true,
}

// health sends what the job reports.
type health chan string

func (h health) OK(s string)                  { h <- "OK: " + s }
func (h health) Stopped(string)               {}
func (h health) Degraded(s string, err error) { h <- "Degraded: " + s + ": " + err.Error() }
func (h health) NewScope(string) cell.Health  { return h }
func (h health) Close()                       {}

// next returns the next report, failing after a deadline.
func (h health) next(t *testing.T) string {
	t.Helper()
	select {
	case s := <-h:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no health report")
		return ""
	}
}

type fixture struct {
	db      *statedb.DB
	objects statedb.RWTable[*object]
	now     time.Time

	mu       sync.Mutex
	settings Settings
	changed  chan struct{}
	paused   bool
	resumed  chan struct{}
	marked   []int
	noKey    []uint64
	failed   []error
	swept    int
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{db: statedb.New(), now: time.Unix(1000, 0), changed: make(chan struct{}, 1), resumed: make(chan struct{})}
	if err := f.db.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.db.Stop() })
	var err error
	if f.objects, err = statedb.NewTable(f.db, "objects", byID); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) config() Config[*object] {
	return Config[*object]{
		DB: f.db, Table: f.objects,
		Status:     func(o *object) status.Status { return o.st },
		WithStatus: func(o *object, st status.Status) *object { c := *o; c.st = st; return &c },
		NoKey:      func(o *object) { f.mu.Lock(); f.noKey = append(f.noKey, o.id); f.mu.Unlock() },
		Now:        func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now },
		Marked:     func(n int) { f.mu.Lock(); f.marked = append(f.marked, n); f.mu.Unlock() },
		Settings: func() (Settings, <-chan struct{}) {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.settings, f.changed
		},
		Paused: func() (bool, <-chan struct{}) {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.paused, f.resumed
		},
		Swept:  func(time.Time) { f.mu.Lock(); f.swept++; f.mu.Unlock() },
		Failed: func(err error) { f.mu.Lock(); f.failed = append(f.failed, err); f.mu.Unlock() },
	}
}

func (f *fixture) set(s Settings) {
	f.mu.Lock()
	f.settings = s
	f.mu.Unlock()
	f.changed <- struct{}{}
}

// insert writes objects with the given statuses, ids from 1, in one
// transaction each: in that order of revision.
func (f *fixture) insert(sts ...status.Status) {
	for i, st := range sts {
		w := f.db.WriteTxn(f.objects)
		f.objects.Insert(w, &object{id: uint64(i + 1), st: st})
		w.Commit()
	}
}

func (f *fixture) kinds() string {
	var s string
	for o := range f.objects.All(f.db.ReadTxn()) {
		s += o.st.Kind.String()[:1]
	}
	return s
}

// A sweep marks the stale Done objects, in revision order, up to the first
// that is not stale, and says when that one will be; the next sweep goes on
// from where it stopped.
func TestSweepMarksStaleDoneObjectsAndWaitsForTheNext(t *testing.T) {
	f := newFixture(t)
	old := f.now.Add(-time.Hour)
	f.insert(status.DoneAt(old), status.ErrorAt(old, fmt.Errorf("failed")), status.DoneAt(f.now.Add(-50*time.Second)), status.DoneAt(old))
	r := New(f.config())
	var last statedb.Revision
	wait, marked, err := r.sweep(context.Background(), &last, Settings{Interval: time.Minute})
	if err != nil || marked != 1 || wait != 10*time.Second {
		t.Fatalf("sweep = %v, %d, %v; want 10s, 1, nil", wait, marked, err)
	}
	// 4 is stale, but written after 3, which is not: the walk stopped.
	if got := f.kinds(); got != "REDD" {
		t.Errorf("kinds = %s, want REDD", got)
	}
	f.mu.Lock()
	f.now = f.now.Add(10 * time.Second)
	f.mu.Unlock()
	// 1, marked 10s ago, is the first it meets after them.
	if wait, marked, _ := r.sweep(context.Background(), &last, Settings{Interval: time.Minute}); marked != 2 || wait != 50*time.Second {
		t.Errorf("second sweep = %v, %d; want 50s, 2", wait, marked)
	}
	if got := f.kinds(); got != "RERR" {
		t.Errorf("kinds = %s, want RERR", got)
	}
}

// Mark marks nothing that changed since it was read (the compare-and-swap
// fails), tells NoKey of a copy without key, and writes in one transaction.
func TestMarkComparesAndSwaps(t *testing.T) {
	f := newFixture(t)
	f.insert(status.Done(), status.Done())
	txn := f.db.ReadTxn()
	var cands []Candidate[*object]
	for o, rev := range f.objects.All(txn) {
		cands = append(cands, Candidate[*object]{o, rev})
	}
	w := f.db.WriteTxn(f.objects)
	f.objects.Insert(w, &object{id: 2, st: status.Pending()}) // a new version
	w.Commit()
	cfg := f.config()
	cfg.WithStatus = func(o *object, st status.Status) *object {
		if o.id == 3 {
			return &object{id: 0, st: st}
		}
		return &object{id: o.id, st: st}
	}
	cands = append(cands, Candidate[*object]{&object{id: 3}, cands[0].Rev})
	if n := New(cfg).Mark(cands); n != 1 {
		t.Errorf("Mark = %d, want 1", n)
	}
	if got := f.kinds(); got != "RP" {
		t.Errorf("kinds = %s, want RP: the new version is not marked", got)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if fmt.Sprint(f.marked, f.noKey) != "[1] [0]" {
		t.Errorf("Marked, NoKey told %v %v; want [1] [0]", f.marked, f.noKey)
	}
	if n := New(cfg).Mark(nil); n != 0 || len(f.marked) != 1 {
		t.Errorf("Mark(nil) = %d and told Marked: want nothing", n)
	}
}

// A sweep of many objects marks them in transactions of a thousand.
func TestSweepMarksInBatches(t *testing.T) {
	f := newFixture(t)
	w := f.db.WriteTxn(f.objects)
	for i := range 2500 {
		f.objects.Insert(w, &object{id: uint64(i + 1), st: status.DoneAt(f.now.Add(-time.Hour))})
	}
	w.Commit()
	var last statedb.Revision
	if _, marked, _ := New(f.config()).sweep(context.Background(), &last, Settings{Interval: time.Minute}); marked != 2500 {
		t.Errorf("marked %d, want 2500", marked)
	}
	if fmt.Sprint(f.marked) != "[1000 1000 500]" {
		t.Errorf("Marked told %v, want [1000 1000 500]", f.marked)
	}
}

// A limiter that fails stops the sweep where it was, for at most RetryMax;
// the job tells Failed, health is Degraded, and the sweep after goes on
// from the object not marked.
func TestSweepLimiterFailing(t *testing.T) {
	f := newFixture(t)
	f.insert(status.DoneAt(f.now.Add(-time.Hour)), status.DoneAt(f.now.Add(-time.Hour)))
	lim := rate.NewLimiter(rate.Every(time.Hour), 1) // one mark, then a Wait that fails: its burst is 1 and ctx has a deadline
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var last statedb.Revision
	wait, marked, err := New(f.config()).sweep(ctx, &last, Settings{Interval: time.Hour / 2, Limiter: lim, RetryMax: time.Second})
	if err == nil || marked != 1 || wait != time.Second {
		t.Fatalf("sweep = %v, %d, %v; want 1s, 1, an error", wait, marked, err)
	}
	if got := f.kinds(); got != "RD" {
		t.Errorf("kinds = %s, want RD", got)
	}
	if last != 1 {
		t.Errorf("last = %d, want 1: object 2 is still to be marked", last)
	}
}

// The job says refreshing is off until Configure turns it on, then sweeps
// at once; paused, it waits for Resume; a limiter that fails degrades
// health; it returns nil when ctx ends.
func TestRunFollowsSettingsAndPause(t *testing.T) {
	f := newFixture(t)
	f.insert(status.DoneAt(f.now.Add(-time.Hour)))
	f.paused = true
	r := New(f.config())
	h := make(health, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, h) }()
	if got := h.next(t); got != "OK: Refreshing is off" {
		t.Errorf("health = %q", got)
	}
	f.set(Settings{Interval: time.Minute})
	if got := h.next(t); got != "OK: Paused" {
		t.Errorf("health = %q", got)
	}
	if got := f.kinds(); got != "D" {
		t.Errorf("kinds while paused = %s, want D", got)
	}
	f.mu.Lock()
	f.paused = false
	close(f.resumed)
	f.mu.Unlock()
	if got := h.next(t); got != "OK: Next refresh in 1m0s" {
		t.Errorf("health = %q", got)
	}
	if got := f.kinds(); got != "R" {
		t.Errorf("kinds after the sweep = %s, want R", got)
	}
	// A limiter whose burst is 0 fails every Wait; 1 is stale again.
	f.mu.Lock()
	f.now = f.now.Add(time.Hour)
	f.mu.Unlock()
	w := f.db.WriteTxn(f.objects)
	f.objects.Insert(w, &object{id: 2, st: status.DoneAt(f.now.Add(-time.Hour))})
	w.Commit()
	f.set(Settings{Interval: time.Minute, Limiter: rate.NewLimiter(1, 0), RetryMax: time.Second})
	if got := h.next(t); got != "Degraded: Refresh limiter failing; next refresh in 1s: refresh limiter: rate: Wait(n=1) exceeds limiter's burst 0" {
		t.Errorf("health = %q", got)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.swept != 2 || len(f.failed) != 1 {
		t.Errorf("Swept told %d times, Failed %v; want 2, one failure", f.swept, f.failed)
	}
}

package prune

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"
	"go.uber.org/goleak"

	"github.com/converge-go/converge/tables"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type object struct{ id uint64 }

func (o *object) TableHeader() []string { return []string{"ID"} }
func (o *object) TableRow() []string    { return []string{strconv.FormatUint(o.id, 10)} }

var byID = statedb.Index[*object, uint64]{
	Name:       "id",
	FromObject: func(o *object) index.KeySet { return index.NewKeySet(index.Uint64(o.id)) },
	FromKey:    index.Uint64,
	Unique:     true,
}

// newTables returns a database with two tables, "a" initialized and "b"
// not, and the function that initializes b.
func newTables(t *testing.T) (*statedb.DB, []statedb.TableMeta, func()) {
	t.Helper()
	db := statedb.New()
	if err := db.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Stop() })
	a, err := statedb.NewTable(db, "a", byID)
	if err != nil {
		t.Fatal(err)
	}
	b, err := statedb.NewTable(db, "b", byID)
	if err != nil {
		t.Fatal(err)
	}
	w := db.WriteTxn(b)
	done := b.RegisterInitializer(w, "test")
	w.Commit()
	return db, []statedb.TableMeta{a, b}, func() {
		w := db.WriteTxn(b)
		done(w)
		w.Commit()
	}
}

func within(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// pruner is a Config's Prune that returns the results it is given, in
// turn, and counts its calls.
type pruner struct {
	results []Result
	calls   int
}

func (p *pruner) prune(context.Context, statedb.ReadTxn) Result {
	p.calls++
	if len(p.results) == 0 {
		return Result{}
	}
	r := p.results[0]
	p.results = p.results[1:]
	return r
}

// A schedule with an interval is due once the tables it waits for are
// initialized, and not before: InitC says when to look again.
func TestScheduleWaitsForTheTables(t *testing.T) {
	db, metas, initB := newTables(t)
	p := &pruner{}
	s := NewSchedule(db.ReadTxn(), Config{Tables: metas, Interval: time.Hour, Prune: p.prune, Backoff: func(int) time.Duration { return time.Hour }})
	defer s.Stop()
	if s.Due() || !s.Owed() {
		t.Fatalf("Due %v, Owed %v before the tables are initialized; want false, true", s.Due(), s.Owed())
	}
	waiting, watch := s.Tables.Uninitialized(db.ReadTxn())
	if len(waiting) != 1 || waiting[0] != "b" {
		t.Fatalf("waiting = %v, want [b]", waiting)
	}
	s.Initialized(waiting, watch)
	if s.Due() {
		t.Fatal("due with b not initialized")
	}
	initB()
	within(t, s.InitC(), "InitC to close once b is initialized")
	s.Initialized(s.Tables.Uninitialized(db.ReadTxn()))
	if !s.Due() || s.InitC() != nil {
		t.Fatalf("Due %v, InitC %v once initialized; want true, nil", s.Due(), s.InitC())
	}
	s.Run(context.Background(), db.ReadTxn())
	if p.calls != 1 || s.Due() || s.Owed() {
		t.Errorf("calls %d, Due %v, Owed %v after a prune; want 1, false, false", p.calls, s.Due(), s.Owed())
	}
}

// Without an interval nothing is due until requested; Withdraw forgets a
// request.
func TestScheduleRequestAndWithdraw(t *testing.T) {
	db, metas, _ := newTables(t)
	s := NewSchedule(db.ReadTxn(), Config{Tables: metas[:1], Prune: (&pruner{}).prune})
	defer s.Stop()
	if s.TickC() != nil {
		t.Error("a tick without an interval")
	}
	within(t, s.InitC(), "InitC, closed: a is initialized")
	s.Initialized(nil, nil)
	if s.Due() || s.Owed() {
		t.Fatal("due without a request")
	}
	s.Request()
	if !s.Due() || !s.Owed() {
		t.Fatal("not due once requested")
	}
	s.Withdraw()
	if s.Due() || s.Owed() {
		t.Fatal("due after Withdraw")
	}
}

// A failed prune is owed and retried after the backoff of its failures in
// a row; a success resets them; the drift repaired adds up; Info and Errs
// say what the last did.
func TestScheduleRetriesAFailureWithBackoff(t *testing.T) {
	db, metas, _ := newTables(t)
	boom := errors.New("prune: boom")
	at := time.Unix(100, 0)
	p := &pruner{results: []Result{{Err: boom, Repaired: 2}, {Err: boom}, {At: at, Duration: time.Second, Repaired: 3}, {Err: boom}}}
	var asked []int
	s := NewSchedule(db.ReadTxn(), Config{Tables: metas[:1], Prune: p.prune, Backoff: func(n int) time.Duration {
		asked = append(asked, n)
		return time.Millisecond
	}})
	defer s.Stop()
	s.Initialized(nil, nil)
	for range 4 {
		s.Run(context.Background(), db.ReadTxn())
		if pruneErr, _ := s.Errs(); pruneErr != nil {
			within(t, chanOf(s.RetryC()), "the retry")
		}
	}
	if !slices.Equal(asked, []int{1, 2, 1}) {
		t.Errorf("Backoff asked for %v, want [1 2 1]", asked)
	}
	if s.Repaired() != 5 || !s.Owed() {
		t.Errorf("Repaired %d, Owed %v; want 5, true (the last failed)", s.Repaired(), s.Owed())
	}
	var info tables.Info
	s.Info(&info)
	if info.LastPruneError != "prune: boom" || info.PruneHeld {
		t.Errorf("info = %+v", info)
	}
}

// chanOf turns a timer's channel into one that closes when it fires.
func chanOf(c <-chan time.Time) <-chan struct{} {
	d := make(chan struct{})
	go func() { <-c; close(d) }()
	return d
}

// A held prune is not a prune: the last one's figures stay, it is owed,
// a round that read objects requests it again, and Info shows the hold.
// A hold whose figures do not change keeps its error.
func TestScheduleHeldPrune(t *testing.T) {
	db, metas, _ := newTables(t)
	at := time.Unix(100, 0)
	h1 := &Hold{Remove: 3, Of: 4, Err: errors.New("held 1")}
	p := &pruner{results: []Result{{At: at}, {Held: h1}, {Held: &Hold{Remove: 3, Of: 4, Err: errors.New("held 2")}}, {At: at.Add(time.Hour)}}}
	s := NewSchedule(db.ReadTxn(), Config{Tables: metas[:1], Prune: p.prune})
	defer s.Stop()
	s.Initialized(nil, nil)
	s.Run(context.Background(), db.ReadTxn())
	s.Run(context.Background(), db.ReadTxn())
	if !s.Held() || !s.Owed() {
		t.Fatalf("Held %v, Owed %v; want true, true", s.Held(), s.Owed())
	}
	s.RoundRead(0)
	if s.Due() {
		t.Error("due after a round that read nothing")
	}
	s.RoundRead(1)
	if !s.Due() {
		t.Error("not due after a round that read objects")
	}
	s.Run(context.Background(), db.ReadTxn())
	if _, held := s.Errs(); held != h1.Err {
		t.Errorf("held error = %v, want the first hold's, its figures unchanged", held)
	}
	var info tables.Info
	s.Info(&info)
	if !info.PruneHeld || info.PruneHeldRemove != 3 || info.PruneHeldOf != 4 || !info.LastPrune.Equal(at) {
		t.Errorf("info = %+v", info)
	}
	s.Run(context.Background(), db.ReadTxn())
	s.Info(&info)
	if s.Held() || info.PruneHeld || !info.LastPrune.Equal(at.Add(time.Hour)) {
		t.Errorf("after a prune: Held %v, info %+v", s.Held(), info)
	}
}

// Restart replaces the ticker; an interval of zero stops the ticks.
func TestScheduleRestart(t *testing.T) {
	db, metas, _ := newTables(t)
	s := NewSchedule(db.ReadTxn(), Config{Tables: metas[:1], Interval: time.Hour, Prune: (&pruner{}).prune})
	defer s.Stop()
	s.Restart(time.Millisecond)
	within(t, chanOf(s.TickC()), "a tick of the new interval")
	s.Restart(0)
	if s.TickC() != nil {
		t.Error("ticks with an interval of zero")
	}
}

// The table gate says which tables prunes wait for, after the start
// timeout or when one was made uninitialized again, until all are
// initialized; the same tables keep the same error.
func TestTableGate(t *testing.T) {
	db, metas, initB := newTables(t)
	g := TableGate{metas: metas}
	g.Check(db.ReadTxn())
	if g.Err() != nil {
		t.Fatal("an error before any wait")
	}
	waiting, watch := g.Uninitialized(db.ReadTxn())
	g.TimedOut(time.Second, waiting, watch)
	if got := g.Err().Error(); got != "started after 1s without waiting any longer for tables to be initialized: b (prunes wait for them)" {
		t.Errorf("Err = %q", got)
	}
	err := g.Err()
	g.Check(db.ReadTxn())
	if g.Err() != err {
		t.Error("the same tables made a new error")
	}
	g.Woken()
	if g.Watch() != nil {
		t.Error("Watch after Woken")
	}
	initB()
	within(t, watch, "b's initialization")
	g.Check(db.ReadTxn())
	if g.Err() != nil || g.Watch() != nil {
		t.Errorf("Err %v once all are initialized", g.Err())
	}
	g.Wait([]string{"a"}, nil)
	if got := g.Err().Error(); got != "tables not initialized again: a (prunes wait for them)" {
		t.Errorf("Err = %q", got)
	}
}

// plan is a guard's plan returning remove and held.
type plan struct {
	mu           sync.Mutex
	remove, held int
	err          error
}

func (p *plan) set(remove, held int, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.remove, p.held, p.err = remove, held, err
}

func (p *plan) plan(context.Context, statedb.ReadTxn, iter.Seq2[*object, statedb.Revision]) (int, int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.remove, p.held, p.err
}

var quiet = slog.New(slog.DiscardHandler)

// The guard holds a prune over either bound, keeps one hold until the
// plan is within them again, and lets a confirmed hold run once.
func TestGuardHoldsOverTheBoundsUntilConfirmed(t *testing.T) {
	p := &plan{}
	g := NewGuard(5, 0.5, p.plan)
	check := func() *Hold {
		t.Helper()
		h, err := g.Check(context.Background(), nil, nil, quiet)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	for _, c := range []struct {
		remove, held int
		hold         bool
	}{{5, 10, false}, {6, 100, true}, {4, 7, true}, {3, 7, false}} {
		p.set(c.remove, c.held, nil)
		if h := check(); (h != nil) != c.hold {
			t.Errorf("remove %d of %d: hold %v, want %v", c.remove, c.held, h, c.hold)
		}
	}
	if g.Confirm() {
		t.Error("Confirm with no hold confirmed something")
	}
	p.set(9, 10, nil)
	h := check()
	if h == nil || h.Remove != 9 || h.Of != 10 || h.Err.Error() != "prune held: would remove 9 of 10 (bound: at most 5 and 50% of the target); Reconciler.ConfirmPrune runs it" {
		t.Fatalf("hold = %+v", h)
	}
	if !g.Confirm() {
		t.Fatal("Confirm of a hold confirmed nothing")
	}
	if h := check(); h != nil {
		t.Error("a confirmed hold held")
	}
	if h := check(); h == nil {
		t.Error("the prune after a confirmed one was not guarded")
	}
}

// A confirmation of an earlier hold confirms none that began after it.
func TestGuardConfirmationOfAnEarlierHold(t *testing.T) {
	p := &plan{}
	g := NewGuard(1, 0, p.plan)
	p.set(2, 2, nil)
	g.Check(context.Background(), nil, nil, quiet)
	g.Confirm()
	p.set(0, 2, nil)
	g.Check(context.Background(), nil, nil, quiet) // released
	p.set(2, 2, nil)
	if h, _ := g.Check(context.Background(), nil, nil, quiet); h == nil {
		t.Error("a new hold ran on the confirmation of the one before")
	}
}

// A plan's error, or counts below zero, are the prune's error; a nil
// guard guards nothing; the bound is described as set.
func TestGuardPlanErrors(t *testing.T) {
	p := &plan{}
	g := NewGuard(0, 0.25, p.plan)
	p.set(0, 0, errors.New("no target"))
	if _, err := g.Check(context.Background(), nil, nil, quiet); err == nil || err.Error() != "plan: no target" {
		t.Errorf("err = %v", err)
	}
	p.set(-1, 3, nil)
	if _, err := g.Check(context.Background(), nil, nil, quiet); err == nil || err.Error() != "plan returned remove=-1 held=3, want counts of zero or more" {
		t.Errorf("err = %v", err)
	}
	if h, err := (*Guard[*object])(nil).Check(context.Background(), nil, nil, quiet); h != nil || err != nil {
		t.Errorf("a nil guard: %v, %v", h, err)
	}
	if b := g.bound(); b != "at most 25% of the target" {
		t.Errorf("bound = %q", b)
	}
	if b := NewGuard(3, 0, p.plan).bound(); b != "at most 3" {
		t.Errorf("bound = %q", b)
	}
}

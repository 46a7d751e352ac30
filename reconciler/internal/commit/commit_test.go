package commit

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"go.uber.org/goleak"

	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/reconciler/internal/work"
	"github.com/converge-go/converge/reconciler/internal/work/worktest"
	"github.com/converge-go/converge/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture is a table of worktest.Obj and a Committer of it.
type fixture struct {
	db    *statedb.DB
	table statedb.RWTable[*worktest.Obj]
	queue *keyqueue.Queue[*worktest.Obj]
	c     *Committer[*worktest.Obj]
}

func newFixture(tb testing.TB, p Policy) *fixture {
	tb.Helper()
	db, table, objs, q := worktest.Table(tb)
	c := New(Config[*worktest.Obj]{DB: db, Objects: objs, Queue: q, Log: slog.New(slog.DiscardHandler), Rand: func() float64 { return 0 }}, p)
	return &fixture{db, table, q, c}
}

// insert writes n Pending objects and returns an op of each, as run with
// outcome err.
func (f *fixture) insert(n int, err error) []work.Op[*worktest.Obj] {
	wtxn := f.db.WriteTxn(f.table)
	for i := range n {
		f.table.Insert(wtxn, &worktest.Obj{ID: uint64(i), St: status.Pending()})
	}
	wtxn.Commit()
	return f.reset(nil, err)
}

func (f *fixture) kind(id uint64) status.Kind {
	o, _, _ := f.table.Get(f.db.ReadTxn(), worktest.ByID.Query(id))
	return o.St.Kind
}

func TestACommitWritesEachOutcomeInOneTransaction(t *testing.T) {
	f := newFixture(t, Policy{})
	ops := f.insert(2, nil)
	ops[1].Err = errors.New("target said no")
	before := f.table.Revision(f.db.ReadTxn())
	out := f.c.Commit(ops, false, time.Now())
	if out.Committed != 2 || out.Failed != 1 {
		t.Fatalf("committed %d, failed %d; want 2, 1", out.Committed, out.Failed)
	}
	if len(out.Wrote) != 1 || out.Wrote[0] != (Range{before + 1, before + 2}) {
		t.Fatalf("wrote %v; want the one range %d-%d", out.Wrote, before+1, before+2)
	}
	if f.kind(0) != status.KindDone || f.kind(1) != status.KindError {
		t.Fatalf("statuses %v, %v; want Done, Error", f.kind(0), f.kind(1))
	}
	if got := f.queue.Figures().Retrying; got != 1 {
		t.Fatalf("%d keys retrying; want the failed one", got)
	}
}

func TestAStatusIsNotWrittenOverANewerVersion(t *testing.T) {
	f := newFixture(t, Policy{})
	ops := f.insert(1, nil)
	wtxn := f.db.WriteTxn(f.table)
	f.table.Insert(wtxn, &worktest.Obj{ID: 0, St: status.Pending()}) // a newer version, a status of its own
	wtxn.Commit()
	if out := f.c.Commit(ops, false, time.Now()); len(out.Wrote) != 0 || ops[0].Written {
		t.Fatalf("wrote %v (written %v) over a newer version", out.Wrote, ops[0].Written)
	}
	if f.kind(0) != status.KindPending {
		t.Fatalf("newer version's status %v; want it left Pending", f.kind(0))
	}
}

func TestTheLastAttemptFailsForGood(t *testing.T) {
	f := newFixture(t, Policy{MaxAttempts: 2})
	ops := f.insert(3, errors.New("still failing"))
	ops[0].Attempt = 2                                // its last
	ops[1].Attempt, ops[1].Err = 2, work.ErrEntryLost // no failure of its own
	ops[2].Attempt, ops[2].Spared = 2, true           // the breaker spared it
	f.c.Commit(ops, false, time.Now())
	if !work.IsTerminal(ops[0].Err) || work.IsTerminal(ops[1].Err) || work.IsTerminal(ops[2].Err) {
		t.Fatalf("terminal: %v, %v, %v; want only the first", ops[0].Err, ops[1].Err, ops[2].Err)
	}
	if got := f.queue.Figures().Retrying; got != 2 {
		t.Fatalf("%d keys retrying; want the two that did not fail for good", got)
	}
	f.c.SetPolicy(Policy{MaxAttempts: 3})
	ops = f.insert(1, errors.New("failing again"))
	ops[0].Attempt = 2
	if f.c.Commit(ops, false, time.Now()); work.IsTerminal(ops[0].Err) {
		t.Fatal("attempt 2 failed for good under a policy of 3 set since")
	}
}

func TestAFailureCutShortByAStopIsNoOutcome(t *testing.T) {
	f := newFixture(t, Policy{})
	ops := f.insert(1, errors.New("context canceled"))
	out := f.c.Commit(ops, true, time.Now())
	if out.Committed != 0 || len(out.Wrote) != 0 {
		t.Fatalf("committed %d, wrote %v for an op cut short", out.Committed, out.Wrote)
	}
	if got := f.queue.Figures().Queued; got != 1 {
		t.Fatalf("%d keys queued; want the op cut short queued again", got)
	}
}

// BenchmarkCommit measures committing 1000 successful updates: one write
// transaction of compare-and-swaps writing Done statuses, the keys
// settled. Besides the time per object it reports locked-ns/object, the
// part of it spent in the write transaction, when the table is locked to
// every other writer (all of BenchmarkCommitFloor's time is).
func BenchmarkCommit(b *testing.B) {
	f := newFixture(b, Policy{})
	ops := f.insert(1000, nil)
	var locked time.Duration
	for b.Loop() {
		b.StopTimer()
		ops = f.reset(ops, nil)
		b.StartTimer()
		now := time.Now()
		f.c.prepare(ops, now)
		t0 := time.Now()
		f.c.write(ops, now)
		locked += time.Since(t0)
		var out Outcome
		if f.c.settle(ops, now, &out); out.Failed != 0 {
			b.Fatalf("%d failed", out.Failed)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/(float64(b.N)*1000), "ns/object")
	b.ReportMetric(float64(locked.Nanoseconds())/(float64(b.N)*1000), "locked-ns/object")
}

// BenchmarkCommitFloor is BenchmarkCommit's yardstick: the same 1000
// compare-and-swaps of Done statuses in one write transaction, written
// directly, with none of Commit's bookkeeping.
func BenchmarkCommitFloor(b *testing.B) {
	f := newFixture(b, Policy{})
	ops := f.insert(1000, nil)
	for b.Loop() {
		b.StopTimer()
		ops = f.reset(ops, nil)
		b.StartTimer()
		wtxn := f.db.WriteTxn(f.table)
		for i := range ops {
			ops[i].Updated.St = status.Done()
			if _, _, err := f.table.CompareAndSwap(wtxn, ops[i].Rev, ops[i].Updated); err != nil {
				b.Fatal(err)
			}
		}
		wtxn.Commit()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/(float64(b.N)*1000), "ns/object")
}

// BenchmarkCommitErrors measures committing 1000 failed updates: Error
// statuses plus 1000 retries queued (and then dropped, untimed).
func BenchmarkCommitErrors(b *testing.B) {
	f := newFixture(b, Policy{})
	errFail := fmt.Errorf("bench failure")
	ops := f.insert(1000, errFail)
	for b.Loop() {
		b.StopTimer()
		f.c.cfg.Queue = keyqueue.New[*worktest.Obj](func(k string) string { return k })
		ops = f.reset(ops, errFail)
		b.StartTimer()
		if out := f.c.Commit(ops, false, time.Now()); out.Failed != 1000 {
			b.Fatalf("%d failed", out.Failed)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/(float64(b.N)*1000), "ns/object")
}

// reset makes ops again of the table's objects, as run with err.
func (f *fixture) reset(ops []work.Op[*worktest.Obj], err error) []work.Op[*worktest.Obj] {
	ops = ops[:0]
	for o, rev := range f.table.All(f.db.ReadTxn()) {
		ops = append(ops, work.Op[*worktest.Obj]{Task: keyqueue.Task[*worktest.Obj]{Obj: o, Rev: rev, StatusID: o.St.ID(), Since: o.St.UpdatedAt}, Updated: &worktest.Obj{ID: o.ID, St: o.St}, Err: err, Ran: true})
	}
	return ops
}

package collect

import (
	"log/slog"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/changes"
	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/reconciler/internal/work"
)

// Collector is a reconciler's change feed and its first stage, collect:
// it reads the table's changes, across stops and starts of the reconcile
// job, hands what they ask for to the key queue, and takes a round's work
// from the queue (see Collect). It owns what reading the changes keeps:
// the last revision read, the backlog's mark, the revisions of the
// reconciler's own writes and the prunes' snapshots behind stale statuses.
// Make one with New; the zero value is not usable. A Collector is not safe
// for concurrent use: the reconcile job's goroutine owns it.
type Collector[Obj any] struct {
	cfg     Config[Obj]
	limits  Limits
	changes *changes.Feed[Obj] // the table's changes, across stops
	lastRev statedb.Revision   // last change read
	backlog statedb.Revision   // the table's revision when the job first ran: what is deferred
	started bool               // whether the job has run
	stales  staleness          // the prunes' snapshots behind stale statuses

	// The state of one run of the reconcile job, reset by Open.
	own   ownWrites       // revisions of the statuses commits wrote
	watch <-chan struct{} // closed when the table has changes not read
	work  []work.Op[Obj]  // Collect's buffer
	// reserve is Collect's share of rounds for retries and deferred
	// changes, carried from round to round.
	reserve reserve
	// figures is Collect's copy of the key queue's figures while it reads
	// changes, read again whenever a change alters the queue (see
	// collectChange).
	figures keyqueue.Figures
}

// Config is what a Collector works with, set once by New.
type Config[Obj any] struct {
	DB      *statedb.DB
	Objects *work.Objects[Obj]
	Queue   *keyqueue.Queue[Obj] // what is known of each key, which Collect feeds and takes from
	Log     *slog.Logger
}

// Limits is what Configure may change of how a round is collected.
type Limits struct {
	Concurrency int // the workers; with one, a change of a key nothing holds is not tracked
	RoundSize   int // the largest round, for how far priorities read ahead
}

// New returns a Collector of cfg's table, within limits. Its changes
// begin now, not at the first Open, so that no delete before is missed.
func New[Obj any](cfg Config[Obj], limits Limits) *Collector[Obj] {
	return &Collector[Obj]{cfg: cfg, limits: limits, changes: changes.New(cfg.DB, statedb.Table[Obj](cfg.Objects.Table))}
}

// SetLimits changes the limits from the next Collect on.
func (c *Collector[Obj]) SetLimits(l Limits) { c.limits = l }

// Open opens the table's changes for a run of the reconcile job (see
// changes.Feed.Open) and readies the run's state. At the first open, what
// the table holds is the backlog: it waits behind fresh changes.
func (c *Collector[Obj]) Open() error {
	opened, err := c.changes.Open()
	if err != nil {
		return err
	}
	if !c.started {
		c.started, c.backlog = true, opened
	}
	c.own, c.watch, c.work = ownWrites{}, closedChan, nil
	return nil
}

// Close closes the changes at the end of a run; the next Open reads on
// from where they stopped.
func (c *Collector[Obj]) Close() { c.changes.Close() }

// Watch returns the channel closed when there is more to collect: changes
// not read, or work left for the next round.
func (c *Collector[Obj]) Watch() <-chan struct{} { return c.watch }

// Wrote records that a commit wrote the statuses at the revisions lo to
// hi: their changes are the reconciler's own (see ownWrites).
func (c *Collector[Obj]) Wrote(lo, hi statedb.Revision) {
	c.own.add(lo, hi, c.lastRev)
}

// PassOverOwn has the changes at the revisions of the reconciler's own
// writes passed over unread, their status not even looked at (see
// changes.Feed.PassOverOwn): for a reconciler writing with others, half
// the changes it reads are its own writes.
func (c *Collector[Obj]) PassOverOwn() { c.changes.PassOverOwn(c.own.has) }

// Progress returns the revision up to which every change read is done:
// all but those queued or running (their successors included), or
// deferred, as lows tells (see keyqueue.Queue.Lows). Retries are told
// apart by the retry low watermark. While a read that stopped short on
// its budget has not been followed to the end, it is no further than the
// end of the last read that went through: an object written below where
// the short read stopped may come later, with a newer write (see
// changes.Feed.Drained).
func (c *Collector[Obj]) Progress(lows keyqueue.Lows) statedb.Revision {
	rev := min(c.lastRev, c.changes.Drained())
	lower := func(low statedb.Revision) {
		if low != 0 && low-1 < rev {
			rev = low - 1
		}
	}
	lower(lows.Asked)
	lower(lows.Deferred)
	return rev
}

// SawPrune records the snapshot txn of a prune, whose statuses handed
// out went up to cut, if changes up to its revision were still unread
// (see staleness).
func (c *Collector[Obj]) SawPrune(txn statedb.ReadTxn, cut uint64) {
	if rev := c.cfg.Objects.Table.Revision(txn); rev > c.lastRev {
		c.stales.sawPrune(txn, rev, cut)
	}
}

// RemembersPrunes reports whether a prune's snapshot is remembered: a
// round may then look objects up in the table (see staleness).
func (c *Collector[Obj]) RemembersPrunes() bool { return c.stales.any() }

// closedChan is a closed channel: receiving from it never blocks.
var closedChan = func() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// ownWrites remembers the revisions at which the loop's commits wrote
// statuses, so that collect can tell an Error status it wrote itself from
// one a user wrote back without looking the key up: in a retry storm those
// are most of the changes read. Every status a commit writes takes a
// revision within the commit's range, and nobody else writes the table in
// that transaction. The ranges are in increasing order, one per commit
// that wrote; a new run of the loop starts empty.
type ownWrites struct {
	ranges []revRange
}

type revRange struct{ lo, hi statedb.Revision }

// add records that a commit wrote the revisions lo to hi (both included),
// and forgets the ranges that changes up to read have passed.
func (w *ownWrites) add(lo, hi, read statedb.Revision) {
	if len(w.ranges) > 0 {
		w.forget(read)
	}
	if n := len(w.ranges); n > 0 && w.ranges[n-1].hi+1 == lo {
		w.ranges[n-1].hi = hi
		return
	}
	w.ranges = append(w.ranges, revRange{lo, hi})
}

// has reports whether rev was written by a commit. Calls must come in
// increasing order of rev, as changes are read.
func (w *ownWrites) has(rev statedb.Revision) bool {
	w.forget(rev - 1)
	return len(w.ranges) > 0 && w.ranges[0].lo <= rev
}

// forget drops the ranges that end at or before rev.
func (w *ownWrites) forget(rev statedb.Revision) {
	i := 0
	for i < len(w.ranges) && w.ranges[i].hi <= rev {
		i++
	}
	if i > 0 {
		w.ranges = append(w.ranges[:0], w.ranges[i:]...)
	}
}

// reserve is the room of rounds kept for retries and deferred changes
// while there are any: an eighth, counted over successive rounds, so that
// rounds of fewer than eight objects keep it too (one round of one object
// in eight).
type reserve struct{ owed float64 }

// take returns the reserve of a round with room left.
func (v *reserve) take(left int) int {
	v.owed += float64(left) / 8
	n := min(int(v.owed), left)
	v.owed -= float64(n)
	return n
}

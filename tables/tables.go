package tables

import (
	"fmt"
	"sync"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
)

// Names of the tables that [Cell] provides: what `db/show` takes in a hive
// shell or script, and what the StateDB HTTP handler serves them under.
const (
	ReconcilersTableName = "reconcilers"
	RetriesTableName     = "reconciler-retries"
)

// Cell provides the two tables in a hive, for reconcilers to keep current
// and for operators and tests to read. Include it once, next to
// statedb.Cell. It provides *[Tables]; the same value as a [Writer], which
// reconciler.Params takes (optionally: without one reconcilers keep no
// tables); and statedb.Table[*Info] and statedb.Table[*RetryInfo] for
// readers.
var Cell = cell.Module(
	"reconciler-tables",
	"Tables of reconcilers and their failing objects",

	cell.Provide(
		New,
		func(t *Tables) Writer { return t },
		func(t *Tables) statedb.Table[*Info] { return t.reconcilers },
		func(t *Tables) statedb.Table[*RetryInfo] { return t.retries },
	),
)

// Writer is what a reconciler keeps its rows with. [Tables] implements it;
// reconciler.Params takes one, which [Cell] provides. A reconciler calls
// Write at most once per round, and only when a figure of its row changed
// or failures of its objects did: one without failures costs one small
// write per round in which objects were reconciled, and none while idle.
//
// A reconciler calls Write from its reconcile job and Refreshed from its
// refresh job, which run concurrently: implementations must be safe for
// concurrent use.
type Writer interface {
	// Write stores, in one transaction, info as the row of the reconciler
	// info.ID unless info is nil (the row did not change), and retries as
	// the rows of that reconciler's objects whose failures (or drift)
	// changed: an entry with zero Attempts and not Drifted removes its
	// object's row. Write keeps info
	// and may modify it (it keeps the LastRefresh that Refreshed wrote);
	// it does not keep retries.
	Write(info *Info, retries []RetryInfo)

	// Refreshed records at, the end of a refresh sweep, as LastRefresh in
	// the row of the reconciler id, creating a running row if it has none.
	Refreshed(id string, at time.Time)
}

// Tables is the reconcilers table and the reconciler-retries table of a
// StateDB, the [Writer] that reconcilers keep them with. Read them with
// Reconcilers and Retries; reconcilers write them with Write and
// Refreshed. Make one with [New], or include [Cell] in the hive. The zero
// Tables is not usable. A Tables is safe for concurrent use: every write
// is a StateDB write transaction.
type Tables struct {
	db          *statedb.DB
	reconcilers statedb.RWTable[*Info]
	retries     statedb.RWTable[*RetryInfo]

	mu      sync.Mutex
	claimed map[string]bool // IDs taken with Claim
}

// New registers the tables in db and returns them. It fails if db has
// tables of those names already.
func New(db *statedb.DB) (*Tables, error) {
	reconcilers, err := statedb.NewTable(db, ReconcilersTableName, InfoByID)
	if err != nil {
		return nil, err
	}
	retries, err := statedb.NewTable(db, RetriesTableName, RetryByKey, RetryByReconciler)
	if err != nil {
		return nil, err
	}
	return &Tables{db: db, reconcilers: reconcilers, retries: retries}, nil
}

// Claim reserves id, a reconciler's ID, for one reconciler, and fails if
// another has claimed it: two reconcilers with one ID would share a row.
// reconciler.Register claims its ID through every Writer that has this
// method, and refuses a second reconciler of a module with the same name.
func (t *Tables) Claim(id string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.claimed[id] {
		return fmt.Errorf("tables: another reconciler has the ID %q", id)
	}
	if t.claimed == nil {
		t.claimed = map[string]bool{}
	}
	t.claimed[id] = true
	return nil
}

// Reconcilers returns the "reconcilers" table: one row per reconciler.
func (t *Tables) Reconcilers() statedb.Table[*Info] { return t.reconcilers }

// Retries returns the "reconciler-retries" table: one row per failing
// object.
func (t *Tables) Retries() statedb.Table[*RetryInfo] { return t.retries }

// Write implements [Writer].
func (t *Tables) Write(info *Info, retries []RetryInfo) {
	if info == nil && len(retries) == 0 {
		return
	}
	wtxn := t.db.WriteTxn(t.reconcilers, t.retries)
	defer wtxn.Commit()
	if info != nil {
		// The refresh job writes LastRefresh; keep it.
		info.LastRefresh = time.Time{}
		if cur, _, found := t.reconcilers.Get(wtxn, InfoByID.Query(info.ID)); found {
			info.LastRefresh = cur.LastRefresh
		}
		t.reconcilers.Insert(wtxn, info)
	}
	for _, r := range retries {
		row := &r // a copy: the table keeps it
		if r.Attempts == 0 && !r.Drifted {
			t.retries.Delete(wtxn, row)
		} else {
			t.retries.Insert(wtxn, row)
		}
	}
}

// Refreshed implements [Writer].
func (t *Tables) Refreshed(id string, at time.Time) {
	wtxn := t.db.WriteTxn(t.reconcilers)
	defer wtxn.Commit()
	row := Info{ID: id, State: StateRunning}
	if cur, _, found := t.reconcilers.Get(wtxn, InfoByID.Query(id)); found {
		row = *cur
	}
	row.LastRefresh = at
	t.reconcilers.Insert(wtxn, &row)
}

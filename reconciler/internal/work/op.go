package work

import (
	"time"

	"github.com/converge-go/converge/reconciler/internal/drift"
	"github.com/converge-go/converge/reconciler/internal/keyqueue"
)

// Op is one operation of a round: the task collect took (one version of
// one object to apply, or one deleted object), what running it reported,
// and what commit made of it. Collect makes it, the runner fills in the
// outcome, commit writes the status and settles the key, and the round's
// buffers reuse it. An Op belongs to one stage at a time; it is not safe
// for concurrent use.
type Op[Obj any] struct {
	keyqueue.Task[Obj]
	S       *keyqueue.State[Obj] // nil: an untracked task of the inline executor (see keyqueue.State)
	Key     string               // S's key, or for an untracked task "" until needed
	Attempt int                  // which attempt this is for a tracked key (1: the first), else 0
	LastErr error                // the error of the attempt before, if it failed
	Updated Obj                  // an update's clone, as Update left it
	Started int64                // when the operation started (Unix ns)
	Err     error
	Recheck time.Duration // an update that succeeded: re-check after this (RecheckAfter)
	Drift   int64         // drift a refresh reported repaired (ReportRepaired; a batch's on its first refresh), for commit to count
	// The flags last, together: a round copies and clears an Op per
	// object, and padding between them costs.
	Ran     bool          // the operation returned and Err is its outcome
	Written bool          // commit wrote the status of an update
	Over    bool          // ... over a changed object carrying the same status: the version it applied
	NoKey   bool          // the status could not be written: the object had no primary key
	Spared  bool          // a failure while the breaker was open: it counts no attempt
	Checked drift.Verdict // what the drift check said (WithDriftCheck); NotChecked if it did not run or failed
	// Unapplied: the key's last update failed; report-only repairs drift
	// (see the reconciler's driftPrepare).
	Unapplied bool
}

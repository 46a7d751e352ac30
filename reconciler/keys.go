package reconciler

import "github.com/converge-go/converge/reconciler/internal/keyqueue"

// keys is what the reconciler knows of the keys of its table, across stops
// and starts of its loop: each key's lifecycle, what makes a status found
// on one stale, and the re-checks asked for. Its zero value is not usable:
// Register makes the queue. The reconcile job's goroutine owns it.
type keys[Obj any] struct {
	lifecycles *keyqueue.Queue[Obj] // each key's lifecycle, re-checks, deferred changes and cuts
	stales     staleness            // the prunes' snapshots behind stale statuses
}

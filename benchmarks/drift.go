package main

import (
	"context"
	"sync/atomic"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler"
)

// driftCounter is the drift check of a refresh of objects in sync
// (setup.driftChecks): every object is in sync, so no Update follows. It
// counts its calls and closes reached once they reach target. Safe for
// concurrent use.
type driftCounter struct {
	checks  atomic.Int64
	target  int64
	reached chan struct{}
}

func newDriftCounter(target int) *driftCounter {
	return &driftCounter{target: int64(target), reached: make(chan struct{})}
}

func (d *driftCounter) check(context.Context, statedb.ReadTxn, statedb.Revision, *object) (bool, error) {
	if d.checks.Add(1) == d.target {
		close(d.reached)
	}
	return true, nil
}

// option is WithDriftCheck with d's check.
func (d *driftCounter) option() reconciler.Option { return reconciler.WithDriftCheck(d.check) }

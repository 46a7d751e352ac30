package reconciler_test

import (
	"context"
	"fmt"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler"
)

// The setup step (WithSetup) under chaos: every reconciler has one, and
// the setupFails move makes it fail a few times at the next start of the
// hive (in place or a new generation), plainly or asking RetryAfter. The
// model checks that no operation or prune of a run starts before its
// setup succeeded (chaosOps.begin), that setup is not called while paused,
// after Stop returned, or again once it succeeded in a run; healAndCheck
// then checks that everything converged.

// setupOption is WithSetup of ops' step; at the first start of a run it
// draws failures too, so that the very first run is set up with failures.
func (r *chaosRun) setupOption(ops *chaosOps) reconciler.Option {
	if r.gens == 1 && r.rng.IntN(3) == 0 {
		ops.target.with(func() { ops.setupFails = 1 + r.rng.IntN(4) })
		r.logf("%ssetup fails %d time(s) at the first start", ops.label(), ops.setupFails)
	}
	return reconciler.WithSetup(ops.setupStep)
}

// setupFailsMove makes, half of the time, the setup step of each
// reconciler fail 1 to 4 times at the next start of the hive.
func (r *chaosRun) setupFailsMove() {
	if r.rng.IntN(2) == 0 {
		return
	}
	for _, rec := range r.recs {
		n := 1 + r.rng.IntN(4)
		rec.target.with(func() { rec.setupFails = n })
		r.logf("%ssetup fails %d time(s) at the next start", rec.label(), n)
	}
}

// setupStep is the setup step of ops' run: it fails while the reconciler's
// setupFails says so, else marks the run set up.
func (o *chaosOps) setupStep(ctx context.Context, _ statedb.ReadTxn) error {
	g := o.gate()
	defer o.callEnd()
	var err error
	o.target.with(func() {
		switch {
		case o.stopped:
			o.violate("setup called after Stop returned")
		case g.paused:
			o.violate("setup started while paused")
		case o.setupDone:
			o.violate("setup called again once it succeeded in this run")
		}
		if o.setupFails > 0 {
			o.setupFails--
			err = fmt.Errorf("setup: %w", errChaos)
			if o.setupFails%2 == 1 {
				err = reconciler.RetryAfter(2*time.Millisecond, err)
			}
			return
		}
		o.setupDone = true
	})
	return err
}

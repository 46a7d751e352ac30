package reconciler_test

import (
	"context"
	"errors"
	"iter"
	"syscall"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler"
)

// A target that fails as a whole (a BPF map full, a remote API gone) is
// called once per probe rather than once per object per backoff step.
// Errors about one object (a bad value) neither open the breaker nor
// close it.
func ExampleWithCircuitBreaker() {
	aboutTarget := func(err error) bool {
		return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.ECONNREFUSED)
	}
	opts := []reconciler.Option{
		// Open after 5 objects failed in a row; probe after 500ms, then
		// 1s, 2s, ... up to WithRetry's maximum.
		reconciler.WithCircuitBreaker(5, 500*time.Millisecond, aboutTarget),
		reconciler.WithRetry(100*time.Millisecond, 30*time.Second),
	}
	_ = opts // passed to reconciler.Register
}

// leases grants each object a lease in the target that expires after a
// minute: Update renews it and asks to be called again before it expires.
type leases struct{}

func (leases) Update(ctx context.Context, _ statedb.ReadTxn, _ statedb.Revision, g *Greeting) error {
	// ... grant or renew the lease of g for a minute ...
	reconciler.RecheckAfter(ctx, 45*time.Second)
	return nil
}

func (leases) Delete(context.Context, statedb.ReadTxn, statedb.Revision, *Greeting) error {
	return nil // ... revoke the lease ...
}

func (leases) Prune(context.Context, statedb.ReadTxn, iter.Seq2[*Greeting, statedb.Revision]) error {
	return nil
}

// An Update that asks for its object to be reconciled again, one object
// at a time, rather than refreshing the whole table.
func ExampleRecheckAfter() {
	var ops reconciler.Operations[*Greeting] = leases{}
	_ = ops // passed to reconciler.Register
}

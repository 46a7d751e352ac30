// Package opreport carries what an operation reports while it runs,
// through the context it was given: drift it repaired
// (reconciler.ReportRepaired) and a re-check it asks for
// (reconciler.RecheckAfter).
//
// Each call of an operation gets a [Context] of its own from [Contexts];
// the reconciler closes it once the operation returns, which reads the
// reports and makes any later one (from a goroutine the operation
// started) ignored. A prune, which has no Contexts, attaches [Reports]
// with [With].
package opreport

import (
	"context"
	"sync/atomic"
	"time"
)

type key struct{}

// Reports collects the reports of one call. The zero value is ready to
// use; Reports are safe for concurrent use and do not allocate.
type Reports struct {
	drift   atomic.Int64
	recheck atomic.Int64 // a time.Duration; 0 asks for none
	closed  atomic.Bool
}

// From returns the reports ctx carries, or nil: a context that does not
// come from a reconciler's call.
func From(ctx context.Context) *Reports {
	r, _ := ctx.Value(key{}).(*Reports)
	return r
}

// With returns ctx carrying r.
func With(ctx context.Context, r *Reports) context.Context {
	return context.WithValue(ctx, key{}, r)
}

// Repaired adds n > 0 pieces of drift repaired, unless r is closed.
func (r *Reports) Repaired(n int) {
	if n > 0 && !r.closed.Load() {
		r.drift.Add(int64(n))
	}
}

// RecheckAfter asks for a re-check d > 0 after the call succeeds, unless r
// is closed; a later ask replaces it.
func (r *Reports) RecheckAfter(d time.Duration) {
	if d > 0 && !r.closed.Load() {
		r.recheck.Store(int64(d))
	}
}

// Close ignores the reports made from now on and returns those made.
func (r *Reports) Close() (drift int64, recheck time.Duration) {
	r.closed.Store(true)
	return r.drift.Load(), time.Duration(r.recheck.Load())
}

// TakeRepaired returns the drift repaired so far and counts from zero
// again (for a prune, whose reports are never closed).
func (r *Reports) TakeRepaired() int { return int(r.drift.Swap(0)) }

// Context is the context of one call: its parent's, with that call's
// reports (see Contexts).
type Context struct {
	context.Context
	Reports Reports
}

// Value returns the call's reports for this package's key, and asks the
// parent otherwise.
func (c *Context) Value(k any) any {
	if k == (key{}) {
		return &c.Reports
	}
	return c.Context.Value(k)
}

// Contexts hands out the contexts of calls, each used once: a report made
// with one after its call returned reaches no other call. They are made
// PerAlloc at a time. The zero value is ready to use; it is not safe for
// concurrent use (a reconciler's loop and each worker have their own).
type Contexts struct {
	free []Context
}

// PerAlloc is how many call contexts one allocation makes: one allocation
// in so many calls (a round of a thousand single operations makes one), and
// a context that outlives its call keeps so many (40 bytes each, 40 kB)
// from the garbage collector.
const PerAlloc = 1024

// Next returns the context of a new call under parent.
func (cs *Contexts) Next(parent context.Context) *Context {
	if len(cs.free) == 0 {
		cs.free = make([]Context, PerAlloc)
	}
	c := &cs.free[0]
	cs.free = cs.free[1:]
	c.Context = parent
	return c
}

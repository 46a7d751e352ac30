// Package ident hands out the identities of reconciliation statuses.
//
// An identity names the write that created a status. Identities increase:
// a status created after another has a greater identity, so the reconciler
// can tell that a status is older than a moment it noted with [Last] (for
// instance, older than a delete it read). They are meaningful only within
// one process and are never encoded. Next and Last are safe for concurrent
// use.
package ident

import "sync/atomic"

var last atomic.Uint64

// Next returns a new identity, greater than every identity returned before.
func Next() uint64 { return last.Add(1) }

// Last returns the greatest identity handed out so far (0 if none): every
// status created before the call has an identity no greater than it.
func Last() uint64 { return last.Load() }

// Package collect is a reconciler's change feed and the first stage of its
// round: it reads the table's changes, tells the key queue what they ask
// for, and takes a round's work (see [Collector]). What makes a status
// found on an object put back stale, as far as the prunes tell, lives here
// too (staleness), beside the key queue's own memory of it.
package collect

// Package sets serves the objects of a StateDB table that several named
// reconcilers share through a [status.Set], one entry per reconciler
// (reconciler.WithName, and a getStatus and setStatus that read and write
// the name's entry). It does what such tables otherwise need written by
// hand around the reconcilers (as Cilium's pkg/node/writer.go does):
//
//   - a name that leaves: [Table.Retire] removes a name's entry from every
//     object, and [Retired] declares names gone for good in a hive, whose
//     job retires them once the hive has started and keeps objects written
//     later free of them, so that no object stays Pending for a name
//     nobody serves;
//   - a name that joins needs nothing: its reconciler reads a missing entry
//     as Pending ([status.Set.Get]) and reconciles every object already in
//     the table;
//   - refresh one name on demand and wait: [Table.Refresh] marks objects
//     for one name's reconciler to apply again, and [Marked.Wait] waits
//     until each was attempted, with the objects that failed;
//   - wait across names: [Table.Wait] waits until every named reconciler
//     has settled the table as it is at the call.
//
// Writes go in transactions of at most [MaxObjectsPerTxn] objects, each
// object read again in the transaction that writes it, so a concurrent
// write is never overwritten. Waits wake on StateDB change iterators and
// never poll. Bad arguments are refused with errors wrapping
// reconciler.ErrInvalidConfig, and a panic in a function given to [Of] is
// returned as an error wrapping [ErrFuncPanicked], never propagated.
//
// The package starts no goroutine but the job of [Retired], a hive job.
package sets

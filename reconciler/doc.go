// Package reconciler drives objects in a StateDB table into a target system.
//
// The objects carry a [status.Status] (or a [status.Set] when several
// reconcilers share them). Whoever writes desired state sets the status to
// Pending; the reconciler registered with [Register] notices, calls the
// user's [Operations] (or [BatchOperations], which may implement
// [BatchProcessor] to get a batch's deletes and updates in one call, and
// may serve alone) and writes Done or Error back.
// Deleted objects are handed to Delete. Failures are retried with
// exponential backoff; [Operations.Prune] is given the whole desired set
// after the table is initialized and then periodically, so the target can
// drop what should not exist; optionally, objects are refreshed periodically
// to repair drift.
//
// # Guarantees
//
//   - An object whose status is Pending or Refreshing is handed to Update,
//     possibly skipping intermediate versions, and its status ends Done or
//     Error for the version that was handed over.
//   - A deleted object is handed to Delete, even if it was deleted while the
//     reconciler was busy. A failed Delete is retried until it succeeds or
//     the object is inserted again.
//   - A status is written with compare-and-swap: it never overwrites a newer
//     version of the object. If the only change since is another
//     reconciler's status (the object's own status identity is unchanged),
//     the result is still recorded rather than redone.
//   - At most one operation per object is in flight, with any number of
//     workers, and an object's versions are applied in revision order;
//     at most one newer version (or a delete) waits behind the one in
//     flight. Once the table is quiet, the target holds the latest version
//     of every object and nothing of deleted ones, whatever was written
//     meanwhile: reverts to an earlier value, identical re-inserts, and a
//     delete followed by the very object again included (after a delete, an
//     object with the same status identity is new work).
//   - An object put back as it was before, with a status older than what
//     the reconciler knows of its key, is applied again even if that
//     status is Done; see "Objects put back" for exactly when.
//   - An operation starts only while the reconciler may start one: not
//     paused, no prune running, not stopping. This is asked just before
//     the operation is called: one whose start was decided as a Pause or
//     a prune began counts as started before it, and may still reach its
//     first line as Pause returns or Prune is called.
//   - New versions and deletes are taken before retries, refresh marks and
//     the backlog (what the table holds when the reconciler first starts),
//     so those never delay a later write by more than a round, however many
//     there are.
//   - With [WithPriority], fresh changes of higher priority go first, but a
//     share of every round goes to those that have waited longest: a change
//     with n changes written before it still waiting is applied within
//     about (n+1)/(share × round size) full rounds, whatever is written
//     after it (with workers a round has only the room they left: about
//     (n+1)/share objects are taken first at most).
//   - Stopping the hive and starting it again resumes where it stopped:
//     work cut short by the stop is carried over (and WaitUntilReconciled
//     counts it), and changes made meanwhile, deletes included, converge.
//     So do deletes made between Register and the first start.
//   - Durations, times and sizes saturate: no option value, however large,
//     makes the reconciler spin or stop.
//   - A batch result belongs to its entry, wherever [BatchOperations] (or
//     [BatchProcessor], in either slice) left it.
//
// # Objects put back
//
// A status that asks for no work (Done, or an Error the reconciler wrote)
// is believed when it is read back, so that reading the reconciler's own
// writes, or another reconciler's in a [status.Set], costs nothing. But a
// writer that read an object earlier (a restore, an API, a user) may put
// it back as it was, status included, after the target changed. Such an
// object is applied again, rather than believed, when its status is no
// newer than one of these:
//
//   - a delete of its key that the reconciler read. It remembers, as 64-bit
//     hashes, the keys of the last 8192 deletes it read at least and 16384
//     at most (a hash shared by two keys costs a needless Update);
//   - a prune that ran without the object while its delete was unread. The
//     snapshot of every such prune is kept until the changes read pass it,
//     however many prunes run meanwhile;
//   - a newer version of the key that the reconciler holds (queued, running
//     or waiting for a retry), or that it applied and then found written
//     back over by the older one (remembered as a delete is).
//
// A Done status without identity (a literal, or decoded outside a
// status.Set: a restore from a backup) has no age, so it counts as no
// newer than any of these: once per delete remembered, and whenever a
// newer version is held or a prune's snapshot lacks the object.
//
// Deletes the reconciler did not read because the hive stopped first, or
// that were made while it was stopped, are read at the next start, before
// the object put back; one whose key is back in the table when it is read
// is not applied (the object put back is newer, and is), but is
// remembered as any delete read. A delete made while the hive is stopped
// (or before its first start) of an object put back before the start is
// not seen at all: no change iterator is open then, and the table shows
// the object as written again. The target was not changed either, so its
// status is believed as for any object written again; write it back
// Pending to have it applied. What the reconciler remembers lives as long
// as the reconciler, across stops and starts.
//
// Otherwise the status is believed, as in the StateDB reconciler: past the
// keys remembered, or for a Done written back over a newer version that was
// applied and committed, with no delete read in between. Such an object
// stays as its status says until it changes or a refresh ([WithRefreshing])
// applies it again. To put an object back without doubt, write it with a
// Pending status, or use CompareAndSwap.
//
// # Several reconcilers of one table
//
// Reconcilers of one table (the names of a [status.Set], or each with a
// status field of its own) write the statuses they settle close together
// in one write transaction, and the statuses of one object version in one
// object write: the object is written once for all of them, not once per
// reconciler. The first to commit writes for the others waiting; it waits
// for those in a round (reading changes or calling operations) at most
// 10 ms, and never again for one still in its round when that ran out
// (an Update that blocks) until that one commits: a slow operation of one
// costs the others one wait of 10 ms at most. Each object is
// compare-and-swapped as it would be alone, with each reconciler's own
// setStatus on one clone of the version they applied (or, for those of one
// set given by [WithStatusSet], one copy of the set with all their
// statuses); if it changed since, each reconciler writes its status as it
// does alone. With several
// reconcilers, the changes an Update makes to its object are stored only
// for the first reconciler in the write, as when the reconcilers wrote in
// turn only the first write's were: another's are lost, its status Done
// all the same, and nothing applies the object again for them. Keep what
// an Update must store in the target, or in a table of its own, when a
// table has several reconcilers. Each reconciler's metrics, health and
// waits are its own, as before; WaitUntilReconciled returns only once the
// statuses are in the table. A reconciler alone on its table writes by
// itself.
//
// # Objects without a primary key
//
// StateDB v0.9 lets a primary indexer say an object has no key, and then
// stores nothing for it, so every object the reconciler reads from the
// table (changes, retries, prunes, refresh sweeps, dependency queries) has
// one. Only a user function can make one: an Update that changes the
// fields the primary index reads gets an Error status wrapping
// [ErrNoPrimaryKey], written on the object as it was, and is retried; a
// clone or setStatus that drops the key (for a status write, a refresh or a
// dependency mark) is logged at Error level with [ErrNoPrimaryKey] and
// that object is left alone. Other objects are never affected, and nothing
// panics.
//
// # Errors returned by operations
//
// Any error marks the object Error and schedules a retry with backoff
// (see [WithRetry] and [WithRetryJitter]). Wrap it with [TerminalError] to
// stop retrying until the object changes (the status records it:
// [status.Status.Terminal]), or with [RetryAfter] to choose the next
// attempt's time. A retryable Error status that no retry is for, written
// back into the table by a user or found there at start, is retried at
// once. A panicking operation is recovered, logged with its
// stack and treated as an error wrapping [ErrPanic].
//
// # Health, metrics, tables and logs
//
// The reconcile job reports OK ("OK, N object(s)") while nothing fails,
// "Paused" while paused, and Degraded ("N error(s): M object(s) failing",
// the StateDB reconciler's wording followed by what fails) while objects
// wait for a retry, the last prune failed, the round limiter fails or
// WithStartAfter gave up waiting; it lists up to ten errors with their
// objects' keys, earliest next attempt first, and counts the rest. It
// recovers by itself when the failures clear. Terminal errors are settled
// and do not degrade health.
//
// Figures go to the [metrics.Metrics] given with [WithMetrics] (or
// Params.DefaultMetrics), and to each optional interface of package metrics
// that it implements; see package metrics and metrics/prometheus. With
// tables.Cell (package github.com/converge-go/converge/tables) in the hive,
// every reconciler keeps its row of the "reconcilers" table and the rows of
// its failing objects in "reconciler-retries" current, through the
// tables.Writer in [Params]. An object's first failure is logged with
// its key and error, at most ten lines per ten seconds per reconciler.
//
// # Control
//
// [WithDependency] re-reconciles objects when what they depend on changes
// in another table; [Reconciler.Pause] and [Reconciler.Resume] hold
// everything back and let it go; [WithStartAfter] waits for tables to be
// initialized; [WaitForObject] waits for one object.
//
// # Knowing the target
//
// [WithSetup] runs a step before the first operation of each start (to
// read what the target holds); [WithDriftCheck] has refreshes look before
// they rewrite, and [WithDriftReportOnly] only look; [WithPruneGuard] holds
// a prune that would remove too much until [Reconciler.ConfirmPrune];
// [Reconciler.Configure] changes settings while running. Each failing
// object's last errors are in its row of the retries table
// (tables.RetryInfo.Errors).
//
// # Lifecycle
//
// The reconciler runs as jobs of the [job.Group] in [Params]: "reconcile",
// "refresh" (which idles while refreshing is off) and one per
// [WithDependency], each suffixed with "-" and the name of [WithName] if
// given, as the StateDB reconciler names them. It starts and stops with the
// hive. [Register] may be called from a cell.Invoke, from a start hook, or
// once the hive has started; its jobs then start at once. As with the
// StateDB reconciler, hive's job group decides two limits: a start hook
// that registers must run after the group's registry has started (a hook
// appended by a module that has the job group, as Params does, does), and
// jobs added once the hive has started run until it stops and are not
// started again by the next start: register again then (a start hook runs
// again at every start). When the hive
// stops, operations in flight see their context cancelled and no operation
// starts afterwards. It holds a StateDB change iterator only while its job
// runs, and closes it on the job's goroutine when the hive stops, so it
// runs inside a testing/synctest bubble.
package reconciler

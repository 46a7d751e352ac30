// Package status defines the reconciliation status that objects in a StateDB
// table embed so that a reconciler can find work and report its outcome.
//
// A [Status] has a [Kind]: [KindPending] and [KindRefreshing] ask the
// reconciler to act on the object, [KindDone] and [KindError] record what it
// did. Writers of desired state set [Pending] whenever they change an object;
// the reconciler replaces it with [Done] or [Error], or, for a failure that
// retrying cannot fix, [TerminalErrorAt] ([Status.Terminal] set). Every status built by the
// constructors carries a hidden identity. The reconciler uses it to tell an
// object that changed (it carries a fresh Pending status) from one whose only
// change was a status written by another reconciler, so it never redoes or
// overwrites work needlessly. Reusing an old Pending status value when
// changing an object defeats that check: always call [Pending] anew. A
// status without an identity (a literal, or one decoded outside a [Set],
// or a Done or Error decoded in one) still works, but the reconciler may then apply the object again where the
// check would have spared it.
//
// An object reconciled by several reconcilers holds a [Set], a set of named
// statuses, one per reconciler.
//
// The package starts no goroutines. All values are immutable from the
// caller's point of view and safe to share between goroutines.
package status

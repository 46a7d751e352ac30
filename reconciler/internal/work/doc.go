// Package work holds what a reconciler's stages hand each other: the
// user's objects as the reconciler reads and writes them ([Objects]), one
// operation to run and its outcome ([Op]), and the errors that tell how an
// operation ended (terminal, retry after, timed out, panicked).
//
// It imports nothing of the reconciler but the key queue, whose tasks an
// Op carries, and the drift check's verdict: the stages (collect, run,
// commit, report) import it, never each other.
package work

// Package executor runs a round's operations: inline, on the goroutine of
// the reconciler's loop, or on a pool of workers, and hands back those
// finished. It is the only part of the reconciler that runs code
// concurrently with the loop.
//
// An [Executor] knows nothing of tables, keys or statuses: it holds items
// of any type T (the reconciler's ops) and calls what its [Config] gives
// it to run them, after asking the reconciler's gate (a [Gate]) whether
// an operation may start. It is resized at a round boundary without losing
// or repeating an item (see [Executor.Resize]).
package executor

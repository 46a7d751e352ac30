// Package reconciler lets a program written for the StateDB reconciler
// (github.com/cilium/statedb/reconciler v0.9) run on converge by changing one
// import path:
//
//	import "github.com/cilium/statedb/reconciler"
//
// becomes
//
//	import "github.com/converge-go/converge/compat/reconciler"
//
// and code that says reconciler.StatusPending(), reconciler.Status,
// reconciler.NewExpVarMetrics or reconciler.Register compiles unchanged.
//
// Every exported name of the StateDB reconciler that converge can honour is
// here, under the same name: the types are aliases of converge's own
// ([Status] is [status.Status], [Metrics] is [metrics.Metrics], [Params] is
// converge's reconciler.Params, ...), so values pass freely between code that
// imports this package and code that imports converge's packages directly.
// The functions are thin wrappers. Two names are not aliases:
//
//   - [Reconciler] is an interface with the StateDB reconciler's method set
//     (Prune and WaitUntilReconciled), so that an agent's own implementation
//     of it, such as a no-op reconciler for platforms without the target,
//     still satisfies it. The value [Register] returns also implements
//     converge's reconciler.Reconciler, with Pause and Resume.
//   - [Register] starts from the StateDB reconciler's defaults, listed in the
//     documentation of [Option], not from converge's: a program that relied
//     on them (refreshing every 30 minutes, say) behaves as before. Options
//     given to it override those defaults as they did.
//
// # What stays different
//
// Where converge's types differ from the StateDB reconciler's, the aliases
// carry converge's: Status.Error is a string and the status identity is the
// method Status.ID rather than a field; StatusKind is a small integer rather
// than a struct (compare it as before); StatusKind encodes itself through
// MarshalText rather than MarshalJSON and MarshalYAML; Status.String prints
// compact ages. converge's behaviour also differs on purpose in a few places
// (a panicking operation is recovered, fresh changes are taken before
// retries, ...). docs/migration.md in the repository lists every difference.
//
// # Using converge's own features
//
// [Option] is converge's reconciler.Option, so converge's options that have
// no StateDB counterpart (WithConcurrency, WithOperationTimeout,
// WithDependency, ...) can be passed to this package's [Register] alongside
// the ones here; import converge's reconciler package under another name
// for them. Code that moves to converge's own packages altogether follows
// the table in docs/migration.md.
package reconciler

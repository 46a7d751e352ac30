// Package tables holds the two StateDB tables in which converge's
// reconcilers show what they do, for operators and tests to read (with
// `db/show reconcilers` in a hive shell or script, the StateDB HTTP handler,
// or converge-inspect):
//
//   - "reconcilers" ([Info]): one row per reconciler, keyed by module ID and
//     name, with its state and figures;
//   - "reconciler-retries" ([RetryInfo]): one row per failing object, keyed
//     by reconciler and object key, with its attempts and when it is tried
//     next; removed when the object succeeds, changes or is deleted.
//
// Include [Cell] once in the hive, next to statedb.Cell; every reconciler
// registered with reconciler.Register keeps its rows current through the
// [Writer] that reconciler.Params takes, as it reports its figures to a
// metrics.Metrics. Without Cell reconcilers keep no tables.
//
// A reconciler writes its row at most once per round, and only when a
// figure changed; it writes retry rows only for objects whose failures
// changed in the round. Reconcilers without failures cost one small write
// per round in which objects were reconciled.
//
// The package knows nothing of reconcilers but these rows: it imports no
// other package of converge, and package reconciler feeds it plain values.
package tables

// Package index provides a StateDB index over the reconciliation status of
// objects, for callers that often need to find objects by status kind, such
// as "all objects in Error" or "is anything still Pending?".
//
// The index is optional. It costs an index update on every write of the
// table, so add it only when such queries are frequent; reconciler.WaitForReconciliation
// uses it to answer without scanning the table.
package index

// Package reconcilertest is a kit for testing reconcilers built with
// package reconciler: script commands for hive/script tests, fault
// injection around any operations, a recording in-memory target, and
// restarts with hive's own "hive stop" and "hive start".
//
// # A script test
//
// A user's complete script test: the hive with the reconciler under test,
// whose operations are a [FaultyOps] around a recording [Target], the
// hive's commands (statedb's db/* among them) and this package's.
//
//	func TestRouteScripts(t *testing.T) {
//		scripttest.Test(t, context.Background(), func(t testing.TB, args []string) *script.Engine {
//			reg := reconcilertest.NewRegistry()
//			target := reconcilertest.NewTarget(routeKey, routeVia)
//			ops := reconcilertest.NewFaultyOps(routeKey, target, nil)
//			h := hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth),
//				cell.Module("routes", "Routes", cell.Provide(job.Registry.NewGroup), cell.ProvidePrivate(newRouteTable),
//					cell.Invoke(func(p reconciler.Params, routes statedb.RWTable[*Route], health *cell.SimpleHealth) error {
//						r, err := reconciler.Register(p, routes, (*Route).Clone, (*Route).SetStatus, (*Route).GetStatus, ops, nil)
//						if err != nil {
//							return err
//						}
//						return reconcilertest.Add(reg, reconcilertest.Subject[*Route]{
//							DB: p.DB, Table: routes, Reconciler: r, GetStatus: (*Route).GetStatus,
//							Target: target, Faults: ops, Health: health,
//						})
//					})))
//			log := hivetest.Logger(t)
//			cmds, err := h.ScriptCommands(log)
//			require.NoError(t, err)
//			maps.Insert(cmds, maps.All(script.DefaultCmds()))
//			maps.Insert(cmds, maps.All(reconcilertest.ScriptCommands(reg)))
//			t.Cleanup(func() { h.Stop(log, context.Background()) })
//			return &script.Engine{Cmds: cmds}
//		}, nil, "testdata/*.txtar")
//	}
//
// and a script, testdata/retry.txtar:
//
//	hive start
//	reconciler/fault --key=10.0.0.0/8 --next=2 error
//	db/insert routes route.yaml
//	reconciler/wait
//	reconciler/calls --key=10.0.0.0/8 --exactly=3
//	reconciler/target --table
//	reconciler/health --level=OK
//	-- route.yaml --
//	prefix: 10.0.0.0/8
//	via: eth0
//	status: {kind: Pending}
//
// # Commands
//
// [ScriptCommands] returns these; "help reconciler/" in a script shows
// their flags. Every command takes --name to choose among several
// reconcilers; those that wait take --timeout (default [DefaultTimeout])
// and wait on watch channels, except reconciler/health and
// reconciler/metrics, which poll.
//
//	reconciler/wait [--key=KEY]          wait until the table (or one object) is reconciled
//	reconciler/wait-object KEY           wait with reconciler.WaitForObject until it is Done; fails if deleted, at Error (--stop-on-error)
//	reconciler/status KEY [REGEXP]       print an object's status, or wait until it matches (--kind)
//	reconciler/prune                     ask for a prune and wait until one ran; fails if it failed
//	reconciler/prune-confirm             confirm a prune held by WithPruneGuard and wait until it ran (--no-wait)
//	reconciler/pause                     pause the reconciler and wait until its health says Paused (--no-wait)
//	reconciler/resume                    resume it and wait until its health no longer says Paused (--no-wait)
//	reconciler/health [REGEXP]           print the reconcile job's health, or wait until it matches (--level)
//	reconciler/target [KEY=VALUE...]     print the target (a Target or TargetReader), or wait until it holds these (--table, --empty)
//	reconciler/target/set KEY=VALUE...   change the target (a TargetWriter) behind the reconciler's back
//	reconciler/target/unset KEY...       remove from the target (a TargetWriter) behind the reconciler's back
//	reconciler/calls                     print the recorded calls, or wait for a number (--op, --key, --via, --min, --exactly)
//	reconciler/calls --in-flight         the same for the calls started and not yet returned
//	reconciler/fault [MODE|clear]        inject a fault: error, terminal, retry-after, panic, delay or recheck (--key, --op, --next, --prob, --seed, --duration, --after)
//	reconciler/metrics [REGEXP...]       print the expvar metrics, or wait until each regexp matches a line
//	reconciler/retries [REGEXP]          print the failing objects (tables.Cell), or wait until one matches (--absent)
//	reconciler/save KEY...               remember objects as they are, status included (--delete: and take them out)
//	reconciler/put-back KEY...           insert them again exactly as saved
//	reconciler/setup-fault [MODE]        make the setup step (WithSetup, Subject.Setup) fail, clear it, or print its calls
//	reconciler/configure                 change settings with Reconciler.Configure (--concurrency, --round-size, --refresh, --prune, --retry=MIN,MAX)
//	sets/wait NAME...                    wait until named reconcilers of a status.Set settled the table (sets.Table.Wait; --error-ok, --table)
//	sets/refresh NAME                    mark objects for one name and wait until each was attempted (sets.Table.Refresh; --key, --table)
//	sets/retire NAME...                  remove names from every object's status.Set (sets.Table.Retire; --table)
//	sets/status KEY                      print each name's status in an object's status.Set (--table)
//
// The commands find reconcilers in a [Registry] that the code registering
// them fills with [Add]; the sets/* commands use the sets.Table of the
// Subjects that have one (Subject.Sets). They look them up when they run, so the registry
// can be filled when the hive is populated and refilled after a restart.
//
// # Faults and the target
//
// [FaultyOps] wraps any [reconciler.Operations] and [reconciler.BatchOperations]
// and injects a [Fault]: an error, a terminal error, a retry-after error,
// a panic or a delay, for one key or all, one operation or all, for the
// next N calls or until cleared, and at random with a seed; before the
// wrapped operation, or once it succeeded (Fault.After), to fail or hold a
// call whose change was applied. [Target]
// implements the operations in memory for any object type, records every
// call and compares itself with a table ([Target.Diff]). Both record calls
// ([Call]); FaultyOps also records the attempts that its faults stopped.
// [FaultyOps.Processor] gives it as batch operations implementing
// [reconciler.BatchProcessor], which may also serve alone (no Operations).
//
// # A target of your own
//
// The reconciler/target commands read a [Target], or any target system that
// implements [TargetReader]: Keys lists the keys it holds, Get reads one
// key's value. Implement it on your target, or on a small view of it, and
// set [Subject.TargetReader] when adding the reconciler, with [Subject.Key]
// and [Subject.Value] giving the key and value each object should have
// there, for reconciler/target --table:
//
//	return reconcilertest.Add(reg, reconcilertest.Subject[*Route]{
//		DB: p.DB, Table: routes, Reconciler: r, GetStatus: (*Route).GetStatus,
//		TargetReader: kernelRoutes, Key: routeKey, Value: routeVia,
//	})
//
// The commands check such a target every 10ms while they wait, as it has no
// change notification. reconciler/target/set and reconciler/target/unset
// also need a [TargetWriter]; on a target without one they fail, saying it
// is read-only. To inject faults into your target's operations and record
// their calls, for reconciler/fault, reconciler/calls and reconciler/prune,
// wrap them with [NewFaultyOps]. testdata/map_target.txtar in this package
// is an example.
//
// # Restarts
//
// A script can stop and start the program under test with hive's own
// "hive stop" and "hive start", in two ways.
//
// With the hive's own commands, as in the example above, "hive start" after
// "hive stop" starts the same hive again: the StateDB and its tables
// survive, and the reconciler's job stops and starts again, as when a
// component is restarted within a running process. The commands keep
// working across it, since the Registry's reconcilers stay the same, and
// the table may be changed while the hive is stopped; after "hive start",
// "reconciler/wait" waits until those changes, deletes included, have
// converged. (While the hive is stopped, nothing is reconciled, so a
// command waiting for reconciliation waits until its timeout.)
// testdata/stop_start.txtar in this package is an example; in outline:
//
//	hive start
//	db/insert items a.yaml b.yaml
//	reconciler/wait
//	hive stop
//	db/delete items a.yaml
//	db/insert items b2.yaml
//	hive start
//	reconciler/wait
//	reconciler/target --table
//
// A [Restarter] simulates a process restart instead: its "hive start" after
// "hive stop" starts a new hive, with a new StateDB and new reconcilers,
// while the target and the faults, which live outside the hive, are kept:
// the script repopulates the table, and the first prune after
// initialization removes what is no longer wanted. testdata/restart.txtar
// in this package is an example.
//
// # Failing objects, pause and resume
//
// With [tables.Cell] in the hive, reconcilers keep a row per
// failing object in the "reconciler-retries" table; reconciler/retries
// prints a reconciler's rows (attempts, first failure, next attempt, last
// error) and waits, on the table's watch channel, until a row matching a
// regexp appears or, with --absent, is gone; with --errors each line ends
// with the object's recent errors, "errors=[#1 TEXT | #4 TEXT]":
//
//	reconciler/fault --key=b error
//	db/insert items b.yaml
//	reconciler/retries '^b: update attempts=[2-9]'
//	reconciler/fault --key=b clear
//	reconciler/retries --absent
//
// Without tables.Cell it fails, saying so; reconciler/health lists the
// failing objects with their errors instead, and reconciler/calls shows
// every attempt. The statedb command "db/show reconcilers" shows each
// reconciler's state and figures.
//
// reconciler/pause calls [reconciler.Reconciler.Pause] and returns once the
// reconcile job's health says "Paused" (level OK), so that a script can
// then check that nothing is called while changes pile up;
// reconciler/resume undoes it, after which reconciler/wait waits for those
// changes to converge. A paused reconciler's row of the reconcilers table
// has the state "paused":
//
//	reconciler/pause
//	db/insert items c.yaml
//	db/delete items a.yaml
//	! reconciler/calls --min=1 --timeout=100ms
//	reconciler/health --level=OK '^job-reconcile: .*message=Paused'
//	reconciler/resume
//	reconciler/wait
//	reconciler/target --table
//
// # Objects put back
//
// An application may put an object back as it read it earlier, its Done
// status included: a cache restored, a delete undone. reconciler/save
// remembers objects as they are (with --delete, taking them out in the
// same transaction), and reconciler/put-back inserts them again as saved,
// so a script can check that the reconciler applies again what the target
// lost meanwhile (package reconciler's "Objects put back"):
//
//	reconciler/save --delete a
//	reconciler/wait
//	reconciler/put-back a
//	reconciler/wait
//	reconciler/target --table
//
// testdata/put_back.txtar in this package is an example.
//
// # Waiting for one object
//
// reconciler/wait-object KEY waits with [reconciler.WaitForObject], as an
// application would, and prints what it saw: "KEY: Done", or, failing,
// "KEY: deleted", "KEY: Error (terminal): MESSAGE", "KEY: Error: MESSAGE"
// (with --stop-on-error) or "KEY: timed out, last status KIND". Expect a failure with "!" and match
// the line with "stdout". It can run in the background, to wait from before
// the write:
//
//	reconciler/wait-object a &
//	db/insert items a.yaml
//	wait
//	stdout '^a: Done$'
//	reconciler/fault --key=b terminal
//	db/insert items b.yaml
//	! reconciler/wait-object b
//	stdout '^b: Error \(terminal\): '
package reconcilertest

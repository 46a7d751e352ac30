// Command converge-inspect shows what the reconcilers of a running agent are
// doing: the "reconcilers" and "reconciler-retries" tables of package
// tables (tables.Cell), read from the agent's StateDB HTTP handler
// (statedb.DB.HTTPHandler). It needs nothing in the agent but that handler
// and tables.Cell.
//
// Run it from a clone of the repository against the example, which serves
// the handler under /statedb/, behind the token in
// DIR/.converge-example/token:
//
//	go run ./cmd/converge-inspect --url http://127.0.0.1:8080/statedb --token-file $DIR/.converge-example/token
//
// or build it once with go build ./cmd/converge-inspect. A local agent
// that serves hive's shell on a Unix socket, as the example does, is read
// through it with no token:
//
//	go run ./cmd/converge-inspect --socket $DIR/.converge-example/shell.sock
//
// It prints one line per reconciler (its state, objects, failing objects,
// operations in flight, workers and busy workers, how long the oldest
// unfinished object has waited, the last prune and its error), then the
// failing objects (key, attempts, next attempt, error), at most ten per
// reconciler. Paused and stopped reconcilers show as such in STATE.
// docs/observability.md shows a sample.
//
// Flags:
//
//	--url URL          base URL of the agent's StateDB handler, the path under which it
//	                   serves /query and /changes (default http://127.0.0.1:8080/statedb);
//	                   a host localhost is 127.0.0.1, never ::1
//	--socket PATH      read the agent through its hive shell on this Unix socket instead
//	                   (db/show --format=json of each table); no token is sent, and on
//	                   Linux a socket served by a user other than you or root is refused.
//	                   Not with --url or --token-file; with --watch, read every second
//	--token-file PATH  file holding a bearer token, sent as "Authorization: Bearer TOKEN";
//	                   refused if others can read or write it, it is over 4 KiB, or it is
//	                   not a regular file (opened without waiting for a writer, then checked).
//	                   Without it, the token is taken from $CONVERGE_INSPECT_TOKEN, if set
//	--reconciler NAME  show only this reconciler: the one whose ID (module/name) is NAME,
//	                   else the only one named NAME. It fails, listing IDs, if none is, or
//	                   if several are named NAME and none has it as ID; with --watch it
//	                   picks the reconciler when it starts, and fails then the same way
//	--watch            redraw on every change, read from StateDB's stream of changes
//	                   (at most four times a second), until Ctrl-C
//	--json             print JSON: {"reconcilers": [...], "retries": [...], "degraded": bool};
//	                   with --watch, one such object per line per redraw; control and bidi
//	                   characters of the agent's text are escaped as \uXXXX
//	--timeout 10s      bound on connecting and on reading the tables
//
// Exit status:
//
//	0  every reconciler shown is running, waiting, paused or stopped
//	1  a reconciler shown is degraded (with --watch: in the last state shown)
//	2  anything else failed: a bad flag or token file, an unreachable agent,
//	   a refused token, an agent without the tables, rows it cannot decode
//	   (an agent built with another converge version), a stream that broke,
//	   a --reconciler that picks none (with --watch: or whose reconciler is
//	   gone from the last state shown)
//
// so that `converge-inspect --url ... >/dev/null` serves as a readiness
// check, and a CI job can tell a degraded agent (1) from a broken check (2).
//
// The token is never printed: where the agent's text holds it (an agent or
// a proxy that echoes the request), [token] is shown instead. It is sent
// over plain HTTP only to a loopback address (use https for others);
// redirects are not followed. Every answer
// is bounded (64 MiB a query, 1 MiB a row, 100,000 rows a table, 64 MiB
// of rows kept in all, with --watch too) and a
// stream that sends nothing, not even StateDB's keep-alive, for two
// minutes is given up. Text from the agent is shown with control
// characters replaced, so that it cannot drive the terminal.
package main

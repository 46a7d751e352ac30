// Command example is a runnable hive application that keeps a directory in
// line with a set of desired files. The desired files live in a StateDB
// table; converge's reconciler writes them into the directory (atomically),
// removes deleted ones, prunes the files it wrote that are no longer
// wanted, and periodically refreshes the files to repair drift. An HTTP API
// edits the table and shows statuses, health and metrics.
//
// It also shows what converge adds to the StateDB reconciler:
//
//   - metrics for Prometheus (metrics/prometheus), registered on the
//     example's own registry and served at /metrics;
//   - reconciler.TablesCell: the reconcilers and reconciler-retries tables,
//     served at /reconcilers and /retries and in the StateDB dump;
//   - a dependency (reconciler.WithDependency): a file may be rendered from
//     a template of the "templates" table, and changing the template
//     rewrites exactly the files that use it;
//   - drift repaired by refreshes and prunes, counted with
//     reconciler.ReportRepaired;
//   - Pause and Resume, at POST /pause and POST /resume.
//
// Run it (from the module root):
//
//	go run ./example
//
// With no flags it reconciles into $TMPDIR/converge-example (/tmp when
// TMPDIR is unset; created, and printed at start) and listens on
// 127.0.0.1:8080. The initial desired set is example/files.yaml, embedded
// in the binary. Flags (--help lists them with their defaults; each can
// also be set as CONVERGE_EXAMPLE_DIR, CONVERGE_EXAMPLE_RETRY_MAX, ...):
//
//	--dir DIR          target directory
//	--addr HOST:PORT   HTTP address
//	--files FILE       initial desired set (YAML, see files.yaml)
//	--refresh 10s      how old a file's status gets before it is checked for drift (0: never)
//	--prune 10s        how often files no longer wanted are removed (0: never)
//	--retry-max 5s     longest wait between retries of a failing file
//	--adopt            use a non-empty directory the example did not create
//
// The example is safe to point at a directory that holds other files: it
// records the files it writes in DIR/.converge-example/journal.json and
// never changes or removes any other. It refuses a non-empty directory
// without that record unless --adopt is given, and refuses a symbolic link
// as the directory. Refusals exit with status 2, other failures with 1.
//
// Drive it with curl (DIR is the printed directory):
//
//	curl -X PUT --data-binary 'hi there' localhost:8080/files/greeting   # create or replace
//	curl -X PUT --data-binary 'x' 'localhost:8080/files/key?mode=0600'   # with a mode
//	cat $DIR/greeting
//	curl localhost:8080/files                  # desired files and their statuses
//	curl -X DELETE localhost:8080/files/greeting
//	curl localhost:8080/health                 # 200 when OK, 503 when Degraded
//	curl -X PUT --data-binary '{{name}}: {{content}}' localhost:8080/templates/banner
//	                                           # rewrites hello.txt and motd, which use banner
//	curl -X PUT -d hi 'localhost:8080/files/note?template=banner'
//	curl localhost:8080/reconcilers            # the reconcilers table: state, counts, last prune, ...
//	curl localhost:8080/retries                # failing files, their attempts and next attempt
//	curl -X POST localhost:8080/pause          # nothing is written until
//	curl -X POST localhost:8080/resume         # resume
//	curl localhost:8080/metrics                # Prometheus: converge_reconcile_total, ...
//	curl localhost:8080/debug/vars             # expvar: Go's runtime variables and the reconciler's metrics
//	curl localhost:8080/statedb/dump           # the StateDB tables as JSON
//
// Things to try:
//
//	echo junk > $DIR/stray                    # left alone: the example did not write it
//	echo edited > $DIR/motd                   # restored within about --refresh
//	rm -r $DIR && touch $DIR                  # the directory is now a file, so
//	curl -X PUT -d x localhost:8080/files/x   # writes fail: x goes to Error
//	curl localhost:8080/health                # and health to Degraded (503)
//	rm $DIR                                   # both recover by themselves within
//	                                          # --retry-max (and --prune if a prune failed);
//	                                          # --refresh restores the other files
//
// Ctrl-C (SIGINT) or SIGTERM stops it cleanly.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/spf13/pflag"
	"golang.org/x/time/rate"

	"github.com/converge-go/converge/reconciler"
)

// newApp builds the application's hive. extra cells are added at the top
// level, for example to get hold of objects in tests.
func newApp(extra ...cell.Cell) *hive.Hive {
	opts := hive.DefaultOptions()
	opts.EnvPrefix = envPrefix
	opts.LogThreshold = 100 * time.Millisecond // log only slow invokes and hooks
	// Give each module its own health scope, such as "files".
	opts.ModuleDecorators = cell.ModuleDecorators{
		func(h cell.Health, id cell.ModuleID) cell.Health { return h.NewScope(string(id)) },
	}
	cells := []cell.Cell{
		statedb.Cell,
		job.Cell,
		reconciler.TablesCell, // the reconcilers and reconciler-retries tables
		cell.Config(defaultConfig()),
		cell.Provide(
			newHealth,
			newPromMetrics, // served at /metrics
		),
		filesModule,
	}
	return hive.NewWithOptions(opts, append(cells, extra...)...)
}

var filesModule = cell.Module(
	"files",
	"Desired files reconciled into a directory",

	cell.ProvidePrivate(
		job.Registry.NewGroup, // the job.Group in reconciler.Params
		newOwnedDir,
		newTarget,
	),
	cell.Provide(
		newFilesTable,
		newTemplatesTable,
		newReconciler,
		newServer,
	),
	// The invokes run in this order, and constructing an object appends its
	// start hooks, so the hive starts them in this order too: nothing
	// touches the directory unless the address could be bound, and nothing
	// is written unless the directory is the example's to use.
	cell.Invoke(
		config.validate,
		func(*server) {},   // listen on --addr
		func(*ownedDir) {}, // claim --dir, or refuse it
		loadInitialFiles,   // insert the initial set, then mark the table initialized
		// The reconciler's jobs; the server pauses and resumes it.
		func(s *server, r reconciler.Reconciler[*File]) { s.control = r },
	),
)

// newReconciler registers the reconciler of the files table. Its jobs run in
// the module's job group, so they start and stop with the hive and report
// health under "files.job-reconcile". It keeps its row of the reconcilers
// table and the rows of its failing files (p.Tables, from
// reconciler.TablesCell), reports metrics to Prometheus, and depends on
// the templates table: a changed template rewrites the files that use it.
func newReconciler(p reconciler.Params, cfg config, files filesTable, templates statedb.RWTable[*Template], t *target, m promMetrics) (reconciler.Reconciler[*File], error) {
	return reconciler.Register(
		p,
		files.RWTable,
		(*File).Clone,
		(*File).SetStatus,
		(*File).GetStatus,
		t,
		nil,
		reconciler.WithMetrics(m.teeMetrics),
		templateDependency(p.DB, files, templates),
		reconciler.WithPruning(cfg.PruneInterval),
		reconciler.WithRefreshing(cfg.RefreshInterval, rate.NewLimiter(100, 100)),
		// A modest maximum so that files recover soon after a fault clears.
		reconciler.WithRetry(min(100*time.Millisecond, cfg.RetryMax), cfg.RetryMax),
	)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses of run.
const (
	exitOK      = 0
	exitFailure = 1 // the start failed or the app failed while running
	exitUsage   = 2 // bad flags, or a target directory the example refuses
)

// run parses the flags, starts the hive, waits until ctx ends (main ends it
// on SIGINT or SIGTERM) or the HTTP server fails, stops the hive and
// returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		srv *server
		cfg config
	)
	app := newApp(cell.Invoke(func(s *server, c config) { srv, cfg = s, c }))
	flags := pflag.NewFlagSet("example", pflag.ContinueOnError)
	flags.SetOutput(io.Discard) // errors and usage are printed below
	app.RegisterFlags(flags)
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: go run ./example [flags]\n\nReconciles desired files into a directory, with an HTTP API. Flags:\n\n%s", flags.FlagUsages())
	}
	err := flags.Parse(args)
	if errors.Is(err, pflag.ErrHelp) {
		usage(stdout)
		return exitOK
	}
	if err == nil && flags.NArg() > 0 {
		err = fmt.Errorf("unexpected arguments: %q", flags.Args())
	}
	if err != nil {
		fmt.Fprintf(stderr, "example: %v\n\n", err)
		usage(stderr)
		return exitUsage
	}

	log := slog.New(slog.NewTextHandler(stderr, nil))
	if err := app.Populate(log); err != nil {
		if usageErr := (*usageError)(nil); errors.As(err, &usageErr) {
			err = usageErr
		}
		fmt.Fprintln(stderr, "example:", err)
		return exitUsage
	}
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := app.Start(log, startCtx); err != nil {
		stopStarted(app, log)
		fmt.Fprintln(stderr, "example:", err)
		if refused := (*refusedError)(nil); errors.As(err, &refused) {
			return exitUsage
		}
		return exitFailure
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		dir = cfg.Dir
	}
	fmt.Fprintf(stderr, "\nconverge example: reconciling into %s, API on http://%s (Ctrl-C to stop)\n\n", dir, srv.Addr())

	failed := false
	select {
	case <-ctx.Done():
	case <-srv.Done(): // the server failed; its error is logged
		failed = true
	}
	if err := stopStarted(app, log); err != nil || failed {
		return exitFailure
	}
	return exitOK
}

// stopStarted stops whatever part of the hive started.
func stopStarted(app *hive.Hive, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return app.Stop(log, ctx)
}

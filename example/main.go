// Command example is a runnable hive application that keeps a directory in
// line with a set of desired files. The desired files live in a StateDB
// table; converge's reconciler writes them into the directory (atomically),
// removes deleted ones, prunes files nobody asked for, and periodically
// refreshes the files to repair drift. An HTTP API edits the table and shows
// statuses, health and metrics.
//
// Run it (from the module root):
//
//	go run ./example
//
// With no flags it reconciles into $TMPDIR/converge-example (created, and
// printed at start) and listens on 127.0.0.1:8080. The initial desired set
// is example/files.yaml, embedded in the binary. Flags:
//
//	-dir DIR          target directory
//	-addr HOST:PORT   HTTP address
//	-files FILE       initial desired set (YAML, see files.yaml)
//	-refresh 10s      how old a file's status gets before it is checked for drift (0: never)
//	-prune 10s        how often unwanted files are removed (0: never)
//	-retry-max 5s     longest wait between retries of a failing file
//
// Drive it with curl (DIR is the printed directory):
//
//	curl -X PUT --data-binary 'hi there' localhost:8080/files/greeting   # create or replace
//	curl -X PUT --data-binary 'x' 'localhost:8080/files/key?mode=0600'   # with a mode
//	cat $DIR/greeting
//	curl localhost:8080/files                  # desired files and their statuses
//	curl -X DELETE localhost:8080/files/greeting
//	curl localhost:8080/health                 # 200 when OK, 503 when Degraded
//	curl localhost:8080/debug/vars             # expvar: reconciliation_count, prune_count, ...
//	curl localhost:8080/statedb/dump           # the StateDB tables as JSON
//
// Things to try:
//
//	echo junk > $DIR/stray                    # pruned within -prune
//	echo edited > $DIR/motd                   # restored within about -refresh
//	rm -r $DIR && touch $DIR                  # the directory is now a file, so
//	curl -X PUT -d x localhost:8080/files/x   # writes fail: x goes to Error
//	curl localhost:8080/health                # and health to Degraded (503)
//	rm $DIR                                   # both recover by themselves within
//	                                          # -retry-max (and -prune if a prune failed);
//	                                          # -refresh restores the other files
//
// Ctrl-C (SIGINT) or SIGTERM stops it cleanly.
package main

import (
	"context"
	"errors"
	"flag"
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
	"golang.org/x/time/rate"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
)

// config is the application's configuration, set from flags.
type config struct {
	Dir             string        // target directory
	Addr            string        // HTTP listen address
	FilesPath       string        // initial desired set; "" for the embedded files.yaml
	RefreshInterval time.Duration // 0 disables refreshing
	PruneInterval   time.Duration // 0 disables pruning
	RetryMax        time.Duration // longest backoff between retries
}

func defaultConfig() config {
	return config{
		Dir:             filepath.Join(os.TempDir(), "converge-example"),
		Addr:            "127.0.0.1:8080",
		RefreshInterval: 10 * time.Second,
		PruneInterval:   10 * time.Second,
		RetryMax:        5 * time.Second,
	}
}

// parseFlags parses the command line into a config.
func parseFlags(args []string, output io.Writer) (config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("example", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&cfg.Dir, "dir", cfg.Dir, "target `directory` the desired files are written to (created if missing)")
	fs.StringVar(&cfg.Addr, "addr", cfg.Addr, "HTTP listen `address`")
	fs.StringVar(&cfg.FilesPath, "files", "", "YAML `file` with the initial desired set (default: the embedded example/files.yaml)")
	fs.DurationVar(&cfg.RefreshInterval, "refresh", cfg.RefreshInterval, "check files for drift once their status is this old (0 disables)")
	fs.DurationVar(&cfg.PruneInterval, "prune", cfg.PruneInterval, "remove unwanted files this often, starting once the initial set is loaded (0 disables)")
	fs.DurationVar(&cfg.RetryMax, "retry-max", cfg.RetryMax, "longest wait between retries of a failing file")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	switch {
	case cfg.Dir == "":
		return cfg, errors.New("-dir must not be empty")
	case cfg.RefreshInterval < 0, cfg.PruneInterval < 0:
		return cfg, errors.New("-refresh and -prune must not be negative")
	case cfg.RetryMax <= 0:
		return cfg, errors.New("-retry-max must be positive")
	}
	return cfg, nil
}

// newApp builds the application's hive. extra cells are added at the top
// level, for example to get hold of objects in tests.
func newApp(cfg config, extra ...cell.Cell) *hive.Hive {
	opts := hive.DefaultOptions()
	// Give each module its own health scope, such as "files".
	opts.ModuleDecorators = cell.ModuleDecorators{
		func(h cell.Health, id cell.ModuleID) cell.Health { return h.NewScope(string(id)) },
	}
	cells := []cell.Cell{
		statedb.Cell,
		job.Cell,
		cell.Provide(
			newHealth,
			metrics.NewExpVar, // published: visible at /debug/vars
			func() config { return cfg },
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
		newTarget,
	),
	cell.Provide(
		newFilesTable,
		newReconciler,
		newServer,
	),
	cell.Invoke(
		loadInitialFiles,
		func(reconciler.Reconciler[*File], *server) {},
	),
)

// newReconciler registers the reconciler of the files table. Its jobs run in
// the module's job group, so they start and stop with the hive and report
// health under "files.job-reconcile".
func newReconciler(p reconciler.Params, cfg config, files filesTable, t *target, m *metrics.ExpVar) (reconciler.Reconciler[*File], error) {
	return reconciler.Register(
		p,
		files.RWTable,
		(*File).Clone,
		(*File).SetStatus,
		(*File).GetStatus,
		t,
		nil,
		reconciler.WithMetrics(m),
		reconciler.WithPruning(cfg.PruneInterval),
		reconciler.WithRefreshing(cfg.RefreshInterval, rate.NewLimiter(100, 100)),
		// A modest maximum so that files recover soon after a fault clears.
		reconciler.WithRetry(min(100*time.Millisecond, cfg.RetryMax), cfg.RetryMax),
	)
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

// run starts the hive, waits for SIGINT or SIGTERM and stops it.
func run(cfg config) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	var srv *server
	app := newApp(cfg, cell.Invoke(func(s *server) { srv = s }))
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := app.Start(log, startCtx); err != nil {
		stopStarted(app, log)
		return err
	}
	fmt.Fprintf(os.Stderr, "\nconverge example: reconciling into %s, API on http://%s (Ctrl-C to stop)\n\n", cfg.Dir, srv.Addr())

	select {
	case <-ctx.Done():
	case <-srv.Done(): // the server failed; its error is logged
	}
	stop() // a second signal kills the process
	return stopStarted(app, log)
}

// stopStarted stops whatever part of the hive started.
func stopStarted(app *hive.Hive, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return app.Stop(log, ctx)
}

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
//   - tables.Cell: the reconcilers and reconciler-retries tables,
//     served at /reconcilers and /retries and in the StateDB dump;
//   - a dependency (reconciler.WithDependency): a file may be rendered from
//     a template of the "templates" table, and changing the template
//     rewrites exactly the files that use it;
//   - drift repaired by refreshes and prunes, counted with
//     reconciler.ReportRepaired;
//   - Pause and Resume, at POST /pause and POST /resume;
//   - workers (reconciler.WithConcurrency), which overlap the writes'
//     fsyncs;
//   - OpenTelemetry traces (tracing/otel): with --trace-stdout, a span per
//     round, write, prune and refresh sweep, one JSON object a line on
//     standard output (redirect it to keep them; the example writes no
//     file for them).
//
// Users copy it to write their own agent, so it behaves as a safe service
// on a machine shared with other users and browsed with a web browser:
//
//   - it changes or removes only files it wrote, recognised by file
//     handle, not by a reusable inode number; it removes one only if it
//     still holds what the example wrote, and checks what it removes or
//     replaces after moving it aside, so a file the user saves meanwhile
//     keeps its name; names that are not valid UTF-8 are refused;
//   - it refuses a directory, or a state directory or journal in it, that
//     another user owns or can write, or whose parent another user (not
//     root) owns or can write without the sticky bit, a non-empty directory it did not
//     create (unless --adopt), a symbolic link, and a directory another
//     example is using (it locks the directory itself, and
//     DIR/.converge-example/lock); it holds the directory's parent open, so
//     a parent replaced by a link redirects nothing; it reads a file only
//     through a descriptor checked to be the regular file it looked at;
//   - the API asks for a token that only the user can read,
//     DIR/.converge-example/token (new at every start, in a directory kept
//     at mode 0700, checked every second; replaced if others could read
//     it), and refuses requests a web page could send, closing the
//     connection of every request it refuses before the token;
//   - it holds both loopback addresses at its port, 127.0.0.1 and ::1, and
//     refuses to start if either is taken: a client that resolves
//     localhost to the other would send its token to whoever listened
//     there; refused requests are counted and logged at a bounded rate;
//   - it serves hive's shell (db/show reconcilers, ...) to the user
//     running it only, on DIR/.converge-example/shell.sock: mode 0600 in
//     the 0700 state directory, peer credentials checked, only the
//     commands that read the tables (run `example shell COMMAND`);
//   - it bounds its inputs: request bodies (1 MiB), connections (128 at
//     once), slow and idle connections, --files (a regular file of at most
//     16 MiB, whose errors quote only a value found invalid, never an
//     unknown key), intervals (at least 10ms);
//   - it checks every flag before anything starts, binds the address
//     before it touches the directory, and serves once all of that
//     succeeded.
//
// Run it (from the module root):
//
//	go run ./example
//
// With no flags it reconciles into $TMPDIR/converge-example (/tmp when
// TMPDIR is unset; created, and printed at start) and listens on
// 127.0.0.1:8080. The initial desired set is example/files.yaml, embedded
// in the binary. Flags (--help lists them with their defaults and
// variables), each also set by the environment variable named after it;
// a flag given on the command line wins:
//
//	--dir DIR          CONVERGE_EXAMPLE_DIR           target directory
//	--addr HOST:PORT   CONVERGE_EXAMPLE_ADDR          HTTP address (a warning unless loopback)
//	--files FILE       CONVERGE_EXAMPLE_FILES         initial desired set (YAML, see files.yaml)
//	--refresh 10s      CONVERGE_EXAMPLE_REFRESH       how old a file's status gets before it is checked for drift (0: never)
//	--prune 10s        CONVERGE_EXAMPLE_PRUNE         how often files no longer wanted are removed (0: never)
//	--retry-max 5s     CONVERGE_EXAMPLE_RETRY_MAX     longest wait between retries of a failing file
//	--adopt            CONVERGE_EXAMPLE_ADOPT         use a non-empty directory the example did not create
//	--trace-stdout     CONVERGE_EXAMPLE_TRACE_STDOUT  write the reconciler's spans to standard output
//
// Exit status: 2 when the example refuses to start because of what it was
// given (a bad flag or environment variable value, a failed validation, a
// target directory it refuses, cannot use or another example is using, an
// --addr it cannot listen on, including a port already in use, an
// unreadable or invalid --files);
// 1 for failures after the start succeeded (the HTTP server failing while
// running, a failed stop) and start failures not caused by the input; 0
// after a clean stop. The error that stops a start is printed once, as
// "example: ..." on stderr, naming the flag, and the variable if one set it.
// (go run prints "exit status 2" and exits 1 itself.)
//
// Drive it with curl (DIR is the printed directory; the token changes at
// every start):
//
//	T=$(cat $DIR/.converge-example/token)
//	curl --oauth2-bearer $T -X PUT --data-binary 'hi there' 127.0.0.1:8080/files/greeting
//	curl --oauth2-bearer $T 127.0.0.1:8080/files
//	curl --oauth2-bearer $T 127.0.0.1:8080/       # every route
//	go run ./example shell db/show reconcilers    # the shell, with no token
//
// docs/example.md walks through the API, the drift repairs and the
// refusals. Ctrl-C (SIGINT) or SIGTERM stops it cleanly.
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
	"strings"
	"syscall"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/hive/shell"
	"github.com/cilium/statedb"
	"github.com/spf13/pflag"
	"golang.org/x/time/rate"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/tables"
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
		tables.Cell, // the reconcilers and reconciler-retries tables
		cell.Config(defaultConfig()),
		cell.Provide(
			newHealth,
			newPromMetrics, // served at /metrics
			newTraces,      // to standard output with --trace-stdout
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
		newAPIToken,
		newInitialSet,
	),
	cell.Provide(
		newFilesTable,
		newTemplatesTable,
		newReconciler,
		newServer,
		newShellServer, // the shell, on a Unix socket in the state directory
	),
	// The invokes run in this order when the hive is built: every flag is
	// checked before anything starts. Their start hooks run in the order
	// they are added: nothing touches the directory unless the address
	// could be bound, nothing is written unless the directory is the
	// example's to use, and the API serves once all of it succeeded.
	cell.Invoke(
		config.validate,      // the intervals
		func(*ownedDir) {},   // --dir, changing nothing
		func(*initialSet) {}, // --files, read and parsed
		func(*server) {},     // --addr
		registerStart,        // listen, claim --dir, insert the initial set
		func(*traces) {},     // --trace-stdout: the exporter, stopped after the reconciler
		startReconciler,      // the reconciler's jobs; the server pauses and resumes it
		func(lc cell.Lifecycle, sh *shellServer) { lc.Append(cell.Hook{OnStart: sh.start, OnStop: sh.stop}) },
		func(lc cell.Lifecycle, s *server) { lc.Append(cell.Hook{OnStart: s.serve, OnStop: s.stop}) },
	),
)

// registerStart adds the start hooks of the server's listener, the
// directory and the initial set, in this order.
func registerStart(lc cell.Lifecycle, s *server, d *ownedDir, initial *initialSet) {
	lc.Append(cell.Hook{OnStart: s.listen, OnStop: s.closeListener})
	lc.Append(cell.Hook{OnStart: d.start, OnStop: d.stop})
	lc.Append(cell.Hook{OnStart: initial.insert})
}

// startReconciler gives the server the reconciler to pause and resume.
// Asking for the reconciler registers its jobs, which start after the
// hooks of registerStart.
func startReconciler(s *server, r reconciler.Reconciler[*File]) { s.control = r }

// newReconciler registers the reconciler of the files table. Its jobs run in
// the module's job group, so they start and stop with the hive and report
// health under "files.job-reconcile". It keeps its row of the reconcilers
// table and the rows of its failing files (p.Tables, from
// tables.Cell), reports metrics to Prometheus, spans to tr (with
// --trace-stdout), and depends on the templates table: a changed template
// rewrites the files that use it.
func newReconciler(p reconciler.Params, cfg config, files filesTable, templates statedb.RWTable[*Template], t *target, m promMetrics, tr *traces) (reconciler.Reconciler[*File], error) {
	return reconciler.Register(
		p,
		files.RWTable,
		(*File).Clone,
		(*File).SetStatus,
		(*File).GetStatus,
		t,
		nil,
		reconciler.WithMetrics(m.teeMetrics),
		reconciler.WithTracer(tr.tracer), // nil: off
		templateDependency(p.DB, files, templates),
		reconciler.WithPruning(cfg.PruneInterval),
		reconciler.WithRefreshing(cfg.RefreshInterval, rate.NewLimiter(100, 100)),
		// A modest maximum so that files recover soon after a fault clears.
		reconciler.WithRetry(min(100*time.Millisecond, cfg.RetryMax), cfg.RetryMax),
		// Writes wait mostly for the disk (fsyncs): workers overlap
		// them, and share the fsyncs of the journal and the directory.
		reconciler.WithConcurrency(workers),
	)
}

// workers is the number of files written at once.
const workers = 16

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses of run. The rule, also printed by --help (see exitRule):
// 2 when the example refuses to start because of what the user gave it, 1
// for any other failure.
const (
	exitOK      = 0
	exitFailure = 1 // failed after starting (the HTTP server, the stop), or a start failure not caused by the input
	exitUsage   = 2 // refused to start because of the input: flags, environment, --dir, --addr
)

// exitRule explains the exit statuses in --help.
const exitRule = `Exit status:

  0  stopped by Ctrl-C (SIGINT) or SIGTERM, and the stop succeeded (or --help)
  2  refused to start because of what it was given: a bad flag or environment
     variable value, a failed validation, a --dir it refuses or cannot use
     (not a directory, not empty and not the example's, a symbolic link,
     another user's or writable by others, in use by another example, ...),
     an --addr it cannot listen on (an invalid address, a port already in use),
     an unreadable or invalid --files
  1  any other failure: the HTTP server failed while running, the stop failed,
     or the start failed for a reason other than the input
`

// run parses the flags and the environment, starts the hive, waits until
// ctx ends (main ends it on SIGINT or SIGTERM) or the HTTP server fails,
// stops the hive and returns the exit status. An error that prevents the
// start is printed once, as "example: ..." on stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "shell" {
		return runShell(args[1:], stderr)
	}
	var (
		srv *server
		sh  *shellServer
		cfg config
	)
	app := newApp(
		cell.Provide(func() traceOutput { return traceOutput{stdout} }),
		cell.Invoke(func(s *server, h *shellServer, c config) { srv, sh, cfg = s, h, c }),
	)
	flags := pflag.NewFlagSet("example", pflag.ContinueOnError)
	flags.SetOutput(io.Discard) // errors and usage are printed below
	app.RegisterFlags(flags)
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s [flags]\n\nReconciles desired files into a directory, with an HTTP API. Flags:\n\n%s\n%s\n%s",
			programName(), flags.FlagUsages(), envHelp(flags), exitRule)
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
	fromEnv, err := applyEnv(flags, os.LookupEnv)
	if err != nil {
		fmt.Fprintln(stderr, "example:", err)
		return exitUsage
	}
	failed := func(err error) int {
		code, err := startFailureStatus(err, fromEnv)
		fmt.Fprintln(stderr, "example:", err)
		return code
	}

	// The hive logs the errors of invokes and start hooks; run prints
	// them, once.
	log := slog.New(dropStartErrors{slog.NewTextHandler(stderr, nil)})
	if err := app.Populate(log); err != nil {
		return failed(err)
	}
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := app.Start(log, startCtx); err != nil {
		stopStarted(app, log)
		return failed(err)
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		dir = cfg.Dir
	}
	fmt.Fprintf(stderr, "\nconverge example: reconciling into %s, API on http://%s (Ctrl-C to stop)\n"+
		"The API asks for the token in %s:\n  curl --noproxy '*' --oauth2-bearer $(cat %s) http://%s/\n\n",
		dir, srv.Addr(), filepath.Join(dir, tokenPath), filepath.Join(dir, tokenPath), srv.Addr())
	if sh.serving() {
		fmt.Fprintf(stderr, "Its shell, for the user running it only, on a Unix socket:\n  %s shell --shell-sock-path %s db/show reconcilers\n\n",
			shellProgram(), filepath.Join(dir, shellSocket))
	}

	serverFailed := false
	select {
	case <-ctx.Done():
	case <-srv.Done(): // the server failed; its error is logged
		serverFailed = true
	}
	if err := stopStarted(app, log); err != nil || serverFailed {
		return exitFailure
	}
	return exitOK
}

// runShell is `example shell [--shell-sock-path PATH] [COMMAND [ARGS]...]`:
// hive's shell client (github.com/cilium/hive/shell), connected to the
// socket of a running example, runs COMMAND, or reads commands from the
// terminal. The socket is DIR/.converge-example/shell.sock, DIR the
// default --dir or $CONVERGE_EXAMPLE_DIR.
func runShell(args []string, stderr io.Writer) int {
	dir := defaultConfig().Dir
	if d := os.Getenv(envName("dir")); d != "" {
		dir = d
	}
	cmd := shell.ShellCmd(filepath.Join(dir, shellSocket), "example> ", func(w io.Writer) {
		fmt.Fprintln(w, "converge example's shell: db/show reconcilers, db/show reconciler-retries, db/show files, help; Ctrl-D to leave")
	})
	cmd.Use = "shell [--shell-sock-path PATH] [command [args]...]"
	if cmd.ParseFlags(args) == nil { // else Execute says what is wrong
		path, err := cmd.Flags().GetString(shell.ShellSockPathName)
		if err == nil {
			err = checkShellSocket(path)
		}
		if err != nil {
			fmt.Fprintln(stderr, "example shell:", err)
			return exitUsage
		}
	}
	// Flags after the command are the command's: db/show --format=json files.
	cmd.Flags().SetInterspersed(false)
	cmd.SetArgs(args)
	cmd.SetOut(stderr)
	cmd.SetErr(stderr)
	if err := cmd.Execute(); err != nil {
		return exitUsage
	}
	return exitOK
}

// checkShellSocket refuses to talk to the socket at path unless it is the
// user's, in a state directory and a directory that only the user can
// change, as the example makes them: a socket another user made, at the
// default path or in a directory of theirs, would be answered by their
// program, whose output the client prints as it is.
func checkShellSocket(path string) error {
	state, err := filepath.EvalSymlinks(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("the shell's socket %s: %w (is the example running on that directory?)", path, err)
	}
	for _, dir := range []string{state, filepath.Dir(state)} {
		info, err := os.Stat(dir)
		if err == nil {
			err = checkPrivate(dir, info, "")
		}
		if err != nil {
			return fmt.Errorf("the shell's socket %s: %w", path, err)
		}
	}
	info, err := os.Lstat(filepath.Join(state, filepath.Base(path)))
	switch {
	case err != nil:
		return fmt.Errorf("the shell's socket %s: %w (is the example running on that directory?)", path, err)
	case info.Mode()&os.ModeSocket == 0:
		return fmt.Errorf("the shell's socket %s is not a socket", path)
	case !ownedByUser(info):
		return fmt.Errorf("the shell's socket %s belongs to another user: it is not your example's", path)
	}
	return nil
}

// shellProgram is how to run the shell client, for the start message.
func shellProgram() string {
	if name := programName(); name != "example" {
		return os.Args[0]
	}
	return "go run ./example"
}

// programName is the name the program was run as, for --help: "example"
// under go run.
func programName() string {
	if len(os.Args) == 0 || os.Args[0] == "" {
		return "example"
	}
	return filepath.Base(os.Args[0])
}

// startFailureStatus returns the exit status for err, which prevented the start,
// and the error to print: a usage error without the hive's wrapping,
// naming the environment variable that set the flag at fault (fromEnv, as
// applyEnv returns it), and exit status 2; any other error as it is, and 1.
func startFailureStatus(err error, fromEnv map[string]string) (int, error) {
	usageErr := (*usageError)(nil)
	if !errors.As(err, &usageErr) {
		return exitFailure, err
	}
	if setting := fromEnv[usageErr.flag]; setting != "" {
		return exitUsage, fmt.Errorf("%w (--%s is set by %s)", usageErr, usageErr.flag, setting)
	}
	return exitUsage, usageErr
}

// envHelp lists the environment variables that set the flags, for --help.
func envHelp(flags *pflag.FlagSet) string {
	var b strings.Builder
	b.WriteString("Environment: each flag can also be set by a variable; the command line wins.\n\n")
	flags.VisitAll(func(f *pflag.Flag) {
		fmt.Fprintf(&b, "  %-30s --%s\n", envName(f.Name), f.Name)
	})
	return b.String()
}

// dropStartErrors is a slog.Handler that leaves out the hive's own error
// records of a failed invoke or start hook, and of the failed start: run
// prints that error itself, so it appears once.
type dropStartErrors struct{ slog.Handler }

func (h dropStartErrors) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelError {
		switch r.Message {
		case "Invoke failed", "Start hook failed", "Failed to start hive":
			return nil
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h dropStartErrors) WithAttrs(attrs []slog.Attr) slog.Handler {
	return dropStartErrors{h.Handler.WithAttrs(attrs)}
}

func (h dropStartErrors) WithGroup(name string) slog.Handler {
	return dropStartErrors{h.Handler.WithGroup(name)}
}

// stopStarted stops whatever part of the hive started.
func stopStarted(app *hive.Hive, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return app.Stop(log, ctx)
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

// defaultURL is where the example serves StateDB's handler by default.
const defaultURL = "http://127.0.0.1:8080/statedb"

// Exit statuses; see the package documentation.
const (
	exitHealthy  = 0 // every reconciler shown is running, waiting, paused or stopped
	exitDegraded = 1 // a reconciler shown is degraded
	exitError    = 2 // the command failed
)

// options are the flags.
type options struct {
	url        string
	socket     string
	tokenFile  string
	reconciler string
	watch      bool
	json       bool
	timeout    time.Duration
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command with args and the environment that getenv reads,
// until it is done or ctx ends, and returns its exit status. Errors go to
// stderr, once, as "converge-inspect: ...".
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return exitHealthy
	}
	var token string
	if err == nil && o.socket == "" {
		token, err = loadToken(o.tokenFile, getenv)
	}
	if err == nil {
		var code int
		if code, err = inspect(ctx, o, token, stdout); err == nil {
			return code
		}
	}
	// An error can quote the agent's text, which can hold the token (an
	// agent or a proxy that echoes the request back).
	fmt.Fprintln(stderr, "converge-inspect:", cleanText(redact(err.Error(), token)))
	return exitError
}

// parseFlags parses args; with -help or --help it prints the usage to
// stdout and returns flag.ErrHelp.
func parseFlags(args []string, stdout io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("converge-inspect", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run prints the error; -help prints the usage below
	fs.StringVar(&o.url, "url", defaultURL, "base `URL` of the agent's StateDB handler, under which it serves /query and /changes")
	fs.StringVar(&o.socket, "socket", "", "read the agent through its hive shell on this Unix socket `path` instead of --url\n"+
		"(the example's is DIR/.converge-example/shell.sock); no token is sent")
	fs.StringVar(&o.tokenFile, "token-file", "", "`file` holding the bearer token, readable by its owner only; else $"+tokenEnv)
	fs.StringVar(&o.reconciler, "reconciler", "", "show only the reconciler with this ID (module/name), else the only one with this `name`;\n"+
		"fails if none has it, or several have the name and none the ID (with --watch: when it starts)")
	fs.BoolVar(&o.watch, "watch", false, "redraw on every change until Ctrl-C")
	fs.BoolVar(&o.json, "json", false, "print JSON (with --watch, one line per redraw)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "bound on connecting and on reading the tables")
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fmt.Fprintf(stdout, "Usage: converge-inspect [flags]\n\n"+
			"Shows the reconcilers and reconciler-retries tables of a running agent,\n"+
			"read from its StateDB HTTP handler. Flags:\n\n")
		fs.PrintDefaults()
		fmt.Fprint(stdout, exitRule)
		return o, err
	}
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if err == nil && o.timeout <= 0 {
		err = fmt.Errorf("--timeout must be positive, got %s", o.timeout)
	}
	if err == nil && o.socket != "" {
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "url":
				err = errors.New("give --socket or --url, not both")
			case "token-file":
				err = errors.New("--socket sends no token: leave out --token-file")
			}
		})
	}
	if err != nil {
		return o, fmt.Errorf("%w (see --help)", err)
	}
	return o, nil
}

// exitRule explains the exit statuses in --help.
const exitRule = `
Exit status: 0 if every reconciler shown is running, waiting, paused or stopped;
1 if one is degraded (with --watch: in the last state shown); 2 if the
command failed (a bad flag or token, an unreachable agent, a refused token,
an agent without the tables or of another converge version, a --reconciler
that picks no reconciler, or with --watch one that went away).
`

// inspect shows the tables once, or with o.watch until ctx ends, and
// returns the exit status. It sends token, if not empty.
func inspect(ctx context.Context, o options, token string, stdout io.Writer) (int, error) {
	var src source
	if o.socket != "" {
		sc, err := newShellClient(o.socket, o.timeout)
		if err != nil {
			return exitError, err
		}
		if o.watch {
			return watchPolling(ctx, sc, o, stdout)
		}
		src = sc
	} else {
		c, err := newClient(o.url, token, o.timeout)
		if err != nil {
			return exitError, err
		}
		defer c.close()
		if o.watch {
			return watch(ctx, c, o, stdout)
		}
		src = c
	}

	qctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	t, err := snapshot(qctx, src, token)
	if err != nil {
		return exitError, err
	}
	id, err := t.pick(o.reconciler)
	if err != nil {
		return exitError, err
	}
	rep := t.report(id)
	if o.json {
		err = rep.writeJSON(stdout, false)
	} else {
		err = rep.writeText(stdout, time.Now())
	}
	if err != nil {
		return exitError, err
	}
	return rep.exitStatus(), nil
}

// pick returns the ID of the reconciler that --reconciler name names, or
// "" if name is "" (every reconciler): the one whose ID is name, else the
// only one whose name is name. It fails if none is, or if several have
// that name and none that ID: it shows one reconciler or none.
func (t *rowSet) pick(name string) (string, error) {
	if name == "" {
		return "", nil
	}
	var all, named []string
	for _, info := range t.infos {
		if info.ID == name {
			return info.ID, nil
		}
		if info.Name == name {
			named = append(named, info.ID)
		}
		all = append(all, info.ID)
	}
	switch len(named) {
	case 0:
		return "", fmt.Errorf("no reconciler %s; the agent has %s", cleanText(name), listIDs(all))
	case 1:
		return named[0], nil
	}
	return "", fmt.Errorf("--reconciler %s: %d reconcilers have that name and none has it as ID: %s; give the ID of one",
		cleanText(name), len(named), listIDs(named))
}

// maxIDsListed bounds the IDs an error lists.
const maxIDsListed = 20

// listIDs lists ids, sorted, at most maxIDsListed of them, for an error.
func listIDs(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	slices.Sort(ids)
	more := ""
	if len(ids) > maxIDsListed {
		more = fmt.Sprintf(" and %d more", len(ids)-maxIDsListed)
		ids = ids[:maxIDsListed]
	}
	for i, id := range ids {
		ids[i] = clip(id)
	}
	return strings.Join(ids, ", ") + more
}

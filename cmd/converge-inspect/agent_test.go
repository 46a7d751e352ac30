package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	convergeindex "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor bounds every wait of these tests.
const waitFor = 20 * time.Second

// item is the object of the agents' tables.
type item struct {
	ID     string        `json:"id"`
	Status status.Status `json:"status"`
}

func (it *item) clone() *item                    { c := *it; return &c }
func (it *item) getStatus() status.Status        { return it.Status }
func (it *item) setStatus(s status.Status) *item { it.Status = s; return it }
func itemKey(it *item) string                    { return it.ID }
func (it *item) TableHeader() []string           { return []string{"ID", "Status"} }
func (it *item) TableRow() []string              { return []string{it.ID, it.Status.String()} }

var itemID = statedb.Index[*item, string]{
	Name:       "id",
	FromObject: func(it *item) index.KeySet { return index.NewKeySet(index.String(it.ID)) },
	FromKey:    index.String,
	FromString: index.FromString,
	Unique:     true,
}

// agent is a hive with StateDB, tables.Cell (unless left out)
// and one module per name, each with a table of items and a reconciler of
// it whose operations fail on demand; StateDB's handler is served under
// /statedb/ behind a token, on a loopback address.
type agent struct {
	t       testing.TB
	db      *statedb.DB
	tables  map[string]statedb.RWTable[*item] // by module
	faults  map[string]*reconcilertest.FaultyOps[*item]
	recs    map[string]reconciler.Reconciler[*item]
	infos   statedb.Table[*tables.Info]
	retries statedb.Table[*tables.RetryInfo]
	server  *httptest.Server
	url     string // of the StateDB handler
	token   string
	dir     string // holds tokenFile
}

const testToken = "s3cret-t0ken"

func startAgent(t testing.TB, withTables bool, modules ...string) *agent {
	t.Helper()
	a := &agent{t: t, tables: map[string]statedb.RWTable[*item]{}, faults: map[string]*reconcilertest.FaultyOps[*item]{},
		recs:  map[string]reconciler.Reconciler[*item]{},
		token: testToken, dir: t.TempDir()}
	cells := []cell.Cell{statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth), cell.Invoke(func(db *statedb.DB) { a.db = db })}
	if withTables {
		cells = append(cells, tables.Cell, cell.Invoke(func(i statedb.Table[*tables.Info], r statedb.Table[*tables.RetryInfo]) {
			a.infos, a.retries = i, r
		}))
	}
	for _, name := range modules {
		cells = append(cells, cell.Module(name, "Test module "+name,
			cell.ProvidePrivate(job.Registry.NewGroup),
			cell.Invoke(func(p reconciler.Params) error {
				table, err := statedb.NewTable(p.DB, name+"-items", itemID, convergeindex.NewStatusIndex((*item).getStatus))
				if err != nil {
					return err
				}
				ops := reconcilertest.NewFaultyOps(itemKey, reconcilertest.NewTarget(itemKey, itemKey), nil)
				a.tables[name], a.faults[name] = table, ops
				a.recs[name], err = reconciler.Register(p, table, (*item).clone, (*item).setStatus, (*item).getStatus, ops, nil,
					reconciler.WithRetry(20*time.Millisecond, 200*time.Millisecond), reconciler.WithPruning(time.Hour))
				return err
			})))
	}
	h := hive.New(cells...)
	log := hivetest.Logger(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, h.Start(log, ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		require.NoError(t, h.Stop(log, ctx))
	})

	handler := http.StripPrefix("/statedb", a.db.HTTPHandler())
	a.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+a.token {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		a.server.CloseClientConnections()
		a.server.Close()
	})
	a.url = a.server.URL + "/statedb"
	require.NoError(t, os.WriteFile(a.tokenFile(), []byte(a.token+"\n"), 0o600))
	return a
}

func (a *agent) tokenFile() string { return filepath.Join(a.dir, "token") }

// insert inserts items with these IDs into module's table.
func (a *agent) insert(module string, ids ...string) {
	a.t.Helper()
	wtxn := a.db.WriteTxn(a.tables[module])
	for _, id := range ids {
		_, _, err := a.tables[module].Insert(wtxn, &item{ID: id, Status: status.Pending()})
		require.NoError(a.t, err)
	}
	wtxn.Commit()
}

// fail makes the operations of module fail on key until heal.
func (a *agent) fail(module, key string) {
	a.t.Helper()
	require.NoError(a.t, a.faults[module].Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Key: key}))
}

func (a *agent) heal(module, key string) { a.faults[module].Clear(key) }

// waitInfo waits, on watch channels, until module's row of the
// reconcilers table satisfies cond.
func (a *agent) waitInfo(module, what string, cond func(*tables.Info) bool) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for {
		info, _, watch, found := a.infos.GetWatch(a.db.ReadTxn(), tables.InfoByID.Query(module))
		if found && cond(info) {
			return
		}
		select {
		case <-watch:
		case <-ctx.Done():
			a.t.Fatalf("timed out waiting for %s of %s; last %+v", what, module, info)
		}
	}
}

func (a *agent) waitDegraded(module string, failing int) {
	a.t.Helper()
	a.waitInfo(module, "degraded", func(i *tables.Info) bool {
		return i.State == tables.StateDegraded && i.Retrying == failing
	})
}

func (a *agent) waitRunning(module string, objects int) {
	a.t.Helper()
	a.waitInfo(module, "running", func(i *tables.Info) bool {
		return i.State == tables.StateRunning && i.Retrying == 0 && i.Objects == objects && i.InFlight == 0
	})
}

// runInspect runs the command with args and returns its exit status, stdout
// and stderr.
func runInspect(t testing.TB, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, func(k string) string { return env[k] }, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// args returns the flags that reach a, then more.
func (a *agent) args(more ...string) []string {
	return append([]string{"--url", a.url, "--token-file", a.tokenFile()}, more...)
}

// watcher runs the command with --watch until stopped, and hands out the
// lines it prints.
type watcher struct {
	t      testing.TB
	cancel context.CancelFunc
	lines  chan string
	done   chan int
	stderr bytes.Buffer
}

func startWatch(t testing.TB, args ...string) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{t: t, cancel: cancel, lines: make(chan string, 1000), done: make(chan int, 1)}
	pr, pw := io.Pipe()
	go func() {
		defer close(w.lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
	}()
	go func() {
		code := run(ctx, append(args, "--watch"), func(string) string { return "" }, pw, &w.stderr)
		pw.Close()
		w.done <- code
	}()
	t.Cleanup(func() { w.stop() })
	return w
}

// waitLine waits until the command prints a line matching re, and
// returns it and the lines before it.
func (w *watcher) waitLine(re string) (string, []string) {
	w.t.Helper()
	deadline := time.After(waitFor)
	var before []string
	for {
		select {
		case line, ok := <-w.lines:
			if !ok {
				w.t.Fatalf("the command ended before printing a line matching %q; it printed:\n%s\nstderr:\n%s", re, strings.Join(before, "\n"), w.stderr.String())
			}
			if regexp.MustCompile(re).MatchString(line) {
				return line, before
			}
			before = append(before, line)
		case <-deadline:
			w.t.Fatalf("no line matching %q in %s; it printed:\n%s", re, waitFor, strings.Join(before, "\n"))
		}
	}
}

// stop ends the command as Ctrl-C does, and returns its exit status. The
// stderr it returns is safe to read once stop returned.
func (w *watcher) stop() int {
	w.t.Helper()
	w.cancel()
	go func() {
		for range w.lines {
		}
	}()
	select {
	case code := <-w.done:
		w.done <- code
		return code
	case <-time.After(waitFor):
		w.t.Fatal("--watch did not end when its context did")
		return 0
	}
}

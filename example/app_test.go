package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// TestMain runs the tests with TMPDIR set to a directory of their own, so
// that nothing outside it is touched even by a default such as --dir's
// $TMPDIR/converge-example, and checks that no goroutine leaks.
func TestMain(m *testing.M) {
	tmp, err := os.MkdirTemp("", "converge-example-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("TMPDIR", tmp)
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.RemoveAll(tmp)
	os.Exit(code)
}

// waitFor bounds every wait in these tests.
const waitFor = 10 * time.Second

// testApp is the example's hive running in-process on a temporary directory
// and a free port.
type testApp struct {
	t      testing.TB
	parent string // holds dir and nothing else, to check nothing escapes
	dir    string
	base   string // http://127.0.0.1:port
	token  string // the API's
	client *http.Client
	db     *statedb.DB
	files  statedb.RWTable[*File]
	rec    reconciler.Reconciler[*File]
	shell  *shellServer
	stop   func()

	templates   statedb.RWTable[*Template]
	reconcilers statedb.Table[*tables.Info]
	retries     statedb.Table[*tables.RetryInfo]
}

// testConfig is a config for tests: slow background work unless a test
// speeds it up, quick retries.
func testConfig() config {
	return config{RefreshInterval: 0, PruneInterval: time.Hour, RetryMax: 200 * time.Millisecond}
}

// newTestApp builds the app's hive with cfg in place of the flags.
func newTestApp(cfg config, extra ...cell.Cell) *hive.Hive {
	app := newApp(extra...)
	hive.AddConfigOverride(app, func(c *config) { *c = cfg })
	return app
}

// startApp runs the app with cfg, with Dir and Addr (127.0.0.1:0) filled
// in unless set.
// setup, if not nil, runs before the start on the directory. extra cells
// are added to the hive.
func startApp(t testing.TB, cfg config, setup func(dir string), extra ...cell.Cell) *testApp {
	t.Helper()
	return startAppLogging(t, hivetest.Logger(t), cfg, setup, extra...)
}

// startAppLogging is startApp with the hive logging to log.
func startAppLogging(t testing.TB, log *slog.Logger, cfg config, setup func(dir string), extra ...cell.Cell) *testApp {
	t.Helper()
	a := &testApp{t: t, parent: t.TempDir()}
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(a.parent, "target")
	}
	a.dir = cfg.Dir
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if setup != nil {
		setup(a.dir)
	}
	var srv *server
	app := newTestApp(cfg, append(extra, cell.Invoke(func(s *server, db *statedb.DB, files filesTable, r reconciler.Reconciler[*File], sh *shellServer) {
		srv, a.db, a.files, a.rec, a.shell = s, db, files.RWTable, r, sh
		a.templates, a.reconcilers, a.retries = s.templates, s.reconcilers, s.retries
	}))...)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, app.Start(log, ctx))
	a.base = "http://" + srv.Addr()
	a.token = readToken(t, a.dir)
	transport := &http.Transport{MaxIdleConnsPerHost: 32}
	a.client = &http.Client{Transport: transport}
	var once sync.Once
	a.stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			assert.NoError(t, app.Stop(log, ctx))
			transport.CloseIdleConnections()
		})
	}
	t.Cleanup(a.stop)
	return a
}

// do sends a request with the path as given (not cleaned) and returns the
// status code and body.
func (a *testApp) do(method, path string, body io.Reader) (int, string) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.base+path, body)
	require.NoError(a.t, err)
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := a.client.Do(req)
	require.NoError(a.t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(a.t, err)
	return resp.StatusCode, string(data)
}

func (a *testApp) put(name, content string) int {
	a.t.Helper()
	code, body := a.do(http.MethodPut, "/files/"+name, strings.NewReader(content))
	require.Contains(a.t, []int{http.StatusCreated, http.StatusOK}, code, body)
	return code
}

// waitFile waits, on StateDB watch channels, until cond holds for the named
// file of the table, and returns it.
func (a *testApp) waitFile(name string, what string, cond func(f *File, found bool) bool) *File {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for {
		f, _, watch, found := a.files.GetWatch(a.db.ReadTxn(), nameIndex.Query(name))
		if cond(f, found) {
			return f
		}
		select {
		case <-watch:
		case <-ctx.Done():
			a.t.Fatalf("%s: timed out waiting for %s; last seen %+v (found %v)", name, what, f, found)
		}
	}
}

func (a *testApp) waitKind(name string, kind status.Kind) *File {
	a.t.Helper()
	return a.waitFile(name, "status "+kind.String(), func(f *File, found bool) bool {
		return found && f.Status.Kind == kind
	})
}

// waitReconciled waits until no file is Pending or Refreshing.
func (a *testApp) waitReconciled() {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(a.t, reconciler.WaitForReconciliation(ctx, a.db, a.files, statusIndex))
}

// waitQuiet is waitReconciled, and then waits for the prune that follows
// the table's initialization: after it nothing writes into the directory
// (with testConfig) until the test does.
func (a *testApp) waitQuiet() {
	a.t.Helper()
	a.waitReconciled()
	a.waitInfo("the first prune", func(i *tables.Info) bool { return !i.LastPrune.IsZero() })
}

func (a *testApp) readFile(name string) string {
	a.t.Helper()
	data, err := os.ReadFile(filepath.Join(a.dir, name))
	require.NoError(a.t, err)
	return string(data)
}

// dirNames lists the target directory, less the example's state
// directory.
func (a *testApp) dirNames() []string {
	a.t.Helper()
	return dirNames(a.t, a.dir)
}

func dirNames(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		if e.Name() != stateDir {
			names = append(names, e.Name())
		}
	}
	return names
}

type healthResponse struct {
	Level  cell.Level     `json:"level"`
	Scopes []healthReport `json:"scopes"`
}

func (a *testApp) health() (int, healthResponse) {
	a.t.Helper()
	code, body := a.do(http.MethodGet, "/health", nil)
	var h healthResponse
	require.NoError(a.t, json.Unmarshal([]byte(body), &h), body)
	return code, h
}

// waitHealth polls /health until its level is want.
func (a *testApp) waitHealth(want cell.Level) healthResponse {
	a.t.Helper()
	var last healthResponse
	require.Eventually(a.t, func() bool {
		_, last = a.health()
		return last.Level == want
	}, waitFor, 10*time.Millisecond, "health never became %s", want)
	return last
}

// breakDir replaces the target directory with a regular file. Chmod would
// not stop root from writing, which these tests run as. The app recreates a
// missing directory and writes into it, so RemoveAll may meet a directory
// that is not empty: retry until the file took its place.
func (a *testApp) breakDir() {
	a.t.Helper()
	require.Eventually(a.t, func() bool {
		return os.RemoveAll(a.dir) == nil && os.WriteFile(a.dir, []byte("not a directory"), 0o644) == nil
	}, waitFor, time.Millisecond)
}

// waitNewToken waits until the token file in the target directory holds
// another token than a.token, as it does once the example claimed a
// directory anew, and uses it from then on, as a client would.
func (a *testApp) waitNewToken() {
	a.t.Helper()
	require.Eventually(a.t, func() bool {
		data, err := os.ReadFile(filepath.Join(a.dir, tokenPath))
		if err != nil || strings.TrimSpace(string(data)) == a.token {
			return false
		}
		a.token = strings.TrimSpace(string(data))
		return true
	}, waitFor, 5*time.Millisecond, "the example wrote no new token into the directory it claimed anew")
}

func degradedErrors(h healthResponse) string {
	var errs []string
	for _, s := range h.Scopes {
		if s.Level == cell.StatusDegraded {
			errs = append(errs, s.Scope+": "+s.Message+": "+s.Error)
		}
	}
	return strings.Join(errs, "\n")
}

func startFailure(t *testing.T, cfg config) error {
	app := newTestApp(cfg)
	log := hivetest.Logger(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	err := app.Start(log, ctx)
	require.Error(t, err)
	require.NoError(t, app.Stop(log, ctx))
	return err
}

// info returns the reconciler's row of the reconcilers table (a zero Info
// before the reconciler wrote it) and a channel closed when it changes.
func (a *testApp) info() (*tables.Info, <-chan struct{}) {
	info, _, watch, found := a.reconcilers.GetWatch(a.db.ReadTxn(), tables.InfoByID.Query("files"))
	if !found {
		info = &tables.Info{}
	}
	return info, watch
}

// waitInfo waits, on StateDB watch channels, until cond holds for the
// reconciler's row of the reconcilers table, and returns it.
func (a *testApp) waitInfo(what string, cond func(*tables.Info) bool) *tables.Info {
	a.t.Helper()
	return a.waitInfoFor(waitFor, what, cond)
}

// waitInfoFor is waitInfo, waiting up to d.
func (a *testApp) waitInfoFor(d time.Duration, what string, cond func(*tables.Info) bool) *tables.Info {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		info, watch := a.info()
		if cond(info) {
			return info
		}
		select {
		case <-watch:
		case <-ctx.Done():
			a.t.Fatalf("timed out waiting for %s; the reconcilers row is %+v", what, info)
		}
	}
}

// prune asks for a prune and waits until one more has run.
func (a *testApp) prune() {
	a.t.Helper()
	before, _ := a.info()
	a.rec.Prune()
	a.waitPruneAfter(before.LastPrune)
}

// waitPruneAfter waits until a prune that started after t has run.
func (a *testApp) waitPruneAfter(t time.Time) *tables.Info {
	a.t.Helper()
	return a.waitInfo("a prune", func(i *tables.Info) bool { return i.LastPrune.After(t) })
}

// scrape returns the series of /metrics whose names start with prefix, by
// name and labels as exposed, such as
// `converge_prune_total{module="files",name=""}`.
func (a *testApp) scrape(prefix string) map[string]float64 {
	a.t.Helper()
	code, body := a.do(http.MethodGet, "/metrics", nil)
	require.Equal(a.t, http.StatusOK, code, body)
	out := map[string]float64{}
	for line := range strings.Lines(body) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		require.Positive(a.t, i, line)
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(a.t, err, line)
		out[line[:i]] = v
	}
	return out
}

// journalNames returns the names the ownership journal of dir lists.
func journalNames(t testing.TB, dir string) []string {
	t.Helper()
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	defer root.Close()
	j, err := loadJournal(root, readRegular)
	require.NoError(t, err)
	defer j.close()
	return j.names()
}

// readToken returns the API's token, as the example wrote it into dir.
func readToken(t testing.TB, dir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, tokenPath))
	require.NoError(t, err)
	return strings.TrimSpace(string(data))
}

// errorMessage returns the message of an error answer of the API,
// {"error": "..."}.
func errorMessage(t testing.TB, body string) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &e), body)
	require.NotEmpty(t, e.Error, body)
	return e.Error
}

// runExample runs the example as main does, with args, and returns its exit
// status and what it printed on stderr. A run that starts is stopped after
// waitFor.
func runExample(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	var stdout, stderr syncBuffer
	code := run(ctx, args, &stdout, &stderr)
	return code, stderr.String()
}

// syncBuffer is a bytes.Buffer safe for the app's goroutines to write to
// while a test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// snapshot describes every entry under dir, without following symbolic
// links and leaving out the example's state directory: a map from
// relative path to mode and content.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if rel == stateDir {
			return filepath.SkipDir
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		desc := info.Mode().String()
		switch {
		case info.Mode().IsRegular():
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			desc += " " + string(data)
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			desc += " -> " + target
		}
		out[rel] = desc
		return nil
	}))
	return out
}

// requireUnchanged checks that every entry of before is in after as it was.
func requireUnchanged(t *testing.T, before, after map[string]string) {
	t.Helper()
	for path, desc := range before {
		require.Equal(t, desc, after[path], path)
	}
}

func requireAbsent(t *testing.T, path string) {
	t.Helper()
	_, err := os.Lstat(path)
	require.ErrorIs(t, err, fs.ErrNotExist, "%s must not exist", path)
}

package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// requireFails checks that the command failed with exit status 2, printed
// nothing on stdout, and printed one line on stderr matching re, without
// the token.
func requireFails(t *testing.T, re string, code int, stdout, stderr string) {
	t.Helper()
	require.Equal(t, exitError, code, stderr)
	require.Empty(t, stdout)
	require.Regexp(t, regexp.MustCompile(`^converge-inspect: `+re+`\n$`), stderr)
	require.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
	require.NotContains(t, stderr, testToken)
}

func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	url := "http://" + addr + "/statedb"
	for _, watch := range []bool{false, true} {
		args := []string{"--url", url}
		if watch {
			args = append(args, "--watch")
		}
		code, stdout, stderr := runInspect(t, nil, args...)
		requireFails(t, `cannot reach the agent at `+regexp.QuoteMeta(url)+`/(query|changes/reconcilers): dial tcp `+regexp.QuoteMeta(addr)+`: connect: connection refused `+
			`\(is it running, and is --url the address of its StateDB handler\?\)`, code, stdout, stderr)
	}
}

func TestNoTables(t *testing.T) {
	a := startAgent(t, false, "routes")
	code, stdout, stderr := runInspect(t, nil, a.args()...)
	requireFails(t, `no table reconcilers: is tables\.Cell in the agent's hive\?`, code, stdout, stderr)
	code, stdout, stderr = runInspect(t, nil, a.args("--watch")...)
	requireFails(t, `no table reconcilers: is tables\.Cell in the agent's hive\?`, code, stdout, stderr)
}

func TestUnauthorized(t *testing.T) {
	a := startAgent(t, true)
	code, stdout, stderr := runInspect(t, nil, "--url", a.url)
	requireFails(t, `unauthorized: `+regexp.QuoteMeta(a.url)+`/query answered 401 Unauthorized: it asks for a token; `+
		`give --token-file \(the example's is DIR/\.converge-example/token\) or set CONVERGE_INSPECT_TOKEN`, code, stdout, stderr)

	env := map[string]string{tokenEnv: "not-the-token"}
	code, stdout, stderr = runInspect(t, env, "--url", a.url)
	requireFails(t, `unauthorized: `+regexp.QuoteMeta(a.url)+`/query answered 401 Unauthorized: it refused the token \(the example writes a new one at every start\)`,
		code, stdout, stderr)
	code, stdout, stderr = runInspect(t, env, "--url", a.url, "--watch")
	requireFails(t, `unauthorized: `+regexp.QuoteMeta(a.url)+`/changes/reconcilers answered 401 Unauthorized: it refused the token .*`, code, stdout, stderr)

	// The variable's token works; --token-file wins over it.
	code, stdout, stderr = runInspect(t, map[string]string{tokenEnv: " " + testToken + "\n"}, "--url", a.url)
	require.Equal(t, exitHealthy, code, stderr)
	require.Equal(t, "No reconcilers.\n", stdout)
	code, _, stderr = runInspect(t, env, a.args()...)
	require.Equal(t, exitHealthy, code, stderr)
}

// A --url that is not the base of StateDB's handler.
func TestWrongPath(t *testing.T) {
	a := startAgent(t, true)
	code, stdout, stderr := runInspect(t, nil, "--url", a.server.URL+"/elsewhere", "--token-file", a.tokenFile())
	requireFails(t, `unexpected answer: `+regexp.QuoteMeta(a.server.URL)+`/elsewhere/query answered 404 Not Found: `+
		`is --url the base of the agent's StateDB handler, under which it serves /query and /changes \(such as http://127\.0\.0\.1:8080/statedb\)\?`,
		code, stdout, stderr)
}

// fakeAgent serves body, with status, at every path.
func fakeAgent(t *testing.T, status int, body string) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// lineOf returns prefix, then x's, then suffix: n bytes.
func lineOf(n int, prefix, suffix string) string {
	return prefix + strings.Repeat("x", n-len(prefix)-len(suffix)) + suffix
}

// An agent of another converge version, or something else than StateDB's
// handler, answers what the command cannot read.
func TestVersionMismatch(t *testing.T) {
	cases := map[string]struct{ body, want string }{
		"unknown state": {`{"rev":1,"obj":{"id":"routes","module":"routes","state":"exploded"}}` + "\n",
			`unexpected answer: a row of table reconcilers does not decode as this command's converge version writes it ` +
				`\(is the agent built with another version of converge\?\): reconciler routes has the unknown state "exploded"`},
		"no id": {`{"rev":1,"obj":{"identity":"routes","state":"running"}}` + "\n",
			`unexpected answer: a row of table reconcilers does not decode .*: a row has no id`},
		"wrong type": {`{"rev":1,"obj":{"id":"routes","state":"running","objects":"many"}}` + "\n",
			`unexpected answer: a row of table reconcilers does not decode .*: json: cannot unmarshal string into Go struct field .*objects of type int`},
		"not StateDB": {"<html>hello</html>\n",
			`unexpected answer: the answer of http://127\.0\.0\.1:\d+/statedb/query for table reconcilers is not StateDB's: invalid character '<' looking for beginning of value`},
		"a line too long": {`{"rev":1,"obj":"` + strings.Repeat("x", maxLine) + `"}`,
			`answer too large: the answer of http://127\.0\.0\.1:\d+/statedb/query has a line longer than 1048576 bytes`},
		"a line a byte too long": {lineOf(maxLine+1, `{"rev":1,"obj":"`, `"}`) + "\n",
			`answer too large: the answer of http://127\.0\.0\.1:\d+/statedb/query has a line longer than 1048576 bytes`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			url := fakeAgent(t, http.StatusOK, c.body)
			code, stdout, stderr := runInspect(t, nil, "--url", url+"/statedb")
			requireFails(t, c.want, code, stdout, stderr)
		})
	}
	t.Run("no index", func(t *testing.T) {
		url := fakeAgent(t, http.StatusBadRequest, `{"rev":0,"obj":null,"err":"Index \"id\" not found"}`)
		code, stdout, stderr := runInspect(t, nil, "--url", url+"/statedb")
		requireFails(t, `unexpected answer: http://127\.0\.0\.1:\d+/statedb/query answered 400 Bad Request: Index "id" not found: is the agent built with another version of converge\?`,
			code, stdout, stderr)
	})
	t.Run("other error", func(t *testing.T) {
		url := fakeAgent(t, http.StatusInternalServerError, `{"error":"broken\u001b[2J"}`)
		code, stdout, stderr := runInspect(t, nil, "--url", url+"/statedb")
		requireFails(t, `http://127\.0\.0\.1:\d+/statedb/query answered 500 Internal Server Error: broken\?\[2J`, code, stdout, stderr)
	})
}

// An agent that does not answer in --timeout.
func TestTimeout(t *testing.T) {
	release := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release: // the server sees the client go only once it reads the body
		}
	}))
	defer s.Close()
	defer close(release)
	start := time.Now()
	code, stdout, stderr := runInspect(t, nil, "--url", s.URL+"/statedb", "--timeout", "100ms")
	requireFails(t, `cannot reach the agent at http://127\.0\.0\.1:\d+/statedb/query: .*`, code, stdout, stderr)
	require.Less(t, time.Since(start), waitFor)
}

func TestBadFlags(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"unknown flag":  {[]string{"--nope"}, `flag provided but not defined: -nope \(see --help\)`},
		"argument":      {[]string{"extra"}, `unexpected arguments: \["extra"\] \(see --help\)`},
		"timeout":       {[]string{"--timeout", "0s"}, `--timeout must be positive, got 0s \(see --help\)`},
		"not http":      {[]string{"--url", "ftp://127.0.0.1/statedb"}, `--url "ftp://127.0.0.1/statedb": give the base URL of the agent's StateDB handler, such as http://127\.0\.0\.1:8080/statedb`},
		"user in URL":   {[]string{"--url", "http://me:pw@127.0.0.1/statedb"}, `--url http://me:xxxxx@127\.0\.0\.1/statedb: give a URL without user, query or fragment \(the token goes in --token-file\)`},
		"no token file": {[]string{"--token-file", "/nonexistent/token"}, `unusable token: --token-file: open /nonexistent/token: no such file or directory`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runInspect(t, nil, c.args...)
			requireFails(t, c.want, code, stdout, stderr)
		})
	}
}

func TestHelp(t *testing.T) {
	code, stdout, stderr := runInspect(t, nil, "--help")
	require.Equal(t, exitHealthy, code)
	require.Empty(t, stderr)
	for _, want := range []string{"Usage: converge-inspect [flags]", "-url URL", "-token-file file", "CONVERGE_INSPECT_TOKEN",
		"-reconciler name", "-watch", "-json", "-timeout duration", exitRule} {
		require.Contains(t, stdout, want)
	}
}

// The token file is refused unless only its owner can read and write it,
// it is a regular file of at most 4 KiB and it holds a token; no message
// shows the token.
func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(content), mode))
		require.NoError(t, os.Chmod(path, mode))
		return path
	}
	good := write("good", testToken+"\n", 0o600)
	token, err := loadToken(good, func(string) string { return "ignored" })
	require.NoError(t, err)
	require.Equal(t, testToken, token)
	token, err = loadToken(write("readonly", "abc+/def==", 0o400), nil)
	require.NoError(t, err)
	require.Equal(t, "abc+/def==", token)
	token, err = loadToken("", func(string) string { return "" })
	require.NoError(t, err)
	require.Empty(t, token)

	cases := map[string]struct {
		path string
		want string
	}{
		"readable by others":  {write("others", testToken, 0o644), `has mode 0644: others can read or write it; make it readable by its owner only \(chmod 600\)`},
		"readable by a group": {write("group", testToken, 0o640), `has mode 0640: others can read`},
		"writable by a group": {write("gw", testToken, 0o620), `has mode 0620: others can read`},
		"too large":           {write("large", strings.Repeat("a", maxToken+1), 0o600), `is larger than 4096 bytes`},
		"empty":               {write("empty", "\n", 0o600), `is empty`},
		"not a token":         {write("spaces", testToken+" "+testToken, 0o600), `does not hold a bearer token`},
		"two lines":           {write("lines", testToken+"\n"+testToken, 0o600), `does not hold a bearer token`},
		"a directory":         {dir, `is not a regular file`},
	}
	if runtime.GOOS != "windows" {
		fifo := filepath.Join(dir, "fifo")
		require.NoError(t, syscall.Mkfifo(fifo, 0o600))
		cases["a named pipe"] = struct{ path, want string }{fifo, `is not a regular file`}
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := loadToken(c.path, nil)
			require.ErrorIs(t, err, errToken)
			require.Regexp(t, `^unusable token: --token-file `+regexp.QuoteMeta(c.path)+` .*`+c.want, err.Error())
			require.NotContains(t, err.Error(), testToken)

			code, stdout, stderr := runInspect(t, nil, "--token-file", c.path)
			requireFails(t, `unusable token: .*`, code, stdout, stderr)
		})
	}

	_, err = loadToken("", func(string) string { return "bad token\x1b" })
	require.EqualError(t, err, "unusable token: CONVERGE_INSPECT_TOKEN does not hold a bearer token (letters, digits and -._~+/ then =)")
}

// The token goes over plain HTTP to loopback addresses only.
func TestTokenOverPlainHTTP(t *testing.T) {
	for _, url := range []string{"http://127.0.0.1:1/statedb", "http://localhost:1/statedb", "http://[::1]:1/statedb", "https://agent.example:8443/statedb"} {
		c, err := newClient(url, testToken, time.Second)
		require.NoError(t, err, url)
		c.close()
	}
	c, err := newClient("http://agent.example:8080/statedb", "", time.Second)
	require.NoError(t, err)
	c.close()
	code, stdout, stderr := runInspect(t, map[string]string{tokenEnv: testToken}, "--url", "http://agent.example:8080/statedb")
	requireFails(t, `--url http://agent\.example:8080/statedb: refusing to send the token over plain HTTP to a host that is not a loopback address; use https`,
		code, stdout, stderr)
}

// A stream of changes that sends what the command cannot read ends
// --watch with exit status 2, after the first frame.
func TestWatchBadStream(t *testing.T) {
	cases := map[string]struct{ change, want string }{
		"unknown state": {`{"rev":7,"obj":{"id":"routes","module":"routes","state":"exploded"}}`,
			`unexpected answer: a row of table reconcilers does not decode .*: reconciler routes has the unknown state "exploded"`},
		"a line too long": {`{"rev":7,"obj":"` + strings.Repeat("x", maxLine) + `"}`,
			`answer too large: the stream of changes of reconcilers has a line longer than 1048576 bytes`},
		"a line a byte too long": {lineOf(maxLine+1, `{"rev":7,"obj":"`, `"}`),
			`answer too large: the stream of changes of reconcilers has a line longer than 1048576 bytes`},
		"not StateDB": {`<html>`,
			`unexpected answer: the answer of http://127\.0\.0\.1:\d+/statedb/changes/reconcilers for table reconcilers is not StateDB's: .*`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			release := make(chan struct{})
			s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/statedb/changes/reconcilers":
					fmt.Fprintln(w, `{"rev":0,"obj":null}`) // a keep-alive
					fmt.Fprintln(w, c.change)
				case "/statedb/changes/reconciler-retries":
					w.(http.Flusher).Flush()
					select { // a stream with nothing to say
					case <-r.Context().Done():
					case <-release:
					}
				case "/statedb/query":
					// An empty table.
				default:
					w.WriteHeader(http.StatusNotFound)
				}
			}))
			defer s.Close()
			defer close(release)
			code, stdout, stderr := runInspect(t, nil, "--url", s.URL+"/statedb", "--watch")
			require.Equal(t, exitError, code, stderr)
			require.Regexp(t, `^--- \d\d:\d\d:\d\d\nNo reconcilers\.\n\n$`, stdout)
			require.Regexp(t, regexp.MustCompile(`^converge-inspect: `+c.want+`\n$`), stderr)
		})
	}
}

// An answer cut in the middle of a line (the agent died) says that it was
// cut, not that the piece that arrived is not StateDB's answer: once, and
// on the stream of changes of --watch.
func TestCutMidLine(t *testing.T) {
	const piece = `{"rev":1,"obj":{"id":"r","mod`
	cut := func(w http.ResponseWriter) {
		w.Header().Set("Content-Length", "1000")
		w.Write([]byte(piece)) // then the handler returns: the server closes the connection
	}
	query := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { cut(w) }))
	defer query.Close()
	code, stdout, stderr := runInspect(t, nil, "--url", query.URL+"/statedb")
	requireFails(t, `cannot reach the agent at http://127\.0\.0\.1:\d+/statedb/query: unexpected EOF .*`, code, stdout, stderr)

	stream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/statedb/changes/") {
			cut(w)
		}
		// /statedb/query: no rows
	}))
	defer stream.Close()
	w := startWatch(t, "--url", stream.URL+"/statedb")
	w.waitLine(`^No reconcilers\.$`)
	select {
	case code = <-w.done:
		w.done <- code // for stop, at cleanup
	case <-time.After(waitFor):
		t.Fatal("--watch did not end when the stream of changes was cut")
	}
	require.Equal(t, exitError, code)
	require.Regexp(t, `^converge-inspect: reading the stream of changes of (reconcilers|reconciler-retries): unexpected EOF\n$`, w.stderr.String())
}

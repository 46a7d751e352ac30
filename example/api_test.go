//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// The API holds as a safe service when probed by another user of the
// machine or a hostile web page (issue 35, items 1, 3, 4 and 6).

// Issue 35, item 1: a name that is not valid UTF-8 was stored in the
// journal as U+FFFD, and a later prune deleted a user's file of that
// name. Such names are refused, and nothing is stored or written.
func TestNamesMustBeValidUTF8(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	for _, path := range []string{"/files/%FF", "/files/%FE", "/files/a%FFb", "/files/%C3%28", "/files/%ED%A0%80"} {
		for _, method := range []string{http.MethodPut, http.MethodGet, http.MethodDelete} {
			code, body := a.do(method, path, strings.NewReader("x"))
			require.Equal(t, http.StatusBadRequest, code, "%s %s: %s", method, path, body)
			require.Contains(t, errorMessage(t, body), "not valid UTF-8", "%s %s", method, path)
		}
	}
	require.Equal(t, len(initialNames), a.files.NumObjects(a.db.ReadTxn()))
	require.Equal(t, initialNames, a.dirNames())
	require.ElementsMatch(t, initialNames, journalNames(t, a.dir))

	_, err := parseFiles("x.yaml", []byte("files:\n  - name: \xff\n"))
	require.ErrorContains(t, err, "x.yaml: invalid YAML")
}

// Issue 35, item 3: any local user could read and write through the API.
// Every route now asks for the token, which only the user can read, and
// refuses a request without it, or with another, with 401 and changes
// nothing. The token is new at every start.
func TestAPIAsksForTheToken(t *testing.T) {
	r := startRun(t)
	r.waitDone()
	state, err := os.Stat(filepath.Join(r.dir, stateDir))
	require.NoError(t, err)
	require.Equal(t, fs.ModeDir|0o700, state.Mode())
	file, err := os.Stat(filepath.Join(r.dir, tokenPath))
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o600), file.Mode())
	require.Len(t, r.token, 64)
	require.Contains(t, r.stderr.String(), "The API asks for the token in "+filepath.Join(r.dir, tokenPath))
	require.NotContains(t, r.stderr.String(), r.token, "the token is not printed")

	routes := []struct{ method, path, body string }{
		{"GET", "/", ""}, {"GET", "/files", ""}, {"GET", "/files/secret.conf", ""}, {"PUT", "/files/x?mode=4777", "x"},
		{"DELETE", "/files/motd", ""}, {"PUT", "/templates/banner", "x"}, {"GET", "/templates", ""},
		{"GET", "/statedb/dump", ""}, {"GET", "/statedb/dump/files", ""},
		{"GET", "/statedb/query", `{"table":"files","index":"name","key":""}`}, {"GET", "/statedb/changes/files", ""},
		{"POST", "/pause", ""}, {"GET", "/health", ""}, {"GET", "/metrics", ""}, {"GET", "/debug/vars", ""},
		{"GET", "/reconcilers", ""}, {"GET", "/retries", ""}, {"GET", "/nope", ""},
	}
	for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer wrong", "Basic " + r.token, r.token, "Bearer " + r.token[:63]} {
		for _, route := range routes {
			req, err := http.NewRequest(route.method, r.base+route.path, strings.NewReader(route.body))
			require.NoError(t, err)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := r.client.Do(req)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s %s with %q: %s", route.method, route.path, auth, body)
			require.Equal(t, `Bearer realm="converge example"`, resp.Header.Get("WWW-Authenticate"))
			require.Contains(t, errorMessage(t, string(body)), "this API needs its token")
			require.NotContains(t, string(body), "hello")
		}
	}
	// Nothing changed: the desired set is as it was, and not paused.
	code, body := r.do(http.MethodGet, "/files", "")
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, `"name": "x"`)
	require.Contains(t, body, `"name": "motd"`)
	code, body = r.do(http.MethodGet, "/reconcilers", "")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"state": "running"`)

	// With the token, each route answers; the scheme's case does not matter.
	req, err := http.NewRequest(http.MethodGet, r.base+"/files", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "bearer "+r.token)
	resp, err := r.client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for _, route := range routes {
		if route.path == "/statedb/changes/files" {
			continue // a stream: TestStateDBHandler reads it
		}
		code, body := r.do(route.method, route.path, route.body)
		require.NotEqual(t, http.StatusUnauthorized, code, "%s %s: %s", route.method, route.path, body)
	}
}

// A recreated directory gets a new token, and so does a new start: the
// old one is refused.
func TestTokenAcrossRecreationAndRestart(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	first := a.token
	require.NoError(t, os.RemoveAll(a.dir))
	a.put("x", "y") // the write recreates the directory
	a.waitKind("x", status.KindDone)
	second := readToken(t, a.dir)
	require.NotEqual(t, first, second)
	code, body := a.do(http.MethodGet, "/files", nil)
	require.Equal(t, http.StatusUnauthorized, code, body)
	a.token = second
	code, body = a.do(http.MethodGet, "/files", nil)
	require.Equal(t, http.StatusOK, code, body)
	a.stop()

	cfg := testConfig()
	cfg.Dir = a.dir
	b := startApp(t, cfg, nil)
	require.NotEqual(t, first, b.token)
	b.token = second
	code, body = b.do(http.MethodGet, "/files", nil)
	require.Equal(t, http.StatusUnauthorized, code, body)
}

// Issue 35, item 4: StateDB's /statedb/query read a request body of any
// size. Every route now gets at most maxContentLen bytes: more is refused
// with 413, declared or not.
func TestRequestBodiesAreBounded(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	a.waitInfo("the reconciler's row", func(i *tables.Info) bool { return i.State != "" })
	big := bytes.Repeat([]byte(" "), maxContentLen+1)
	for _, c := range []struct {
		method, path string
		body         io.Reader
	}{
		{"GET", "/statedb/query", bytes.NewReader(big)},
		{"POST", "/pause", bytes.NewReader(big)},
		{"GET", "/files", bytes.NewReader(big)},
		{"PUT", "/templates/t", bytes.NewReader(big)},
	} {
		code, body := a.do(c.method, c.path, c.body)
		require.Equal(t, http.StatusRequestEntityTooLarge, code, "%s %s: %s", c.method, c.path, body)
		require.Contains(t, errorMessage(t, body), "larger than the limit of 1048576 bytes")
	}
	// Without a length (chunked), StateDB's handler stops reading at the
	// limit and answers 400 with its own error.
	code, body := a.do(http.MethodGet, "/statedb/query", io.MultiReader(bytes.NewReader(big)))
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, "request body too large")
	// A query of a reasonable size is answered.
	code, body = a.do(http.MethodGet, "/statedb/query", strings.NewReader(`{"table":"files","index":"name","key":"","lowerbound":true}`))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "hello.txt")
	info, _ := a.info()
	require.Equal(t, tables.StateRunning, info.State, "the refused POST /pause did not pause")
}

// Issue 35, item 4: idle and slow connections were held for ever. Each is
// now closed after its timeout, shortened here.
func TestSlowConnectionsAreClosed(t *testing.T) {
	timeouts := &httpTimeouts{ReadHeader: 100 * time.Millisecond, Read: 200 * time.Millisecond, Write: time.Second, Idle: 100 * time.Millisecond}
	a := startApp(t, testConfig(), nil, cell.Provide(func() *httpTimeouts { return timeouts }))
	host := strings.TrimPrefix(a.base, "http://")

	// requireClosed reads from conn until the server closes it; the
	// deadline only keeps a failing test from hanging.
	requireClosed := func(conn net.Conn, what string) string {
		t.Helper()
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(waitFor)))
		data, err := io.ReadAll(conn)
		var netErr net.Error
		require.False(t, errors.As(err, &netErr) && netErr.Timeout(), "%s: the server kept the connection: %v", what, err)
		return string(data)
	}
	dial := func() net.Conn {
		conn, err := net.Dial("tcp", host)
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		return conn
	}

	requireClosed(dial(), "a connection that sends nothing")

	conn := dial()
	_, err := io.WriteString(conn, "GET /files HTTP/1.1\r\nHost: "+host+"\r\n")
	require.NoError(t, err)
	requireClosed(conn, "headers never finished")

	conn = dial()
	_, err = fmt.Fprintf(conn, "PUT /files/slow HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Length: 100\r\n\r\nonly part", host, a.token)
	require.NoError(t, err)
	answer := requireClosed(conn, "a body never finished")
	require.NotContains(t, answer, "201 Created")

	conn = dial()
	_, err = fmt.Fprintf(conn, "GET /health HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", host, a.token)
	require.NoError(t, err)
	answer = requireClosed(conn, "an idle kept-alive connection")
	require.Contains(t, answer, "HTTP/1.1 200 OK")

	_, _, found := a.files.Get(a.db.ReadTxn(), nameIndex.Query("slow"))
	require.False(t, found, "a body cut short stored a file")
}

// Connections that hold their slot (another user of the machine can open
// thousands inside the header timeout) are bounded: beyond the limit,
// lowered here to 2, a request is not served until one of them closes.
func TestConnectionsAreBounded(t *testing.T) {
	a := startApp(t, testConfig(), nil, cell.Provide(func() connLimit { return 2 }))
	host := strings.TrimPrefix(a.base, "http://")
	var held []net.Conn
	for range 2 {
		conn, err := net.Dial("tcp", host)
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		held = append(held, conn)
	}
	get := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/health", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+a.token)
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	// Served, the request would take milliseconds; held back, it waits
	// until its deadline, which only bounds the test's wait.
	require.ErrorIs(t, get(300*time.Millisecond), context.DeadlineExceeded, "a third connection was served while two were held")

	held[0].Close()
	require.NoError(t, get(waitFor), "a connection closed, and the next is still not served")
}

// Issue 35, item 4: --files was read without a limit, hung on a named
// pipe, and quoted the file in its errors. It must now be a regular file
// of at most maxFilesLen bytes, and errors quote keys and names only.
// Intervals below minInterval are refused.
func TestFilesFlagAndIntervalsAreBounded(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "target")
	fifo := filepath.Join(parent, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	big := filepath.Join(parent, "big.yaml")
	require.NoError(t, os.WriteFile(big, nil, 0o600))
	require.NoError(t, os.Truncate(big, maxFilesLen+1))
	secret := func(name, content string) string {
		path := filepath.Join(parent, name)
		require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
		return path
	}
	cases := []struct {
		args    []string
		msg     string
		private string // must not be printed
	}{
		{[]string{"--files", fifo}, "--files: " + fifo + " is not a regular file (a named pipe); give a YAML file", ""},
		{[]string{"--files", "/dev/zero"}, "--files: /dev/zero is not a regular file (a character device); give a YAML file", ""},
		{[]string{"--files", parent}, "--files: " + parent + " is not a regular file (a directory); give a YAML file", ""},
		{[]string{"--files", big}, fmt.Sprintf("--files: %s is larger than the limit of %d bytes", big, maxFilesLen), ""},
		{[]string{"--files", secret("shadow", "root:$6$saltsalt$hashhashhash:19000:0:99999:7:::\n")}, "line 1, column 1: unknown key in the document (its text is not shown); it takes templates, files", "saltsalt"},
		{[]string{"--files", secret("scalar", "hunter2\n")}, "line 1: the document must be a mapping with the keys templates, files", "hunter2"},
		{[]string{"--files", secret("env", "password: hunter2\n")}, "line 1, column 1: unknown key in the document (its text is not shown); it takes templates, files", "password"},
		{[]string{"--files", secret("nested-key", "files:\n  - name: a\n    AKIAIOSFODNN7EXAMPLE: x\n")}, "line 3, column 5: unknown key in files[0] (its text is not shown); it takes name, content, mode, template", "AKIA"},
		{[]string{"--files", secret("anchor", "files: *hunter2\n")}, "invalid YAML: unknown anchor (...) referenced", "hunter2"},
		{[]string{"--files", secret("list", "files:\n  - hunter2\n")}, "line 2: files[0] must be a mapping", "hunter2"},
		{[]string{"--files", secret("nested", "files:\n  - name: a\n    content: [hunter2]\n")}, "line 3: files[0]: content must be a plain value", "hunter2"},
		{[]string{"--refresh", "1ns"}, "--refresh must be 0 (never refresh) or at least 10ms, got 1ns", ""},
		{[]string{"--prune", "9ms"}, "--prune must be 0 (never prune) or at least 10ms, got 9ms", ""},
		{[]string{"--retry-max", "1us"}, "--retry-max must be at least 10ms, got 1µs", ""},
	}
	for _, c := range cases {
		args := append([]string{"--dir", dir, "--addr", "127.0.0.1:0"}, c.args...)
		done := make(chan struct{})
		var code int
		var stderr string
		go func() {
			defer close(done)
			code, stderr = runExample(t, args...)
		}()
		select {
		case <-done:
		case <-time.After(waitFor):
			if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close() // let a reader blocked on the pipe go
			}
			<-done
			t.Fatalf("%v: the example hung", c.args)
		}
		require.Equal(t, exitUsage, code, "%v: %s", c.args, stderr)
		// On the line of the error; the hive may log a slow invoke
		// before it on a busy machine.
		require.Regexp(t, `(?m)^example: .*`+regexp.QuoteMeta(c.msg), stderr)
		requireOnce(t, stderr, c.msg)
		if c.private != "" {
			require.NotContains(t, stderr, c.private, c.args)
		}
	}
	requireAbsent(t, dir)
}

// Issue 35, item 6: /debug/vars showed the command line and /health
// errors the directory's absolute path.
func TestAPIShowsNoPathsNorCommandLine(t *testing.T) {
	r := startRun(t)
	r.waitDone()
	code, body := r.do(http.MethodGet, "/debug/vars", "")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, `"cmdline"`)
	require.NotContains(t, body, r.dir)
	require.Contains(t, body, `"memstats"`)

	require.Eventually(t, func() bool { // a refresh may write meanwhile
		return os.RemoveAll(r.dir) == nil && os.WriteFile(r.dir, []byte("in the way"), 0o644) == nil
	}, waitFor, time.Millisecond)
	defer os.Remove(r.dir)
	code, body = r.do(http.MethodPut, "/files/x", "y")
	require.Equal(t, http.StatusCreated, code, body)
	var health string
	require.Eventually(t, func() bool {
		code, health = r.do(http.MethodGet, "/health", "")
		return code == http.StatusServiceUnavailable && strings.Contains(health, "not a directory")
	}, waitFor, 5*time.Millisecond, "health never reported the directory: %s", &health)
	require.Contains(t, health, "the target directory is not a directory any more: something replaced it while the example ran")
	require.NotContains(t, health, "--dir", "an error while running gives no start-up advice")
	require.NotContains(t, health, filepath.Dir(r.dir))
	_, body = r.do(http.MethodGet, "/files/x", "")
	require.NotContains(t, body, filepath.Dir(r.dir))
	assert.Contains(t, body, "the target directory is not a directory")
}

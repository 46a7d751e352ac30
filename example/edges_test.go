package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// The example's rough edges (issue 32, item 5).

// Every flag is checked before anything starts: the directory, the
// initial files and the intervals are refused before the address is
// bound or anything served, so the error is theirs even with the port in
// use, and nothing is written.
func TestEveryFlagIsCheckedBeforeAnythingStarts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	busy := ln.Addr().String()
	parent := t.TempDir()
	file := filepath.Join(parent, "a-file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	full := filepath.Join(parent, "full")
	require.NoError(t, os.Mkdir(full, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(full, "mine"), nil, 0o644))
	missing := filepath.Join(parent, "missing")
	bad := filepath.Join(parent, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("files: {}\n"), 0o644))

	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--dir", file}, "example: target directory " + file + " is not a directory; choose another --dir\n"},
		{[]string{"--dir", full}, "example: target directory " + full + " is not empty"},
		{[]string{"--dir", "/"}, "example: --dir / is the root directory; choose a directory below it\n"},
		{[]string{"--dir", missing, "--files", bad}, "example: --files: " + bad + ": line 1: files must be a list\n"},
		{[]string{"--dir", missing, "--prune", "1ns"}, "example: --prune must be 0 (never prune) or at least 10ms, got 1ns\n"},
		{[]string{"--dir", missing, "--addr", "127.0.0.1:http-alt-nope"}, "example: --addr 127.0.0.1:http-alt-nope: "},
	} {
		args := append([]string{"--addr", busy}, c.args...)
		code, stderr := runExample(t, args...)
		require.Equal(t, exitUsage, code, "%v: %s", c.args, stderr)
		requireOnce(t, stderr, c.msg)
		require.NotContains(t, stderr, "Serving HTTP", c.args)
		require.NotContains(t, stderr, "address already in use", c.args)
	}
	requireAbsent(t, missing)
	require.Equal(t, []string{"mine"}, dirNames(t, full))

	// With the flags right, the busy port is what is refused, and still
	// nothing is written.
	code, stderr := runExample(t, "--dir", missing, "--addr", busy)
	require.Equal(t, exitUsage, code, stderr)
	requireOnce(t, stderr, "address already in use")
	require.NotContains(t, stderr, "Serving HTTP")
	requireAbsent(t, missing)
}

// --help's usage line names the program as it was run ("example" under
// go run), not "go run ./example".
func TestUsageNamesTheProgram(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.Equal(t, exitOK, run(context.Background(), []string{"--help"}, &stdout, &stderr))
	require.True(t, strings.HasPrefix(stdout.String(), "Usage: "+filepath.Base(os.Args[0])+" [flags]\n"), stdout.String())
	require.NotContains(t, stdout.String(), "go run")
	stdout.Reset()
	require.Equal(t, exitUsage, run(context.Background(), []string{"--nope"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "Usage: "+filepath.Base(os.Args[0])+" [flags]\n")
}

// A file written for the first time once its template is defined is not
// a restore, and not drift; a file the example wrote that goes missing is
// both.
func TestFirstWriteIsNotDrift(t *testing.T) {
	r := startRun(t, "--refresh", "20ms", "--prune", "1h")
	r.waitDone()
	code, body := r.do(http.MethodPut, "/files/note?template=later", "a note")
	require.Equal(t, http.StatusCreated, code, body)
	require.Eventually(t, func() bool {
		_, body := r.do(http.MethodGet, "/files/note", "")
		return strings.Contains(body, `template is not defined: \"later\"`)
	}, waitFor, 5*time.Millisecond)
	code, body = r.do(http.MethodPut, "/templates/later", "later: {{content}}")
	require.Equal(t, http.StatusCreated, code, body)
	r.waitContent("note", "later: a note")
	r.waitDone()
	require.Zero(t, r.count("INFO", "Restoring a missing file", "note"), r.stderr)

	// Removed, it is restored: the one drift repaired. A row written after
	// that counts every repair so far: had the first write counted, 2.
	require.NoError(t, os.Remove(filepath.Join(r.dir, "note")))
	r.waitContent("note", "later: a note")
	require.Eventually(t, func() bool { return r.reconcilerInfo().DriftRepaired >= 1 }, waitFor, 5*time.Millisecond)
	restored := time.Now()
	var info tables.Info
	require.Eventually(t, func() bool { info = r.reconcilerInfo(); return info.LastRefresh.After(restored) }, waitFor, 5*time.Millisecond)
	require.Equal(t, uint64(1), info.DriftRepaired)
	require.Equal(t, 1, r.count("INFO", "Restoring a missing file", "note"), r.stderr)
}

// reconcilerInfo returns the reconcilers table's row, from the API: a zero
// Info until the reconciler wrote it.
func (r *runningExample) reconcilerInfo() tables.Info {
	r.t.Helper()
	code, body := r.do(http.MethodGet, "/reconcilers", "")
	require.Equal(r.t, http.StatusOK, code, body)
	var infos []tables.Info
	require.NoError(r.t, json.Unmarshal([]byte(body), &infos))
	require.LessOrEqual(r.t, len(infos), 1)
	if len(infos) == 0 {
		return tables.Info{}
	}
	return infos[0]
}

// An unknown key of --files is given by its line and column, not its text
// (it may be a secret), with the keys the entry takes, in the words of the
// file, not of a Go type.
func TestUnknownKeyGivesLineAndColumn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "files.yaml")
	require.NoError(t, os.WriteFile(path, []byte("files:\n  - name: a\n    content: x\n  - name: b\n    contents: y\ntemplates: []\n"), 0o644))
	code, stderr := runExample(t, "--dir", filepath.Join(t.TempDir(), "d"), "--addr", "127.0.0.1:0", "--files", path)
	require.Equal(t, exitUsage, code, stderr)
	require.Equal(t, "example: --files: "+path+": line 5, column 5: unknown key in files[1] (its text is not shown); it takes name, content, mode, template\n", stderr)

	require.NoError(t, os.WriteFile(path, []byte("files:\n  - name: a\n    name: b\n"), 0o644))
	code, stderr = runExample(t, "--dir", filepath.Join(t.TempDir(), "d"), "--addr", "127.0.0.1:0", "--files", path)
	require.Equal(t, exitUsage, code, stderr)
	require.Equal(t, "example: --files: "+path+": line 3: key \"name\" appears twice in files[0]\n", stderr)
}

// Every error of the API is a JSON object {"error": "..."}; a method a
// route does not take gets 405 with an Allow header.
func TestErrorsAreJSON(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	for _, c := range []struct {
		method, path string
		code         int
		allow, msg   string
	}{
		{"DELETE", "/files", 405, "GET, HEAD", "DELETE is not allowed on /files: it takes GET, HEAD"},
		{"POST", "/files/x", 405, "GET, HEAD, PUT, DELETE", "POST is not allowed on /files/x: it takes GET, HEAD, PUT, DELETE"},
		{"PATCH", "/templates/banner", 405, "GET, HEAD, PUT, DELETE", "PATCH is not allowed"},
		{"PUT", "/templates", 405, "GET, HEAD", "PUT is not allowed"},
		{"GET", "/pause", 405, "POST", "GET is not allowed on /pause: it takes POST"},
		{"DELETE", "/resume", 405, "POST", "it takes POST"},
		{"POST", "/health", 405, "GET, HEAD", "it takes GET, HEAD"},
		{"PUT", "/metrics", 405, "GET, HEAD", "it takes GET, HEAD"},
		{"POST", "/debug/vars", 405, "GET, HEAD", "it takes GET, HEAD"},
		{"POST", "/statedb/dump", 405, "GET, HEAD", "it takes GET, HEAD"},
		{"POST", "/reconcilers", 405, "GET, HEAD", "it takes GET, HEAD"},
		{"POST", "/", 405, "GET, HEAD", "it takes GET, HEAD"},
		{"GET", "/nope", 404, "", `no such path "/nope"`},
		{"GET", "/statedb/nope", 404, "", `no such path "/statedb/nope"`},
		{"GET", "/files/nope", 404, "", `no desired file "nope"`},
		{"GET", "/files/..", 400, "", "invalid file name"},
		{"GET", "/files?x=1", 400, "", `unknown query parameter "x"`},
	} {
		code, body := a.send(c.method, c.path, "", nil)
		require.Equal(t, c.code, code, "%s %s: %s", c.method, c.path, body)
		require.Contains(t, errorMessage(t, body), c.msg, "%s %s", c.method, c.path)
		req, err := http.NewRequest(c.method, a.base+c.path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+a.token)
		resp, err := a.client.Do(req)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, c.allow, resp.Header.Get("Allow"), "%s %s", c.method, c.path)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"), "%s %s", c.method, c.path)
	}
	code, body := a.send(http.MethodGet, "/files", "evil.example.com", nil)
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, errorMessage(t, body), "is not this API's address")
}

// A template is parsed when it is stored: a placeholder other than
// {{name}} and {{content}}, or one not closed, is refused with 400 saying
// where, and nothing changes; in --files too.
func TestTemplateIsParsedWhenPut(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	hello := a.readFile("hello.txt")
	for text, msg := range map[string]string{
		"# {{nmae}}\n{{content}}":         `invalid template: line 1, column 3: unknown placeholder "{{nmae}}"; a template may use {{name}} and {{content}}`,
		"{{name}}\nok {{content":          `invalid template: line 2, column 4: "{{" is not closed by "}}"`,
		"{{name}} {{content}} {{ name }}": `invalid template: line 1, column 22: unknown placeholder "{{ name }}"`,
		"{{name\n}}":                      `invalid template: line 1, column 1: "{{" is not closed`,
	} {
		code, body := a.do(http.MethodPut, "/templates/banner", strings.NewReader(text))
		require.Equal(t, http.StatusBadRequest, code, "%q: %s", text, body)
		got := errorMessage(t, body)
		require.True(t, strings.HasPrefix(got, `template "banner": `+msg), "%q: %s", text, got)
	}
	code, body := a.do(http.MethodGet, "/templates/banner", nil)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "written by the converge example")
	a.waitReconciled()
	require.Equal(t, hello, a.readFile("hello.txt"))

	changed := time.Now()
	code, body = a.do(http.MethodPut, "/templates/banner", strings.NewReader("{{name}}: {{content}}"))
	require.Equal(t, http.StatusOK, code, body)
	a.waitFile("hello.txt", "rewritten", func(f *File, found bool) bool {
		return found && f.Status.Kind == status.KindDone && f.Status.UpdatedAt.After(changed)
	})
	require.True(t, strings.HasPrefix(a.readFile("hello.txt"), "hello.txt: "))

	_, err := parseFiles("f.yaml", []byte("templates:\n  - name: t\n    text: \"{{oops}}\"\n"))
	require.EqualError(t, err, `f.yaml: line 2: templates[0] ("t"): invalid template: line 1, column 1: unknown placeholder "{{oops}}"; a template may use {{name}} and {{content}}`)
}

// An --addr that is not a loopback address gets a warning: the token
// keeps strangers out, but plain HTTP shows it to the network. The tests
// bind only loopback addresses, so the example is given one of TEST-NET-1,
// which no machine has: the warning comes, then the bind fails.
func TestNonLoopbackAddressWarns(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	code, stderr := runExample(t, "--dir", dir, "--addr", "192.0.2.1:0")
	require.Equal(t, exitUsage, code, stderr)
	requireOnce(t, stderr, `level=WARN msg="--addr is not a loopback address: other machines may reach the API. `+
		`It asks for the token, but over plain HTTP the token and the files can be read on the network" module=files address=192.0.2.1:0`)
	requireOnce(t, stderr, "example: --addr 192.0.2.1:0: cannot listen: ")
	requireAbsent(t, dir)

	for _, addr := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0"} {
		ctx, cancel := context.WithCancel(context.Background())
		var out syncBuffer
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{"--dir", filepath.Join(t.TempDir(), "d"), "--addr", addr}, io.Discard, &out)
		}()
		require.Eventually(t, func() bool { return strings.Contains(out.String(), "converge example: reconciling") || len(done) > 0 }, waitFor, 5*time.Millisecond)
		cancel()
		var code int
		select {
		case code = <-done:
		case <-time.After(waitFor):
			t.Fatalf("%s: the example did not stop", addr)
		}
		if addr == "[::1]:0" && code == exitUsage && strings.Contains(out.String(), "cannot listen") {
			continue // no IPv6 loopback here
		}
		require.Equal(t, exitOK, code, out.String())
		require.NotContains(t, out.String(), "not a loopback address", addr)
	}
}

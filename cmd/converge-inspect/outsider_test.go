package main

// An outside reviewer's attempts to break converge-inspect using only what
// docs/observability.md, the package documentation and --help promise.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// endless writes chunk to w, flushing, until the client goes away.
func endless(w http.ResponseWriter, r *http.Request, chunk []byte) {
	for {
		if _, err := w.Write(chunk); err != nil {
			return
		}
		if r.Context().Err() != nil {
			return
		}
	}
}

// hostile serves h at every path and returns the base URL to give --url.
func hostile(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(func() {
		s.CloseClientConnections()
		s.Close()
	})
	return s.URL + "/statedb"
}

// runBounded runs the command and fails the test if it does not return
// within 3*waitFor (runInspect's context bounds it too, but a command that
// ignores its context would hang the test without this).
func runBounded(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	return runWithin(t, 3*waitFor, env, args...)
}

// runWithin is runBounded with a bound of d, for the runs that read large
// answers and take long on a busy machine with the race detector.
func runWithin(t *testing.T, d time.Duration, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), d+waitFor)
		defer cancel()
		var stdout, stderr bytes.Buffer
		code := run(ctx, args, func(k string) string { return env[k] }, &stdout, &stderr)
		done <- result{code, stdout.String(), stderr.String()}
	}()
	select {
	case r := <-done:
		return r.code, r.stdout, r.stderr
	case <-time.After(d):
		t.Fatalf("converge-inspect %q did not return within %s", args, d)
		return 0, "", ""
	}
}

// Answers that never end must be cut at the documented bounds (64 MiB a
// query, 1 MiB a row, 100,000 rows a table), with exit status 2.
func TestOutsiderEndlessAnswers(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(bytes.Repeat([]byte("\n"), 1<<20))
	zw.Close()
	cases := map[string]http.HandlerFunc{
		"valid rows": func(w http.ResponseWriter, r *http.Request) {
			var b bytes.Buffer
			row := 0
			for {
				b.Reset()
				for range 100 {
					row++
					fmt.Fprintf(&b, `{"rev":%d,"obj":{"id":"r%d","module":"r%d","state":"running"}}`+"\n", row, row, row)
				}
				if _, err := w.Write(b.Bytes()); err != nil || r.Context().Err() != nil {
					return
				}
			}
		},
		"blank lines": func(w http.ResponseWriter, r *http.Request) {
			endless(w, r, bytes.Repeat([]byte("\n"), 64<<10))
		},
		"keep-alives": func(w http.ResponseWriter, r *http.Request) {
			endless(w, r, bytes.Repeat([]byte(`{"rev":0,"obj":null}`+"\n"), 2000))
		},
		"gzip bomb": func(w http.ResponseWriter, r *http.Request) {
			if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
				endless(w, r, bytes.Repeat([]byte("\n"), 64<<10))
				return
			}
			w.Header().Set("Content-Encoding", "gzip")
			endless(w, r, gz.Bytes()) // gzip members concatenated: one endless stream
		},
		"500 with an endless body": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			endless(w, r, bytes.Repeat([]byte("x"), 64<<10))
		},
		"401 with an endless body": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusUnauthorized)
			endless(w, r, bytes.Repeat([]byte("x"), 64<<10))
		},
		"404 with an endless JSON error": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"rev":0,"obj":null,"err":"`))
			endless(w, r, bytes.Repeat([]byte("x"), 64<<10))
		},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			url := hostile(t, h)
			for _, watch := range []bool{false, true} {
				args := []string{"--url", url}
				if watch {
					args = append(args, "--watch")
				}
				code, stdout, stderr := runBounded(t, nil, args...)
				t.Logf("watch=%v: exit %d, stderr %q", watch, code, stderr)
				require.Equal(t, exitError, code, stderr)
				require.Empty(t, stdout)
				require.Regexp(t, `^converge-inspect: .+\n$`, stderr)
				require.Less(t, len(stderr), 4096, "the error message is bounded too")
			}
		})
	}
}

// --timeout bounds reading the tables: an agent that sends its answer a
// few bytes at a time, forever, or sends headers and then nothing, is given
// up after --timeout, with a message saying it did not answer in time (the
// documented "a message saying what to check when the agent ... does not
// answer in time"), not one that blames the form of its answer.
func TestOutsiderSlowAnswers(t *testing.T) {
	cases := map[string]http.HandlerFunc{
		"a row every 20ms": func(w http.ResponseWriter, r *http.Request) {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				fmt.Fprintf(w, `{"rev":%d,"obj":{"id":"r%d","module":"r%d","state":"running"}}`+"\n", i+1, i, i)
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-tick.C:
				}
			}
		},
		"a byte every 20ms": func(w http.ResponseWriter, r *http.Request) {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			w.Write([]byte(`{"rev":1,"obj":{"id":"`))
			for {
				w.Write([]byte("x"))
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-tick.C:
				}
			}
		},
		"headers then nothing": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			url := hostile(t, h)
			start := time.Now()
			code, stdout, stderr := runBounded(t, nil, "--url", url, "--timeout", "300ms")
			t.Logf("exit %d after %s, stderr %q", code, time.Since(start), stderr)
			require.Equal(t, exitError, code, stderr)
			require.Empty(t, stdout)
			require.Regexp(t, `^converge-inspect: cannot reach the agent at .*: no complete answer in time \(--timeout\)\n$`, stderr)
		})
	}
}

// Redirects are not followed: the token never reaches the other server.
func TestOutsiderRedirect(t *testing.T) {
	var hits atomic.Int32
	var sawToken atomic.Bool
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if strings.Contains(r.Header.Get("Authorization"), testToken) {
			sawToken.Store(true)
		}
	}))
	defer other.Close()
	for _, status := range []int{http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect, http.StatusMovedPermanently} {
		url := hostile(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+r.URL.Path, status)
		})
		for _, watch := range []bool{false, true} {
			args := []string{"--url", url}
			if watch {
				args = append(args, "--watch")
			}
			code, stdout, stderr := runBounded(t, map[string]string{tokenEnv: testToken}, args...)
			t.Logf("%d watch=%v: exit %d, stderr %q", status, watch, code, stderr)
			require.Equal(t, exitError, code, stderr)
			require.Empty(t, stdout)
			require.Regexp(t, `^converge-inspect: .+\n$`, stderr)
			require.NotContains(t, stderr, testToken)
		}
	}
	require.Zero(t, hits.Load(), "a redirect was followed")
	require.False(t, sawToken.Load())
}

// rawAgent answers every connection with resp, verbatim, then closes it.
func rawAgent(t *testing.T, resp string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(waitFor))
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				req.Body.Close()
				c.Write([]byte(resp))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return "http://" + ln.Addr().String() + "/statedb"
}

// Text from the agent cannot drive the terminal, in error messages too:
// the status line's reason phrase is the agent's.
func TestOutsiderInjectionInStatusLine(t *testing.T) {
	for _, code := range []string{"500", "401", "404", "400", "418", "302"} {
		t.Run(code, func(t *testing.T) {
			url := rawAgent(t, "HTTP/1.1 "+code+" \x1b]0;owned\x07\x1b[2J\x9b2J\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			exit, stdout, stderr := runBounded(t, nil, "--url", url)
			t.Logf("exit %d, stderr %q", exit, stderr)
			require.Equal(t, exitError, exit)
			require.Empty(t, stdout)
			require.NotContains(t, stderr, "\x1b")
			require.NotContains(t, stderr, "\x07")
			require.NotContains(t, stderr, "\x9b")
		})
	}
}

// rowsAgent serves these rows of the reconcilers table and of the
// reconciler-retries table, as StateDB's handler does.
func rowsAgent(t *testing.T, reconcilers, retries []string) string {
	t.Helper()
	return hostile(t, func(w http.ResponseWriter, r *http.Request) {
		var rows []string
		switch r.URL.Path {
		case "/statedb/query":
			var body bytes.Buffer
			body.ReadFrom(r.Body)
			if strings.Contains(body.String(), `"reconciler-retries"`) {
				rows = retries
			} else {
				rows = reconcilers
			}
		case "/statedb/changes/reconcilers":
			rows = reconcilers
		case "/statedb/changes/reconciler-retries":
			rows = retries
		default:
			w.WriteHeader(http.StatusNotFound)
			return
		}
		for i, row := range rows {
			fmt.Fprintf(w, `{"rev":%d,"obj":%s}`+"\n", i+1, row)
		}
		if strings.Contains(r.URL.Path, "/changes/") {
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}
	})
}

// Text from the agent shown with control characters replaced: C1 controls
// (U+009B is CSI) and DEL too, in every place the agent's text reaches,
// the error for a --reconciler that matches nothing included.
func TestOutsiderInjectionInRows(t *testing.T) {
	const evil = `e\u001b]0;t\u0007\u009b2J\u007fvil`
	url := rowsAgent(t,
		[]string{`{"id":"` + evil + `","module":"` + evil + `","state":"degraded","last-prune":"2026-01-02T15:04:05Z","last-prune-error":"` + evil + `"}`},
		[]string{`{"reconciler":"` + evil + `","key":"` + evil + `","attempts":1,"first-failed":"2026-01-02T15:04:05Z","next-attempt":"2026-01-02T15:04:05Z","last-error":"` + evil + `"}`})
	check := func(what, out string) {
		t.Helper()
		for _, c := range []string{"\x1b", "\x07", "\u009b", "\x7f"} {
			require.NotContains(t, out, c, "%s: %q", what, out)
		}
	}
	code, stdout, stderr := runBounded(t, nil, "--url", url)
	t.Logf("exit %d stdout:\n%s", code, stdout)
	require.Equal(t, exitDegraded, code, stderr)
	check("stdout", stdout)
	check("stderr", stderr)

	code, stdout, stderr = runBounded(t, nil, "--url", url, "--reconciler", "nope")
	t.Logf("exit %d stderr %q", code, stderr)
	require.Equal(t, exitError, code)
	require.Empty(t, stdout)
	check("no such reconciler", stderr)

	w := startWatch(t, "--url", url)
	w.waitLine(`FAILING OBJECT`)
	line, _ := w.waitLine(`.`)
	check("--watch", line)
	w.stop()
}

// A time the agent encodes badly is an error that shows the agent's text
// without control characters.
func TestOutsiderInjectionInDecodeError(t *testing.T) {
	url := rowsAgent(t, []string{`{"id":"r","module":"r","state":"running","last-prune":"\u001b[2J\u009b2J"}`}, nil)
	code, stdout, stderr := runBounded(t, nil, "--url", url)
	t.Logf("exit %d stderr %q", code, stderr)
	require.Equal(t, exitError, code)
	require.Empty(t, stdout)
	require.NotContains(t, stderr, "\x1b")
	require.NotContains(t, stderr, "\u009b")
}

// Token files: symlinks and FIFOs must neither hang nor let a file others
// can read through; line endings a user's editor adds are a token's end.
func TestOutsiderTokenFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(content), mode))
		require.NoError(t, os.Chmod(path, mode))
		return path
	}
	link := func(name, target string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.Symlink(target, path))
		return path
	}
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))

	refused := map[string]string{
		"symlink to a world-readable file": link("l-open", write("open", testToken, 0o644)),
		"symlink to a FIFO":                link("l-fifo", fifo),
		"symlink to /dev/zero":             link("l-zero", "/dev/zero"),
		"symlink to a directory":           link("l-dir", dir),
		"a dangling symlink":               link("l-none", filepath.Join(dir, "none")),
		"/dev/stdin":                       "/dev/stdin",
		"world-writable only":              write("ww", testToken, 0o602),
		"executable by others":             write("wx", testToken, 0o601),
		"NUL in token":                     write("nul", testToken+"\x00x", 0o600),
	}
	for name, path := range refused {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runBounded(t, nil, "--token-file", path, "--url", "http://127.0.0.1:1/statedb")
			t.Logf("exit %d stderr %q", code, stderr)
			requireFails(t, `unusable token: .*`, code, stdout, stderr)
		})
	}

	a := startAgent(t, true, "routes")
	accepted := map[string]string{
		"CRLF":                          write("crlf", testToken+"\r\n", 0o600),
		"no newline":                    write("bare", testToken, 0o600),
		"trailing spaces":               write("sp", testToken+"  \n", 0o600),
		"symlink to an owner-only file": link("l-good", write("good", testToken+"\n", 0o600)),
	}
	for name, path := range accepted {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runBounded(t, nil, "--token-file", path, "--url", a.url)
			t.Logf("exit %d stdout %q stderr %q", code, stdout, stderr)
			require.Equal(t, exitHealthy, code, stderr)
			require.NotContains(t, stdout+stderr, testToken)
		})
	}
}

// "The token is never printed": not even when the agent (or a proxy in
// front of it) echoes the Authorization header back in its error.
func TestOutsiderTokenEchoedBack(t *testing.T) {
	for _, status := range []int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusInternalServerError, http.StatusNotFound} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			url := hostile(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(status)
				fmt.Fprintf(w, `{"rev":0,"obj":null,"err":"refused %s"}`+"\n", r.Header.Get("Authorization"))
			})
			for _, watch := range []bool{false, true} {
				args := []string{"--url", url}
				if watch {
					args = append(args, "--watch")
				}
				code, stdout, stderr := runBounded(t, map[string]string{tokenEnv: testToken}, args...)
				t.Logf("exit %d stderr %q", code, stderr)
				require.Equal(t, exitError, code)
				require.NotContains(t, stdout+stderr, testToken)
			}
		})
	}
	t.Run("in a row", func(t *testing.T) {
		url := hostile(t, func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `{"rev":1,"obj":{"id":"r","module":"r","state":"exploded %s"}}`+"\n", r.Header.Get("Authorization"))
		})
		code, stdout, stderr := runBounded(t, map[string]string{tokenEnv: testToken}, "--url", url)
		t.Logf("exit %d stderr %q", code, stderr)
		require.Equal(t, exitError, code)
		require.NotContains(t, stdout+stderr, testToken)
	})
}

// The token goes over plain HTTP to loopback addresses only: a host
// name that merely starts like one is not.
func TestOutsiderLoopbackLookalikes(t *testing.T) {
	for _, url := range []string{
		"http://localhost.example:8080/statedb",
		"http://127.0.0.1.nip.io:8080/statedb",
		"http://localhost@agent.example:8080/statedb",
		"http://0.0.0.0:8080/statedb",
		"http://127.0.0.1%2eagent.example:8080/statedb",
	} {
		t.Run(url, func(t *testing.T) {
			code, stdout, stderr := runBounded(t, map[string]string{tokenEnv: testToken}, "--url", url, "--timeout", "2s")
			t.Logf("exit %d stderr %q", code, stderr)
			require.Equal(t, exitError, code)
			require.Empty(t, stdout)
			require.Regexp(t, `refusing to send the token|give a URL without user|--url`, stderr)
			require.NotContains(t, stderr, "cannot reach", "it tried to connect, token in hand")
		})
	}
}

// An answer cut short (the agent died mid-answer) is an error, not a
// table with what arrived.
func TestOutsiderTruncatedAnswer(t *testing.T) {
	url := rawAgent(t, "HTTP/1.1 200 OK\r\nContent-Length: 500\r\nConnection: close\r\n\r\n"+
		`{"rev":1,"obj":{"id":"r1","module":"r1","state":"running"}}`+"\n")
	code, stdout, stderr := runBounded(t, nil, "--url", url)
	t.Logf("exit %d stdout %q stderr %q", code, stdout, stderr)
	require.Equal(t, exitError, code)
	require.Empty(t, stdout)
}

// The bounds are where the documentation puts them: a table of exactly
// 100,000 rows is read, and a row of exactly 1 MiB.
func TestOutsiderBoundsAreInclusive(t *testing.T) {
	t.Run("100000 rows", func(t *testing.T) {
		var b bytes.Buffer
		for i := range 100_000 {
			fmt.Fprintf(&b, `{"rev":%d,"obj":{"id":"r%06d","module":"r%06d","state":"running"}}`+"\n", i+1, i, i)
		}
		body := b.Bytes()
		url := hostile(t, func(w http.ResponseWriter, r *http.Request) {
			var req bytes.Buffer
			req.ReadFrom(r.Body)
			if strings.Contains(req.String(), `"reconciler-retries"`) {
				return
			}
			w.Write(body)
		})
		// 14 s alone with -race; the bounds are generous for a busy machine.
		code, stdout, stderr := runWithin(t, 6*time.Minute, nil, "--url", url, "--json", "--timeout", "5m")
		require.Equal(t, exitHealthy, code, stderr)
		require.Equal(t, 100_000, strings.Count(stdout, `"state": "running"`)+strings.Count(stdout, `"state":"running"`))
	})
	t.Run("a row of 1 MiB", func(t *testing.T) {
		prefix := `{"rev":1,"obj":{"id":"r","module":"r","state":"degraded","last-prune":"2026-01-02T15:04:05Z","last-prune-error":"`
		suffix := `"}}`
		line := prefix + strings.Repeat("x", maxLine-len(prefix)-len(suffix)) + suffix
		require.Len(t, line, 1<<20)
		url := hostile(t, func(w http.ResponseWriter, r *http.Request) {
			var req bytes.Buffer
			req.ReadFrom(r.Body)
			if strings.Contains(req.String(), `"reconciler-retries"`) {
				return
			}
			fmt.Fprintln(w, line)
		})
		code, stdout, stderr := runBounded(t, nil, "--url", url)
		require.Equal(t, exitDegraded, code, stderr)
		require.Contains(t, stdout, "xxxx")
	})
}

// --reconciler NAME: "only this reconciler (its ID, module/name, or its
// name)". A NAME that is exactly one reconciler's ID names that one; a
// readiness check for reconciler "routes" must not fail because another
// module's reconciler, also named routes, is degraded.
func TestOutsiderAmbiguousFilter(t *testing.T) {
	url := rowsAgent(t, []string{
		`{"id":"routes","module":"routes","state":"running"}`,
		`{"id":"net/routes","module":"net","name":"routes","state":"degraded"}`,
	}, nil)
	code, stdout, stderr := runBounded(t, nil, "--url", url, "--reconciler", "routes")
	t.Logf("exit %d\n%s%s", code, stdout, stderr)
	require.Equal(t, exitHealthy, code, "only reconciler routes is asked for, and it is running")
	require.NotContains(t, stdout, "net/routes")
}

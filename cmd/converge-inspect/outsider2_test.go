//go:build unix

package main

// The second probe of converge-inspect as a local attacker (issue 47):
// each test pins one of its findings.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/tables"
)

// The token file is opened, without waiting for a writer, before it is
// checked: a named pipe swapped in for it between a check and the open
// no longer blocks the command (it did, and neither Ctrl-C nor SIGTERM
// stopped it). Another user who can rename in the token's directory swaps
// a regular file and a named pipe at its name as fast as it can; every
// run returns, with the token or refusing the pipe.
func TestATokenFileSwappedForANamedPipeDoesNotHang(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(path, []byte(testToken+"\n"), 0o600))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			tmp := filepath.Join(dir, "next")
			if i%2 == 0 {
				os.WriteFile(tmp, []byte(testToken+"\n"), 0o600)
			} else {
				syscall.Mkfifo(tmp, 0o600)
			}
			os.Rename(tmp, path)
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
		// A run stuck opening the pipe would be waiting for a writer:
		// open one to let it go before the leak check.
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	}()
	pipes, tokens := 0, 0
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; i < 2000 && time.Now().Before(deadline); i++ {
		code, stdout, stderr := runWithin(t, 5*time.Second, nil, "--token-file", path, "--url", "http://127.0.0.1:1/statedb", "--timeout", "1s")
		require.Equal(t, exitError, code)
		require.Empty(t, stdout)
		switch {
		case strings.Contains(stderr, "is not a regular file"):
			pipes++
		case strings.Contains(stderr, "cannot reach the agent"):
			tokens++ // read the token, then found no agent
		default:
			t.Fatalf("unexpected error: %s", stderr)
		}
	}
	t.Logf("%d runs read the token, %d refused the pipe", tokens, pipes)
	require.Positive(t, pipes)
	require.Positive(t, tokens)
}

// --json escapes what the text view refuses: the agent's C1 controls
// (U+009B is CSI), DEL and bidi overrides (U+202E reverses the text
// after it) come out as \uXXXX, and decode to the agent's text as it is.
func TestJSONEscapesControlAndBidiCharacters(t *testing.T) {
	const evil = "e\u009b2J\u202evil\u007f\u2066x\u0085"
	decoded := "e\u009b2J\u202evil\u007f\u2066x\u0085"
	url := rowsAgent(t,
		[]string{`{"id":"r","module":"` + evil + `","state":"degraded","last-prune":"2026-01-02T15:04:05Z","last-prune-error":"` + evil + `"}`},
		[]string{`{"reconciler":"r","key":"` + evil + `","attempts":1,"first-failed":"2026-01-02T15:04:05Z","next-attempt":"2026-01-02T15:04:05Z","last-error":"` + evil + `"}`})
	check := func(what, out string) {
		t.Helper()
		for _, c := range []string{"\u009b", "\u202e", "\u007f", "\u2066", "\u0085"} {
			require.NotContains(t, out, c, "%s: %q", what, out)
		}
		var rep struct {
			Reconcilers []*tables.Info      `json:"reconcilers"`
			Retries     []*tables.RetryInfo `json:"retries"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
		require.Len(t, rep.Reconcilers, 1)
		require.Len(t, rep.Retries, 1)
		require.Equal(t, decoded, rep.Reconcilers[0].Module)
		require.Equal(t, decoded, rep.Reconcilers[0].LastPruneError)
		require.Equal(t, decoded, rep.Retries[0].Key)
		require.Equal(t, decoded, rep.Retries[0].LastError)
	}
	code, stdout, stderr := runBounded(t, nil, "--url", url, "--json")
	require.Equal(t, exitDegraded, code, stderr)
	require.Contains(t, stdout, `e\u009b2J\u202evil\u007f\u2066x\u0085`)
	check("--json", stdout)

	w := startWatch(t, "--url", url, "--json")
	line, _ := w.waitLine(`^\{`)
	check("--watch --json", line)
	w.stop()
}

// --watch keeps at most maxKept bytes of rows in all: an agent that
// streams rows of nearly 1 MiB, each under a new ID, fails it once the
// rows kept pass the bound (it took converge-inspect to 837 MB in 30 s).
// The bound is lowered to 8 MiB here: decoding 64 MiB takes 15 s under
// the race detector.
func TestWatchKeepsABoundedAmountOfRows(t *testing.T) {
	require.Equal(t, 64<<20, maxKept, "the bound the documentation gives")
	defer func(n int) { maxKept = n }(maxKept)
	maxKept = 8 << 20
	filler := strings.Repeat("x", maxLine-200)
	sent := make(chan int, 1)
	url := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/statedb/query", "/statedb/changes/reconciler-retries":
			if r.URL.Path != "/statedb/query" {
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			}
			return
		case "/statedb/changes/reconcilers":
		default:
			w.WriteHeader(http.StatusNotFound)
			return
		}
		n := 0
		defer func() { sent <- n }()
		for ; r.Context().Err() == nil; n++ {
			if _, err := fmt.Fprintf(w, `{"rev":%d,"obj":{"id":"r%d","module":"m","state":"running","last-prune-error":"%s"}}`+"\n", n+1, n, filler); err != nil {
				return
			}
		}
	})
	code, stdout, stderr := runWithin(t, 2*time.Minute, nil, "--url", url, "--watch")
	require.Equal(t, exitError, code, "%.300s", stdout)
	require.Contains(t, stderr, fmt.Sprintf("answer too large: the rows of tables reconcilers and reconciler-retries pass %d bytes in all", maxKept))
	select {
	case n := <-sent:
		t.Logf("the agent sent %d rows before the command gave up", n)
		require.Less(t, n, 2*maxKept/maxLine+100, "the command read on")
	case <-time.After(waitFor):
		t.Fatal("the agent's stream did not end with the command")
	}
}

// A --url with localhost sends the token to 127.0.0.1 only, never to
// whoever listens on [::1] at the port: another local user can, while the
// agent holds 127.0.0.1 (converge-inspect resolved localhost as the
// system does, ::1 first with the usual hosts file).
func TestLocalhostIsTheIPv4LoopbackAddress(t *testing.T) {
	require.Equal(t, "127.0.0.1:8080", pinLocalhost("localhost:8080"))
	require.Equal(t, "127.0.0.1:8080", pinLocalhost("LocalHost:8080"))
	require.Equal(t, "[::1]:8080", pinLocalhost("[::1]:8080"))
	require.Equal(t, "localhost.example:8080", pinLocalhost("localhost.example:8080"))

	a := startAgent(t, true, "routes")
	_, port, err := net.SplitHostPort(strings.TrimPrefix(a.server.URL, "http://"))
	require.NoError(t, err)
	thief, err := net.Listen("tcp", net.JoinHostPort("::1", port))
	if err != nil {
		t.Skipf("cannot listen on [::1]:%s (%v): no thief there either", port, err)
	}
	defer thief.Close()
	code, stdout, stderr := runBounded(t, nil, "--url", "http://localhost:"+port+"/statedb", "--token-file", a.tokenFile())
	require.Equal(t, exitHealthy, code, stderr)
	require.Contains(t, stdout, "routes")
	// A connection made to the thief would be waiting to be accepted.
	require.NoError(t, thief.(*net.TCPListener).SetDeadline(time.Now().Add(50*time.Millisecond)))
	conn, err := thief.Accept()
	if conn != nil {
		conn.Close()
	}
	require.True(t, errors.Is(err, os.ErrDeadlineExceeded), "converge-inspect connected to [::1]:%s: %v", port, err)
}

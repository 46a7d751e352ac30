package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// --reconciler NAME shows one reconciler or fails: the one whose ID is
// NAME, else the only one named NAME; several named NAME, none with that
// ID, is an error listing them, with --watch too.
func TestFilterPicksOne(t *testing.T) {
	url := rowsAgent(t, []string{
		`{"id":"net/routes","module":"net","name":"routes","state":"degraded"}`,
		`{"id":"vpn/routes","module":"vpn","name":"routes","state":"running"}`,
		`{"id":"vpn/addrs","module":"vpn","name":"addrs","state":"running"}`,
		`{"id":"addrs","module":"addrs","state":"degraded"}`,
		`{"id":"vpn/tunnels","module":"vpn","name":"tunnels","state":"degraded","retrying":1}`,
	}, []string{
		`{"reconciler":"net/routes","key":"a","attempts":1,"first-failed":"2026-01-02T15:04:05Z","next-attempt":"2026-01-02T15:04:05Z","last-error":"e"}`,
		`{"reconciler":"vpn/routes","key":"b","attempts":1,"first-failed":"2026-01-02T15:04:05Z","next-attempt":"2026-01-02T15:04:05Z","last-error":"e"}`,
		`{"reconciler":"vpn/tunnels","key":"c","attempts":1,"first-failed":"2026-01-02T15:04:05Z","next-attempt":"2026-01-02T15:04:05Z","last-error":"e"}`,
	})
	const ambiguous = `--reconciler routes: 2 reconcilers have that name and none has it as ID: net/routes, vpn/routes; give the ID of one`
	for _, watch := range []bool{false, true} {
		args := []string{"--url", url, "--reconciler", "routes"}
		if watch {
			args = append(args, "--watch")
		}
		code, stdout, stderr := runBounded(t, nil, args...)
		requireFails(t, ambiguous, code, stdout, stderr)
	}

	// The ID wins over a name: addrs is one's ID and another's name.
	code, stdout, stderr := runBounded(t, nil, "--url", url, "--reconciler", "addrs")
	require.Equal(t, exitDegraded, code, stderr)
	require.Regexp(t, `(?m)^addrs +degraded`, stdout)
	require.NotContains(t, stdout, "vpn/addrs")

	// An ID picks that one, and its failing objects only.
	w := startWatch(t, "--url", url, "--reconciler", "vpn/routes")
	_, before := w.waitLine(`^vpn/routes +b `)
	require.Regexp(t, `(?m)^vpn/routes +running `, strings.Join(before, "\n"))
	require.NotContains(t, strings.Join(before, "\n"), "net/routes")
	require.Equal(t, exitHealthy, w.stop())

	// A name only one has picks that one.
	code, stdout, stderr = runBounded(t, nil, "--url", url, "--reconciler", "tunnels")
	require.Equal(t, exitDegraded, code, stderr)
	require.Regexp(t, `(?m)^vpn/tunnels +degraded`, stdout)
	require.Regexp(t, `(?m)^vpn/tunnels +c `, stdout)
	require.Equal(t, 2, strings.Count(stdout, "vpn/"), stdout)
}

// The reconcilers an error lists are bounded.
func TestListIDs(t *testing.T) {
	require.Equal(t, "none", listIDs(nil))
	require.Equal(t, "a, b?c", listIDs([]string{"b\x1bc", "a"}))
	var ids []string
	for i := range 25 {
		ids = append(ids, fmt.Sprintf("r%02d", i))
	}
	require.Equal(t, "r00, r01, r02, r03, r04, r05, r06, r07, r08, r09, r10, r11, r12, r13, r14, r15, r16, r17, r18, r19 and 5 more", listIDs(ids))
	long := listIDs([]string{strings.Repeat("x", 1000)})
	require.Equal(t, strings.Repeat("x", maxText)+"…", long)
}

// With --watch, a reconciler picked at the start that goes away leaves a
// frame that says so, and the command then exits 2, as it would without
// --watch on that state.
func TestWatchPickedGoesAway(t *testing.T) {
	const obj = `{"id":"r","module":"r","state":"running"}`
	queried := make(chan struct{}, 2)
	release := make(chan struct{})
	defer close(release)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/statedb/query":
			body, _ := io.ReadAll(r.Body)
			if strings.Contains(string(body), `"reconciler-retries"`) {
				return
			}
			fmt.Fprintf(w, `{"rev":1,"obj":%s}`+"\n", obj)
			queried <- struct{}{}
		case "/statedb/changes/reconcilers":
			fmt.Fprintf(w, `{"rev":1,"obj":%s}`+"\n", obj)
			w.(http.Flusher).Flush()
			select { // the deletion, once the command read the table
			case <-queried:
				fmt.Fprintf(w, `{"rev":2,"obj":%s,"deleted":true}`+"\n", obj)
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
			select {
			case <-r.Context().Done():
			case <-release:
			}
		case "/statedb/changes/reconciler-retries":
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}
	}))
	defer s.Close()
	w := startWatch(t, "--url", s.URL+"/statedb", "--reconciler", "r")
	w.waitLine(`^r +running `)
	w.waitLine(`^No reconciler r\.$`)
	require.Equal(t, exitError, w.stop())
	require.Equal(t, "converge-inspect: no reconciler r in the last state shown: it went away\n", w.stderr.String())
}

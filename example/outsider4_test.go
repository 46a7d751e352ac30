//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/cilium/hive/cell"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"io/fs"

	"github.com/converge-go/converge/status"
)

// The second probe as a local attacker (issue 47): each test pins one of
// its findings, as the documented behaviour the finding broke.

// A template check costs time linear in the template's length: a PUT of
// a template of the largest size, all placeholders (131,072 of them), is
// answered at once, and so is one whose mistake is its last placeholder.
// (It took minutes when each placeholder counted the lines before it.)
func TestATemplateOfManyPlaceholdersIsCheckedAtOnce(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	many := strings.Repeat("{{name}}", maxContentLen/len("{{name}}"))
	for _, c := range []struct {
		text string
		code int
	}{
		{many, http.StatusOK},
		{many[:len(many)-len("{{name}}")] + "{{nam}}", http.StatusBadRequest},
	} {
		began := time.Now()
		code, body := a.do(http.MethodPut, "/templates/banner", strings.NewReader(c.text))
		took := time.Since(began)
		require.Equal(t, c.code, code, body)
		// Linear: milliseconds, seconds under -race on a busy machine;
		// quadratic: minutes.
		require.Less(t, took, 10*time.Second, "a PUT of a template of %d placeholders", len(c.text)/8)
		if c.code == http.StatusBadRequest {
			require.Contains(t, body, `line 1, column 1048569: unknown placeholder \"{{nam}}\"`)
		}
	}
}

// editInPlace rewrites the file at path in place with content of the same
// size, and puts its modification time back, as touch -r or rsync
// --inplace -t do: its identity, size and time are as before.
func editInPlace(t *testing.T, path, content string) {
	t.Helper()
	before, err := os.Stat(path)
	require.NoError(t, err)
	require.Len(t, content, int(before.Size()))
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte(content), 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, os.Chtimes(path, before.ModTime(), before.ModTime()))
	after, err := os.Stat(path)
	require.NoError(t, err)
	require.True(t, os.SameFile(before, after) && after.ModTime().Equal(before.ModTime()) && after.Size() == before.Size())
}

// "It removes a file only if the file still holds what the example wrote":
// a file of the example's edited in place to the same size, its
// modification time put back, holds the user's work. Neither a DELETE
// nor the prune removes it.
func TestAFileEditedInPlaceWithItsTimePutBackIsNotRemoved(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.put("notes", "the example's notes")
	a.put("draft", "the example's draft")
	a.waitKind("notes", status.KindDone)
	a.waitKind("draft", status.KindDone)
	notes, draft := filepath.Join(a.dir, "notes"), filepath.Join(a.dir, "draft")
	editInPlace(t, notes, "THE USER'S NOTES!!!")
	editInPlace(t, draft, "THE USER'S DRAFT!!!")

	code, body := a.do(http.MethodDelete, "/files/notes", nil)
	require.Equal(t, http.StatusNoContent, code, body)
	a.waitDeleteReconciled()
	data, err := os.ReadFile(notes)
	require.NoError(t, err, "DELETE removed a file the user edited")
	require.Equal(t, "THE USER'S NOTES!!!", string(data))
	require.NotContains(t, journalNames(t, a.dir), "notes", "the file is forgotten")

	// draft is not in the next run's initial set: its first prune looks
	// at it, and leaves it.
	a.stop()
	cfg := testConfig()
	cfg.Dir = a.dir
	b := startApp(t, cfg, nil)
	info := b.waitPruneAfter(time.Time{})
	require.Empty(t, info.LastPruneError)
	require.Zero(t, info.DriftRepaired, "the prune removed a file")
	data, err = os.ReadFile(draft)
	require.NoError(t, err, "the prune removed a file the user edited")
	require.Equal(t, "THE USER'S DRAFT!!!", string(data))
	require.NotContains(t, journalNames(t, b.dir), "draft", "the file is forgotten")
}

// "It refuses a directory others can change": a directory whose parent
// another user owns, or others can write without the sticky bit, can be
// moved away or replaced by them. It is refused before anything is
// written, as a directory others can write is; a sticky parent others
// can write, such as /tmp, is not. The other user is uid 4242, which the
// test, as root, gives the parent; without root it cannot.
func TestADirectoryWhoseParentOthersCanChangeIsRefused(t *testing.T) {
	const other = 4242
	for name, c := range map[string]struct {
		mode fs.FileMode
		uid  int
		msg  string
	}{
		"another user's parent": {0o755, other, "its parent %s is owned by uid 4242, neither the user running the example (uid 0) nor root: " +
			"that user can move the directory away or put another in its place; choose another --dir"},
		"a parent others can write":        {0o777, -1, "its parent %s can be written by other users (mode -rwxrwxrwx) and is not sticky"},
		"a sticky parent others can write": {0o777 | fs.ModeSticky, -1, ""},
	} {
		t.Run(name, func(t *testing.T) {
			if c.uid >= 0 && os.Geteuid() != 0 {
				t.Skip("giving the parent to another user needs root")
			}
			parent := filepath.Join(t.TempDir(), "parent")
			require.NoError(t, os.Mkdir(parent, 0o700))
			require.NoError(t, os.Chmod(parent, c.mode))
			if c.uid >= 0 {
				require.NoError(t, os.Chown(parent, c.uid, c.uid))
			}
			for _, existing := range []bool{false, true} {
				dir := filepath.Join(parent, fmt.Sprintf("target-%v", existing))
				if existing {
					require.NoError(t, os.Mkdir(dir, 0o755))
				}
				if c.msg == "" {
					cfg := testConfig()
					cfg.Dir = dir
					a := startApp(t, cfg, nil)
					a.waitReconciled()
					require.Equal(t, "hello.txt", a.dirNames()[0])
					continue
				}
				code, stderr := runExample(t, "--dir", dir, "--addr", "127.0.0.1:0")
				require.Equal(t, exitUsage, code, stderr)
				requireOnce(t, stderr, "example: target directory "+dir+": "+fmt.Sprintf(c.msg, parent))
				require.NotContains(t, stderr, "Serving HTTP")
				entries, err := os.ReadDir(parent)
				require.NoError(t, err)
				if existing {
					require.Len(t, entries, 1)
					require.Empty(t, dirNames(t, dir), "nothing is written")
				} else {
					require.Empty(t, entries, "nothing is created")
				}
			}
		})
	}
}

// Requests refused for their Host or Origin, which a client without the
// token or a web page can send as fast as it likes, are counted and
// logged at a bounded rate, each line of a bounded length: 300 refusals
// give refusalBurst lines, and the next line, once the rate allows,
// counts those not logged.
func TestRefusedRequestsAreLoggedAtABoundedRate(t *testing.T) {
	var logged syncBuffer
	var srv *server
	a := startAppLogging(t, slog.New(slog.NewTextHandler(&logged, nil)), testConfig(), nil,
		cell.Invoke(func(s *server) { srv = s }))
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	srv.refusals.setClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	lines := func() []string {
		var out []string
		for _, line := range strings.Split(logged.String(), "\n") {
			if strings.Contains(line, "Refused a request from outside") {
				out = append(out, line)
			}
		}
		return out
	}
	evil := "evil-" + strings.Repeat("x", 10<<10) + ".example.com"
	const sent = 300
	for i := range sent {
		var code int
		if i%2 == 0 {
			code, _ = a.send(http.MethodGet, "/files", evil, nil)
		} else {
			code, _ = a.send(http.MethodPost, "/pause", "", nil, "Origin", "https://"+evil)
		}
		require.Equal(t, http.StatusForbidden, code)
	}
	got := lines()
	require.Equal(t, refusalBurst, len(got), "a line per refusal up to the burst, then none")
	for _, line := range got {
		require.Less(t, len(line), 1000, "a refusal's line quotes at most %d bytes of each value: %.200s", maxLoggedValue, line)
	}
	require.Equal(t, uint64(sent), srv.refusals.count())

	mu.Lock()
	now = now.Add(refusalEvery)
	mu.Unlock()
	code, _ := a.send(http.MethodGet, "/files", evil, nil)
	require.Equal(t, http.StatusForbidden, code)
	got = lines()
	require.Equal(t, refusalBurst+1, len(got))
	require.Contains(t, got[refusalBurst], fmt.Sprintf("refused=%d not-logged=%d", sent+1, sent-refusalBurst))
	require.Contains(t, got[refusalBurst], "...(cut)")
}

// listenOnV6Loopback listens on [::1] at a port that is free on 127.0.0.1
// too, as another local user may, and returns the listener and the
// port. It skips the test where the machine has no IPv6 loopback: nobody
// can listen there.
func listenOnV6Loopback(t *testing.T) (net.Listener, string) {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", "[::1]:0")
		if err != nil {
			t.Skipf("no IPv6 loopback on this machine (%v): nobody can listen on [::1]", err)
		}
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		if v4, err := net.Listen("tcp", "127.0.0.1:"+port); err == nil {
			v4.Close()
			t.Cleanup(func() { ln.Close() })
			return ln, port
		}
		ln.Close()
	}
	t.Fatal("no port free on both loopback addresses")
	return nil, ""
}

// Finding 1 (high): another local user listening on [::1] at the API's
// port got the token of every client that resolves localhost to ::1
// first. The example holds both loopback addresses at its port: it
// refuses to start if [::1]:PORT is taken, and once started nobody else
// can listen there, so a request to either address reaches it.
func TestTheTokenCannotBeStolenOnTheOtherLoopbackAddress(t *testing.T) {
	t.Run("the other address taken first", func(t *testing.T) {
		ln, port := listenOnV6Loopback(t)
		for _, host := range []string{"127.0.0.1", "localhost"} {
			dir := filepath.Join(t.TempDir(), "target")
			code, stderr := runExample(t, "--dir", dir, "--addr", host+":"+port)
			require.Equal(t, exitUsage, code, stderr)
			requireOnce(t, stderr, "example: --addr "+host+":"+port+": cannot listen: [::1]:"+port+" is in use by another program: "+
				"clients that resolve localhost to ::1 would send it their requests and the token")
			require.NotContains(t, stderr, "Serving HTTP")
			_, err := os.Lstat(dir)
			require.ErrorIs(t, err, fs.ErrNotExist, "nothing is created")
		}
		require.NoError(t, ln.Close())
	})
	for _, addr := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0"} {
		t.Run("started on "+addr, func(t *testing.T) {
			ln, err := net.Listen("tcp", "[::1]:0")
			if err != nil {
				t.Skipf("no IPv6 loopback on this machine (%v)", err)
			}
			ln.Close()
			cfg := testConfig()
			cfg.Dir, cfg.Addr = filepath.Join(t.TempDir(), "target"), addr
			a := startApp(t, cfg, nil)
			_, port, err := net.SplitHostPort(strings.TrimPrefix(a.base, "http://"))
			require.NoError(t, err)
			for _, host := range []string{"127.0.0.1", "::1"} {
				ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
				if ln != nil {
					ln.Close()
				}
				require.True(t, errors.Is(err, syscall.EADDRINUSE), "another program could listen on %s: %v", net.JoinHostPort(host, port), err)
				a.base = "http://" + net.JoinHostPort(host, port)
				code, body := a.do(http.MethodGet, "/health", nil)
				require.Equal(t, http.StatusOK, code, body)
			}
		})
	}
}

// "OPTIONS *" without the token is refused like any other request, and its
// connection closed: net/http's own answer (200, the connection kept) let
// 128 such clients hold the API (outsider47).
func TestOptionsStarWithoutTheTokenIsRefused(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(a.base, "http://"), 5*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = fmt.Fprintf(conn, "OPTIONS * HTTP/1.1\r\nHost: %s\r\n\r\n", strings.TrimPrefix(a.base, "http://"))
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.NotEqual(t, http.StatusOK, resp.StatusCode, "OPTIONS * answered without the token")
	assert.True(t, resp.Close, "the connection is kept for a client without the token")
}

// A --dir reached through a symbolic link another user owns is refused:
// they could point it elsewhere at any time (outsider47 made the example
// write into a directory of theirs choosing this way).
func TestADirectoryBehindAnotherUsersLinkIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a link to another user needs root")
	}
	base := t.TempDir()
	target := filepath.Join(base, "elsewhere")
	require.NoError(t, os.Mkdir(target, 0o755))
	link := filepath.Join(base, "link")
	require.NoError(t, os.Symlink(target, link))
	require.NoError(t, os.Lchown(link, 4242, 4242))
	dir := filepath.Join(link, "converge-example")
	code, stderr := runExample(t, "--dir", dir, "--addr", "127.0.0.1:0")
	require.Equal(t, exitUsage, code, stderr)
	requireOnce(t, stderr, "example: target directory "+dir+": "+link+" is a symbolic link owned by uid 4242")
	entries, err := os.ReadDir(target)
	require.NoError(t, err)
	require.Empty(t, entries, "the example wrote behind the link")
}

// A stream of changes opened with a token ends when that token is
// replaced: whoever read it while it was exposed reads nothing written
// after (outsider47 kept reading 0600 files' content).
func TestAStreamEndsWhenItsTokenIsReplaced(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/statedb/changes/files", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := a.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	ended := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, resp.Body); ended <- err }()
	// Exposed: others could read it. The example replaces it.
	require.NoError(t, os.Chmod(filepath.Join(a.dir, tokenPath), 0o644))
	a.waitNewToken()
	select {
	case <-ended:
	case <-ctx.Done():
		t.Fatal("the stream opened with the old token is still open after it was replaced")
	}
}

//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/status"
)

// A second outside review of docs/example.md, "What it guarantees your
// machine", after the fixes of the first one (file handles, moving aside
// and exchanging, the lock, the 0700 state directory, the connection
// limit). Each test is named after the guarantee it checks and asserts
// the documented behaviour.

// startSecond starts, in this process, another example on dir, and
// returns the error of its start; if it started, it is stopped at once.
func startSecond(t *testing.T, dir string) error {
	t.Helper()
	cfg := testConfig()
	cfg.Dir = dir
	cfg.Addr = "127.0.0.1:0"
	app := newTestApp(cfg)
	log := hivetest.Logger(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	err := app.Start(log, ctx)
	require.NoError(t, app.Stop(log, ctx))
	return err
}

// docs/example.md: it refuses "a directory another example is using (it
// holds a lock on DIR/.converge-example/lock)". The running example never
// checks that the lock file it holds is still the one at lockPath: once
// it is removed (an operator cleaning up what looks like a stale lock
// file), a second example creates a new one, locks it and starts on the
// same directory, writing its own token over the first one's.
func TestADirectoryInUseIsRefusedEvenIfItsLockFileWasRemoved(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	require.NoError(t, os.Remove(filepath.Join(a.dir, lockPath)))

	err := startSecond(t, a.dir)
	if assert.Error(t, err, "a second example started on the directory of a running one") {
		assert.Contains(t, err.Error(), "is in use by another converge example")
	}
	assert.Equal(t, a.token, readToken(t, a.dir), "the second example replaced the running one's token")
}

// What held: the lock is taken on the directory, not on the path given,
// so a second example reaching it by another spelling (a trailing slash,
// "..", a symbolic link in the parent's path) is refused too.
func TestADirectoryInUseIsRefusedUnderAnotherPath(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(a.parent, link))
	for _, dir := range []string{
		a.dir + "/",
		filepath.Join(a.dir, "..", "target") + "/.",
		a.parent + "/../" + filepath.Base(a.parent) + "/target",
		filepath.Join(link, "target"),
	} {
		err := startSecond(t, dir)
		require.Error(t, err, dir)
		require.Contains(t, err.Error(), "is in use by another converge example", dir)
	}
	require.Equal(t, a.token, readToken(t, a.dir))
}

// docs/example.md: the token "only you can read (mode 0600, in a
// directory it keeps at 0700)". The state directory is checked only when
// the reconciler writes, deletes or prunes: after a `chmod -R a+rX` of
// the tree, an example with nothing to do (here --refresh 0, which the
// docs allow, and a prune an hour away) leaves the token readable by
// every user of the machine.
func TestTheTokenIsKeptPrivateWhileTheExampleIsIdle(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	state := filepath.Join(a.dir, stateDir)
	token := filepath.Join(a.dir, tokenPath)
	// chmod -R a+rX DIR
	require.NoError(t, os.Chmod(state, 0o755))
	require.NoError(t, os.Chmod(token, 0o644))

	private := func() bool {
		si, err1 := os.Stat(state)
		ti, err2 := os.Stat(token)
		return err1 == nil && err2 == nil && (si.Mode().Perm()&0o077 == 0 || ti.Mode().Perm()&0o044 == 0)
	}
	assert.Eventually(t, private, waitFor, 10*time.Millisecond,
		"the token stayed readable by other users (its directory and the file opened to them) while the example ran")
}

// The fix of the above: a token other users could read while the example
// ran (its directory and file opened to them) is replaced by a new one,
// written privately; the old one is refused. A token they could not read
// (only its directory opened) is kept: see
// TestStateDirectoryOpenedWhileRunningIsMadePrivateAgain.
func TestATokenOthersCouldReadIsReplaced(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	state := filepath.Join(a.dir, stateDir)
	token := filepath.Join(a.dir, tokenPath)
	require.NoError(t, os.Chmod(state, 0o755))
	require.NoError(t, os.Chmod(token, 0o644))

	replaced := func() bool {
		data, err := os.ReadFile(token)
		return err == nil && strings.TrimSpace(string(data)) != a.token
	}
	require.Eventually(t, replaced, waitFor, 10*time.Millisecond, "the token others could read was kept")
	si, err := os.Stat(state)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700).String(), si.Mode().Perm().String())
	ti, err := os.Stat(token)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600).String(), ti.Mode().Perm().String())

	old := a.token
	code, _ := a.do(http.MethodGet, "/health", nil)
	require.Equal(t, http.StatusUnauthorized, code, "the old token is still accepted")
	a.token = readToken(t, a.dir)
	require.NotEqual(t, old, a.token)
	code, body := a.do(http.MethodGet, "/health", nil)
	require.Equal(t, http.StatusOK, code, body)
}

// rawRequest sends a request with no token on conn, waits for the answer
// and returns it; conn stays open, as a client keeping it alive does.
func rawRequest(t *testing.T, conn net.Conn, br *bufio.Reader, host string) *http.Response {
	t.Helper()
	require.NoError(t, conn.SetDeadline(time.Now().Add(waitFor)))
	_, err := fmt.Fprintf(conn, "GET /health HTTP/1.1\r\nHost: %s\r\n\r\n", host)
	require.NoError(t, err)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	require.NoError(t, conn.SetDeadline(time.Time{}))
	return resp
}

// healthWithToken sends GET /health with the token on a new connection
// and returns the status code, waiting at most waitFor.
func healthWithToken(t *testing.T, base, token string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// docs/example.md: "Its API asks for a token" and "The token keeps out
// the other users of the machine"; "at most 128 connections at once,
// slow and idle connections closed". A user without the token still
// holds every one of the 128 connections as long as they like: a
// connection whose request was refused with 401 is kept alive (and idle
// for up to two minutes, renewed by another refused request), and a
// refused request with a body sent slowly holds its connection for the
// minute of the read timeout, as the server reads the body before it
// answers. Meanwhile the user with the token is not served. The limit is
// lowered to 2 here, as in TestConnectionsAreBounded; the timeouts are the
// example's own. The fix: a refused request's connection is closed after
// the answer, and its body is not read.
func TestATokenlessClientCannotKeepTheTokenHolderOut(t *testing.T) {
	for _, tc := range []struct {
		name string
		hold func(t *testing.T, conn net.Conn, host string)
	}{
		{"kept alive after 401", func(t *testing.T, conn net.Conn, host string) {
			br := bufio.NewReader(conn)
			resp := rawRequest(t, conn, br, host)
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
			// The client would keep the connection; the server does not.
			require.True(t, resp.Close, "the 401 does not say the connection is closed")
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(waitFor)))
			_, err := br.ReadByte()
			require.ErrorIs(t, err, io.EOF, "the server kept the connection of a refused request open")
		}},
		{"a body sent slowly", func(t *testing.T, conn net.Conn, host string) {
			_, err := fmt.Fprintf(conn, "PUT /files/x HTTP/1.1\r\nHost: %s\r\nContent-Length: 100\r\n\r\nx", host)
			require.NoError(t, err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := startApp(t, testConfig(), nil, cell.Provide(func() connLimit { return 2 }))
			host := strings.TrimPrefix(a.base, "http://")
			for range 2 {
				conn, err := net.Dial("tcp", host)
				require.NoError(t, err)
				t.Cleanup(func() { conn.Close() })
				tc.hold(t, conn, host)
			}
			_, err := healthWithToken(t, a.base, a.token)
			require.NoError(t, err, "the token holder was not served while a client without the token held the connections")
		})
	}
}

// docs/example.md: "Ctrl-C stops it cleanly". A client without the token
// that sends a request body slowly keeps the stop waiting: the server
// waits for the request to end (up to its minute) and the stop gives up
// only after 30s, and then exits with status 1, a failed stop.
func TestATokenlessClientDoesNotHoldUpTheStop(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "target")
	stderr := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, []string{"--dir", dir, "--addr", "127.0.0.1:0"}, io.Discard, stderr) }()
	var base string
	deadline := time.After(waitFor)
	for base == "" {
		select {
		case code := <-exited:
			t.Fatalf("the example exited with %d: %s", code, stderr.String())
		case <-deadline:
			t.Fatalf("the example did not start: %s", stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
		if m := apiAddr.FindStringSubmatch(stderr.String()); m != nil {
			base = m[1]
		}
	}
	host := strings.TrimPrefix(base, "http://")
	conn, err := net.Dial("tcp", host)
	require.NoError(t, err)
	t.Cleanup(func() {
		conn.Close()
		select {
		case <-exited:
		case <-time.After(waitFor):
			t.Error("the example did not stop once the client went away")
		}
	})
	// One write, so that the server reads both requests at once: the first
	// answered proves the second is read too, and its body awaited.
	_, err = fmt.Fprintf(conn, "GET /health HTTP/1.1\r\nHost: %s\r\n\r\n"+
		"PUT /files/x HTTP/1.1\r\nHost: %s\r\nContent-Length: 100\r\n\r\nx", host, host)
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(waitFor)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	cancel() // Ctrl-C
	select {
	case code := <-exited:
		exited <- code // for the cleanup
		require.Equal(t, exitOK, code, stderr.String())
	case <-time.After(waitFor):
		t.Fatalf("the example did not stop within %v of Ctrl-C while a client without the token held a connection", waitFor)
	}
}

// docs/example.md: "It moves a file aside ... and checks what it moved".
// The check before a removal reads the file by its name, and opens
// whatever is there then: a named pipe put at the name after the file was
// looked at blocks the read for good. The removal never ends, and the
// reconciler, whose next prune waits for it, stops writing anything. The
// reader here puts the pipe in place when the read begins, then reads as
// the example does.
func TestAFileSwappedForANamedPipeDoesNotHangTheExample(t *testing.T) {
	var armed atomic.Bool
	var fifo string
	reader := func(root *os.Root, name string) ([]byte, fileID, error) {
		if name == "note" && armed.CompareAndSwap(true, false) {
			// The user replaces note with a named pipe, just now.
			if err := os.Remove(fifo); err == nil {
				syscall.Mkfifo(fifo, 0o644)
			}
		}
		return readRegular(root, name)
	}
	a := startApp(t, testConfig(), nil, cell.Provide(func() fileReader { return reader }))
	fifo = filepath.Join(a.dir, "note")
	t.Cleanup(func() {
		// Unblock the read, if it is blocked, so that the example can stop.
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	a.put("note", "the example's")
	a.waitKind("note", status.KindDone)
	// Touched: the removal reads it to check it still holds what was written.
	later := time.Now().Add(time.Hour)
	require.NoError(t, os.Chtimes(fifo, later, later))
	armed.Store(true)

	code, body := a.do(http.MethodDelete, "/files/note", nil)
	require.Equal(t, http.StatusNoContent, code, body)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	_, _, err := a.rec.WaitUntilReconciled(ctx, a.files.Revision(a.db.ReadTxn()))
	require.NoError(t, err, "the removal of note never ended: its check is reading a named pipe")
	info, err := os.Lstat(fifo)
	require.NoError(t, err)
	require.NotZero(t, info.Mode()&fs.ModeNamedPipe, "the user's pipe is left alone")
}

// What held: the user's own files in the state directory with the
// example's names (aside-…, but also lock, token) are not removed, and a
// lock file the user replaced with a link or a pipe is refused rather
// than followed.
func TestTheUsersFilesInTheStateDirectoryAreLeftAlone(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	mine := filepath.Join(a.dir, stateDir, asidePrefix+"mine")
	require.NoError(t, os.WriteFile(mine, []byte("mine"), 0o600))
	a.put("x", "y")
	a.waitKind("x", status.KindDone)
	a.prune()
	data, err := os.ReadFile(mine)
	require.NoError(t, err)
	require.Equal(t, "mine", string(data))
	a.stop()

	lock := filepath.Join(a.dir, lockPath)
	require.NoError(t, os.Remove(lock))
	require.NoError(t, syscall.Mkfifo(lock, 0o600))
	err = startSecond(t, a.dir)
	require.Error(t, err)
	require.Contains(t, err.Error(), "is not a regular file")
}

// docs/example.md: "A file it wrote that you replace ... is yours" and
// "A file of it that you edit in place is still its own". What held:
// renames by the user inside the directory are told apart by handle. A
// file of the example moved by the user to another of the example's names
// is not the file recorded there: it is neither written over nor removed,
// and the name it left is restored.
func TestAFileTheUserMovedToAnotherNameIsNotTakenForTheFileThere(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.put("a", "the example's a")
	a.put("b", "the example's b")
	a.waitKind("a", status.KindDone)
	a.waitKind("b", status.KindDone)
	require.NoError(t, os.Rename(filepath.Join(a.dir, "a"), filepath.Join(a.dir, "b")))

	a.put("b", "the example's new b")
	f := a.waitSettled("b")
	require.Equal(t, status.KindError.String(), f.Status.Kind.String())
	require.Equal(t, "the example's a", a.readFile("b"))

	code, body := a.do(http.MethodDelete, "/files/b", nil)
	require.Equal(t, http.StatusNoContent, code, body)
	a.waitDeleteReconciled()
	require.Equal(t, "the example's a", a.readFile("b"), "a file the user moved there was removed")
}

// docs/example.md: "--files ... (its errors show no text of it)". What
// held: files of other tools that an operator may give by mistake, each
// with a secret, are refused without the secret in the error.
func TestFilesErrorsShowNoSecretOfOtherFiles(t *testing.T) {
	const secret = "hunter2SECRET"
	for name, text := range map[string]string{
		"netrc":       "machine example.com login me password " + secret + "\n",
		"env":         "PASSWORD=" + secret + "\n",
		"pgpass":      "localhost:5432:db:me:" + secret + "\n",
		"json":        `{"private_key": "` + secret + `"}`,
		"k8s":         "apiVersion: v1\nkind: Secret\ndata:\n  password: " + secret + "\n",
		"ini":         "[default]\naws_secret_access_key = " + secret + "\n",
		"anchor":      "files: *" + secret + "\n",
		"tab":         "files:\n\t- " + secret + "\n",
		"flow":        "files: [" + secret + "\n",
		"private key": "-----BEGIN OPENSSH PRIVATE KEY-----\n" + secret + "\n-----END OPENSSH PRIVATE KEY-----\n",
		"indent":      "files:\n  - name: x\n   " + secret + ": y\n",
	} {
		_, err := parseFiles("--files f", []byte(text))
		require.Error(t, err, name)
		require.NotContains(t, err.Error(), secret, name)
		require.NotContains(t, err.Error(), "hunter2", name)
	}
}

//go:build linux

package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A third outside review of docs/example.md, "What it guarantees your
// machine", after the fixes of the second one (the lock on the directory's
// descriptor, the privacy check every second, refused connections closed
// at once, reads through checked descriptors, temporary files recognised
// by name). Each test is named after the guarantee it checks and asserts
// the documented behaviour.

// tokenRefused reports whether the API refuses token, on a new
// connection, within waitFor.
func tokenRefused(t *testing.T, base, token string) bool {
	t.Helper()
	code, err := healthWithToken(t, base, token)
	require.NoError(t, err)
	return code == http.StatusUnauthorized
}

// docs/example.md: the token is "replaced if other users could read it".
// The check every second looks only at the directory claimed last. Once
// the target directory is moved away (mv DIR DIR.old, an operator
// keeping the old tree) and the example has claimed a new DIR at its
// next write, the token file in DIR.old still holds the token the API
// accepts, written by the example, and nothing watches it any more: a
// chmod -R a+rX DIR.old hands the live token to every user of the
// machine, and it is never replaced. (The example wrote the same token
// into the new DIR: "the same until the example stops".) Now a directory
// claimed anew gets a new token, and the one left behind is dead.
func TestATokenOthersCouldReadIsReplacedEvenInADirectoryMovedAway(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	old := a.dir + ".old"
	require.NoError(t, os.Rename(a.dir, old))
	a.put("x", "after the move") // the example claims a new directory
	a.waitReconciled()
	require.FileExists(t, filepath.Join(a.dir, "x"))
	// The fix: the new directory gets a new token; the old one stops
	// working at once, before anyone opens DIR.old.
	renewed := readToken(t, a.dir)
	require.NotEqual(t, a.token, renewed, "the new directory got the token left in the old one")

	// chmod -R a+rX DIR.old
	require.NoError(t, os.Chmod(filepath.Join(old, stateDir), 0o755))
	require.NoError(t, os.Chmod(filepath.Join(old, tokenPath), 0o644))
	exposed := readToken(t, old) // what another user now reads
	require.Equal(t, a.token, exposed)
	a.token = renewed

	// The check runs every second: five of them.
	assert.Eventually(t, func() bool { return tokenRefused(t, a.base, exposed) }, 5*time.Second, 50*time.Millisecond,
		"the token in %s, readable by other users, is still accepted by the API", filepath.Join(old, tokenPath))
}

// docs/example.md: the token is "replaced if other users could read it".
// The check every second compares modes only: a chmod -R a+rX of the tree
// undone before the next check (a script that opens the tree, copies it,
// and closes it again; chmod -R go= after a mistaken chmod) leaves the
// token, which others could read meanwhile, in use. The change is
// visible afterwards: the token file's and the state directory's ctime
// moved.
func TestATokenOthersCouldReadForAMomentIsReplaced(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	state := filepath.Join(a.dir, stateDir)
	token := filepath.Join(a.dir, tokenPath)
	require.NoError(t, os.Chmod(state, 0o755))
	require.NoError(t, os.Chmod(token, 0o644))
	exposed := readToken(t, a.dir) // another user reads it now
	require.NoError(t, os.Chmod(token, 0o600))
	require.NoError(t, os.Chmod(state, 0o700))

	assert.Eventually(t, func() bool { return tokenRefused(t, a.base, exposed) }, 5*time.Second, 50*time.Millisecond,
		"a token other users could read for a moment is still accepted")
}

// docs/example.md: "A refused request's connection is closed at once", "a
// client without the token holds no connection", at most 128 connections
// at once. A connection is refused only once its request has been read:
// a client without the token that opens connections and sends nothing
// holds each for the whole header timeout (10s), and those beyond the
// limit wait in the kernel's accept queue (4096 long), each to hold a
// slot for its own header timeout in turn. The user with the token, whose
// connection is queued behind them, waits the header timeout times the
// queue over the limit: with the example's own 128 and 10s, 4096 of them
// keep it out for five minutes, and the client need only open more as
// they close.
//
// Over TCP on a shared loopback, with the credential inside the request,
// this cannot be prevented without reading every queued connection at
// once (unbounded) or a Unix socket the other users cannot open (another
// design). What the example guarantees, and docs/example.md now says
// plainly: such connections are bounded, each closed by the example
// within the header timeout, at most the limit of them served at once,
// and the token holder queued behind them is served once they are
// closed. Here with the limit lowered to 2 and the header timeout to
// 300ms.
func TestTokenlessIdleConnectionsAreClosedAndTheTokenHolderServedAfterThem(t *testing.T) {
	const headerTimeout = 300 * time.Millisecond
	timeouts := defaultTimeouts()
	timeouts.ReadHeader = headerTimeout
	a := startApp(t, testConfig(), nil,
		cell.Provide(func() connLimit { return 2 }),
		cell.Provide(func() *httpTimeouts { return &timeouts }))
	host := strings.TrimPrefix(a.base, "http://")
	idle := make([]net.Conn, 10)
	for i := range idle {
		conn, err := net.DialTimeout("tcp", host, waitFor)
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		idle[i] = conn
	}

	// The token holder queues behind them.
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitFor)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/health", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+a.token)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	type answer struct {
		code int
		err  error
	}
	served := make(chan answer, 1)
	go func() {
		resp, err := client.Do(req)
		if err != nil {
			served <- answer{err: err}
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		served <- answer{code: resp.StatusCode}
	}()

	// Every idle connection is closed by the example, none kept for good:
	// each read ends with the end of the stream, not its own deadline.
	for i, conn := range idle {
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(3*waitFor)))
		n, err := conn.Read(make([]byte, 1))
		require.Zero(t, n)
		require.ErrorIs(t, err, io.EOF, "idle connection %d was not closed by the example", i)
	}
	got := <-served // the request's context bounds the wait
	require.NoError(t, got.err, "the token holder was not served once the idle connections were closed")
	assert.Equal(t, http.StatusOK, got.code)
}

// What held: the lock is on the directory, not its name. A directory
// moved away while the example runs (mv DIR DIR.old) is still the
// example's until its next write claims a new DIR: a second example
// started on DIR.old meanwhile is refused, with exit status 2's error.
func TestADirectoryInUseIsRefusedAfterItWasMoved(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitQuiet() // the first prune would claim a new DIR, and let DIR.old go
	old := a.dir + ".old"
	require.NoError(t, os.Rename(a.dir, old))
	require.NoError(t, os.Remove(filepath.Join(old, lockPath)))

	err := startSecond(t, old)
	if assert.Error(t, err, "a second example started on the moved directory of a running one") {
		assert.Contains(t, err.Error(), "is in use by another converge example")
	}
	assert.Equal(t, a.token, readToken(t, old), "the second example replaced the running one's token")
}

// What held: a file of the example's that the user replaces with a
// device node (root can: mknod) is neither opened to be read as the
// example's nor removed when the file is deleted from the table.
func TestAFileReplacedByADeviceNodeIsLeftAlone(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	a.put("dev", "mine")
	a.waitSettled("dev")
	path := filepath.Join(a.dir, "dev")
	require.NoError(t, os.Remove(path))
	require.NoError(t, syscall.Mknod(path, syscall.S_IFCHR|0o600, int(unix.Mkdev(1, 3)))) // /dev/null

	code, body := a.do(http.MethodDelete, "/files/dev", nil)
	require.Equal(t, http.StatusNoContent, code, body)
	a.waitDeleteReconciled()
	info, err := os.Lstat(path)
	require.NoError(t, err, "the device node the user put in place was removed")
	assert.Equal(t, os.ModeCharDevice|os.ModeDevice, info.Mode().Type())
}

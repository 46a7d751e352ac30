//go:build unix

package main

// The second probe of converge-inspect as a local attacker (issue 47):
// each test pins one of its findings.

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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

package reconciler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Environment variables that make TestExampleInNetns run the example
// built at exampleBinEnv in the directory exampleDirEnv.
const (
	exampleBinEnv = "CONVERGE_COMPAT_EXAMPLE_BIN"
	exampleDirEnv = "CONVERGE_COMPAT_EXAMPLE_DIR"
)

// runExample runs the example program built at bin, briefly, through
// TestExampleInNetns in a child process of its own in a private network
// namespace (and the user namespace that lets an unprivileged user make
// one): the example serves HTTP without a credential on 127.0.0.1:8080,
// which it does not let anyone change, and only there can nothing else
// reach it, nor it collide with another server. It writes only in a
// temporary directory. Where no such namespace can be made, it is skipped.
func runExample(t *testing.T, bin string) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestExampleInNetns$", "-test.v", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), exampleBinEnv+"="+bin, exampleDirEnv+"="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		Pdeathsig:   syscall.SIGKILL, // dies with this test, however it ends
	}
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Skipf("skipped: no private network namespace for the example (%v); it serves HTTP on 127.0.0.1:8080 and runs only where nothing else can reach it; it was built and vetted", err)
	}
	err := cmd.Wait()
	require.NoError(t, err, "running the example:\n%s", out.String())
	assert.Contains(t, out.String(), "--- PASS: TestExampleInNetns", out.String())
}

// TestExampleInNetns runs the example as a user would, in the private
// network namespace runExample made: the prune at start removes a file it
// does not know, a memo posted is written and marked Done, a memo deleted
// is removed, the expvar metrics are published, and a SIGTERM stops it
// cleanly. It does nothing in a normal run.
func TestExampleInNetns(t *testing.T) {
	bin, dir := os.Getenv(exampleBinEnv), os.Getenv(exampleDirEnv)
	if bin == "" || dir == "" {
		t.Skip("run by TestUpstreamExample in a private network namespace")
	}
	require.NoError(t, loopbackUp(), "bringing up the namespace's loopback interface")

	memos := filepath.Join(dir, "memos")
	require.NoError(t, os.Mkdir(memos, 0o700))
	bogus := filepath.Join(memos, "bogus")
	require.NoError(t, os.WriteFile(bogus, []byte("not a memo"), 0o600))

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--directory", memos)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with this test, however it ends
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.WaitDelay = 10 * time.Second
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
		t.Logf("the example's output:\n%s", logs.String())
	}()

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	const base = "http://127.0.0.1:8080"
	do := func(method, path, body string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		if err != nil {
			return 0, "", err
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b), err
	}
	// eventually waits for cond, for 30 seconds at most, checking it
	// every 10 milliseconds, and fails if the example exits meanwhile.
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.NewTimer(30 * time.Second)
		defer deadline.Stop()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for !cond() {
			select {
			case err := <-exited:
				stopped = true
				t.Fatalf("waiting until %s: the example exited: %v", what, err)
			case <-deadline.C:
				t.Fatalf("waiting until %s: timed out", what)
			case <-tick.C:
			}
		}
	}
	memoStatus := func(name string) string {
		code, body, err := do("GET", "/statedb", "")
		if err != nil || code != http.StatusOK {
			return ""
		}
		var tables struct {
			Memos []struct {
				Name   string
				Status struct{ Kind string }
			} `json:"memos"`
		}
		if json.Unmarshal([]byte(body), &tables) != nil {
			return ""
		}
		for _, m := range tables.Memos {
			if m.Name == name {
				return m.Status.Kind
			}
		}
		return ""
	}
	exists := func(path string) bool {
		_, err := os.Stat(path)
		return !errors.Is(err, os.ErrNotExist)
	}

	eventually("the API answers", func() bool {
		code, _, err := do("GET", "/statedb", "")
		return err == nil && code == http.StatusOK
	})
	eventually("the prune at start removes memos/bogus", func() bool { return !exists(bogus) })

	greeting := filepath.Join(memos, "greeting")
	code, _, err := do("POST", "/memos/greeting", "hello world")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	eventually("memos/greeting is written", func() bool {
		b, err := os.ReadFile(greeting)
		return err == nil && string(b) == "hello world"
	})
	eventually("the memo is Done", func() bool { return memoStatus("greeting") == "Done" })

	code, _, err = do("DELETE", "/memos/greeting", "")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	eventually("memos/greeting is removed", func() bool { return !exists(greeting) })

	code, vars, err := do("GET", "/expvar", "")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, vars, `"reconciliation_count"`)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		stopped = true
		require.NoError(t, err, "the example's exit")
	case <-time.After(30 * time.Second):
		t.Fatal("the example did not stop on SIGTERM")
	}
	// The example builds its hive with hive.Options that leave StopTimeout
	// zero, so its stop hooks get a context that has already expired and
	// it reports "Failed to stop hive" as it exits, with the StateDB
	// reconciler as with converge. Nothing else may be an error.
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, " ERROR ") && !strings.Contains(line, `Failed to stop hive error="context deadline exceeded"`) {
			t.Errorf("the example logged an error: %s", line)
		}
	}
}

// loopbackUp brings up the loopback interface, which a new network
// namespace has down.
func loopbackUp() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var req struct { // struct ifreq, with room to spare
		name  [syscall.IFNAMSIZ]byte
		flags uint16
		_     [64]byte
	}
	copy(req.name[:], "lo")
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCGIFFLAGS, uintptr(unsafe.Pointer(&req))); errno != 0 {
		return errno
	}
	req.flags |= syscall.IFF_UP
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCSIFFLAGS, uintptr(unsafe.Pointer(&req))); errno != 0 {
		return errno
	}
	return nil
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

package main

// The end-to-end test of cmd/converge-inspect against the example. It lives
// here, in the example's module, because the example's module already
// requires the core module (where the command is, replaced by the
// directory above): building the command from here adds nothing to any
// module graph. A test in the core module building the example would make
// the core module's tests build the Prometheus adapter's dependencies.

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// e2eWait bounds every wait of the end-to-end test, builds included.
const e2eWait = 2 * time.Minute

// buildInspectAndExample builds the command and the example into a
// temporary directory, and returns their paths.
func buildInspectAndExample(t *testing.T) (inspect, example string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: builds the command and the example with the go command")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	bin := t.TempDir()
	inspect, example = filepath.Join(bin, "converge-inspect"), filepath.Join(bin, "example")
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	for _, b := range []struct{ out, pkg string }{
		{inspect, "github.com/converge-go/converge/cmd/converge-inspect"},
		{example, "."},
	} {
		out, err := exec.CommandContext(ctx, goTool, "build", "-o", b.out, b.pkg).CombinedOutput()
		require.NoError(t, err, "go build %s: %s", b.pkg, out)
	}
	return inspect, example
}

// lines collects what a process prints, line by line. Its methods are safe
// for concurrent use.
type lines struct {
	mu      sync.Mutex
	all     []string
	partial []byte
	changed chan struct{} // closed and replaced when a line is added
}

func newLines() *lines { return &lines{changed: make(chan struct{})} }

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := strings.IndexByte(string(l.partial), '\n')
		if i < 0 {
			return len(p), nil
		}
		l.all = append(l.all, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
		close(l.changed)
		l.changed = make(chan struct{})
	}
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, line := range l.all {
		b.WriteString(line + "\n")
	}
	b.Write(l.partial)
	return b.String()
}

// wait waits until a line from the from-th on matches re, and returns its
// submatches and the index of the line after it.
func (l *lines) wait(t *testing.T, from int, re string) ([]string, int) {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.After(e2eWait)
	for {
		l.mu.Lock()
		all, changed := l.all, l.changed
		l.mu.Unlock()
		for i := from; i < len(all); i++ {
			if m := rx.FindStringSubmatch(all[i]); m != nil {
				return m, i + 1
			}
		}
		from = max(from, len(all))
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no line matching %q in %s; printed:\n%s", re, e2eWait, l)
		}
	}
}

// process is a started command.
type process struct {
	cmd            *exec.Cmd
	stdout, stderr *lines
	done           chan error // gets Wait's error
}

func start(t *testing.T, ctx context.Context, path string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.CommandContext(ctx, path, args...), stdout: newLines(), stderr: newLines(), done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	require.NoError(t, p.cmd.Start())
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Kill() // if still running; it is ours
		<-p.done
	})
	return p
}

// interrupt sends SIGINT, as Ctrl-C does, and returns the exit status.
func (p *process) interrupt(t *testing.T) int {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	select {
	case <-p.done:
		p.done <- nil // for the cleanup
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(e2eWait):
		t.Fatalf("%s did not end after SIGINT", p.cmd.Path)
		return -1
	}
}

// The command against the live example: healthy, then a file that cannot
// be written (a directory has its name) makes the reconciler degraded,
// shown with the failing file and exit status 1; once the directory is
// gone, --watch shows the file written and the reconciler running, and a
// run exits 0.
func TestInspectEndToEnd(t *testing.T) {
	inspect, example := buildInspectAndExample(t)
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "target")

	ex := start(t, ctx, example, "--dir", dir, "--addr", "127.0.0.1:0", "--retry-max", "200ms", "--refresh", "0", "--prune", "0")
	m, _ := ex.stderr.wait(t, 0, `API on http://(127\.0\.0\.1:\d+) `)
	base := "http://" + m[1]
	tokenFile := filepath.Join(dir, tokenPath)
	args := []string{"--url", base + "/statedb", "--token-file", tokenFile}

	run := func(more ...string) (int, string, string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, inspect, append(args, more...)...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if _, exited := err.(*exec.ExitError); err != nil && !exited {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
	}

	watch := start(t, ctx, inspect, append(args, "--watch")...)
	_, at := watch.stdout.wait(t, 0, `^files +running +3 +0 +0 +16 +0 +- `)

	// A file the example cannot write.
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "blocked", "inner"), 0o755))
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/files/blocked", strings.NewReader("content"))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+readToken(t, dir))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	_, at = watch.stdout.wait(t, at, `^files +degraded +4 +1 `)
	_, at = watch.stdout.wait(t, at, `^files +blocked +\d+ +(in \S+|due|running) +write blocked: `)

	code, stdout, stderr := run()
	require.Equal(t, 1, code, "exit status when degraded\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Empty(t, stderr)
	require.Regexp(t, `(?m)^files +degraded +4 +1 +[01] +16 +[01] +\S+ +-$`, stdout)
	require.Regexp(t, `(?m)^files +blocked +[1-9]\d* +(in \S+|due|running) +write blocked: `, stdout)
	// The headers are those of the sample in the README.
	for _, header := range readmeSampleHeaders(t) {
		require.Regexp(t, `(?m)^`+regexp.QuoteMeta(header)+`$`, stdout)
	}

	code, stdout, stderr = run("--json")
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stdout, `"degraded": true`)
	require.Contains(t, stdout, `"key": "blocked"`)

	// Repaired: the retry writes the file.
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "blocked")))
	_, at = watch.stdout.wait(t, at, `^files +running +4 +0 +0 +16 +0 +- `)
	watch.stdout.wait(t, at, `^No failing objects\.$`)
	code, stdout, stderr = run()
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Regexp(t, `(?m)^files +running +4 +0 +0 +16 +0 +- +-$`, stdout)

	require.Equal(t, 0, watch.interrupt(t), watch.stderr.String())
	require.Empty(t, watch.stderr.String())
	require.Equal(t, 0, ex.interrupt(t), ex.stderr.String())
}

// readmeSampleHeaders returns the header lines (those starting with
// RECONCILER) of the command's sample output in the README, the block
// after <!-- inspect-output -->.
func readmeSampleHeaders(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)<!-- inspect-output -->\n```text\n(.*?)```\n").FindSubmatch(data)
	require.NotNil(t, m, "README.md has no ```text block after <!-- inspect-output -->")
	var headers []string
	for _, line := range strings.Split(string(m[1]), "\n") {
		if strings.HasPrefix(line, "RECONCILER ") {
			headers = append(headers, line)
		}
	}
	require.Len(t, headers, 2)
	return headers
}

//go:build linux

package main

import (
	"context"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// shortSocketPath returns a path to the shell's socket of the example on
// dir short enough for a client to dial: a socket's address is at most
// 107 bytes, and the tests' directories are deeper. It goes through a
// symbolic link to dir, which the client's connect follows.
func shortSocketPath(t *testing.T, dir string) string {
	t.Helper()
	short, err := os.MkdirTemp("", "s")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(short) })
	require.NoError(t, os.Symlink(dir, filepath.Join(short, "d")))
	return filepath.Join(short, "d", shellSocket)
}

// runCommand runs path with args and returns its exit status and output.
func runCommand(t *testing.T, ctx context.Context, cred *syscall.Credential, path string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, path, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Dir = "/"
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
	}
	err := cmd.Run()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// Finding 9: the example serves hive's shell on an owner-only socket in
// its state directory. hive's shell client (`example shell`) runs
// db/show on it, and converge-inspect --socket reads the reconcilers
// through it, with no token; commands that write (exec, db/insert, -o)
// are not served; the socket has mode 0600 in the 0700 state directory,
// and follows the directory when it is claimed anew.
func TestTheShellServesTheTablesOnAnOwnerOnlySocket(t *testing.T) {
	inspect, example := buildInspectAndExample(t)
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	sock := shortSocketPath(t, a.dir)

	info, err := os.Lstat(filepath.Join(a.dir, shellSocket))
	require.NoError(t, err)
	require.Equal(t, fs.ModeSocket|0o600, info.Mode()&(fs.ModeType|fs.ModePerm), "the socket's mode")
	state, err := os.Lstat(filepath.Join(a.dir, stateDir))
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o700), state.Mode().Perm())

	shell := func(args ...string) (int, string, string) {
		t.Helper()
		return runCommand(t, ctx, nil, example, append([]string{"shell", "--shell-sock-path", sock}, args...)...)
	}
	code, stdout, stderr := shell("db/show", "reconcilers")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Regexp(t, `(?m)^Module +Name +State +Objects`, stdout)
	require.Regexp(t, `(?m)^files +running +3 `, stdout)
	code, stdout, stderr = shell("db/show", "--format=json", "files")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `"name": "hello.txt"`)
	code, stdout, _ = shell("db/show", "reconciler-retries")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "Reconciler")

	out := filepath.Join(t.TempDir(), "out")
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"exec", "id"}, "exec id: unknown command"},
		{[]string{"db/insert", "files", "x.yaml"}, "unknown command"},
		{[]string{"hive/stop"}, "unknown command"},
		{[]string{"db/show", "-o", out, "files"}, "-o/--out is refused: this shell writes no files"},
		{[]string{"db/prefix", "--delete", "files", "h"}, "--delete is refused: this shell changes no table"},
		{[]string{"db/list", "--delete=true", "files", "motd"}, "--delete is refused"},
	} {
		code, stdout, stderr := shell(c.args...)
		require.Equal(t, 1, code, "%q: %s %s", c.args, stdout, stderr)
		require.Contains(t, stdout, c.msg)
	}
	requireAbsent(t, out)
	a.waitReconciled()
	for _, name := range initialNames {
		_, err := os.Stat(filepath.Join(a.dir, name))
		require.NoError(t, err, "the shell deleted %s", name)
	}

	// converge-inspect reads the same tables through the socket.
	code, stdout, stderr = runCommand(t, ctx, nil, inspect, "--socket", sock)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Regexp(t, `(?m)^files +running +3 +0 +0 +16 +0 +- `, stdout)
	require.Contains(t, stdout, "No failing objects.")
	code, stdout, stderr = runCommand(t, ctx, nil, inspect, "--socket", sock, "--json")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `"id": "files"`)

	watch := start(t, ctx, inspect, "--socket", sock, "--watch")
	_, at := watch.stdout.wait(t, 0, `^files +running +3 +0 `)
	a.put("greeting", "hi")
	watch.stdout.wait(t, at, `^files +running +4 +0 `)
	require.Equal(t, 0, watch.interrupt(t), watch.stderr.String())

	// The directory claimed anew: the socket moves with it.
	a.breakDir()
	require.NoError(t, os.Remove(a.dir))
	a.put("after", "claimed anew")
	a.waitNewToken()
	// The token is written before the shell moves (ownership.go, claim):
	// wait for the socket in the directory claimed anew.
	require.Eventually(t, func() bool {
		info, err := os.Lstat(filepath.Join(a.dir, shellSocket))
		return err == nil && info.Mode()&fs.ModeSocket != 0
	}, waitFor, 5*time.Millisecond, "no socket in the directory claimed anew")
	code, stdout, stderr = shell("db/show", "reconcilers")
	require.Equal(t, 0, code, "after the directory was claimed anew:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Regexp(t, `(?m)^files `, stdout)

	a.stop()
	requireAbsent(t, filepath.Join(a.dir, shellSocket))
}

// The shell refuses other users: another local user (uid 4242, which the
// test runs converge-inspect as) cannot reach the socket through the
// state directory, and one that reaches it anyway (the user linked the
// socket into a directory others can enter, and opened its mode) is
// refused by its peer credentials. Without root the test cannot run a
// process as another user, and skips.
func TestTheShellRefusesOtherUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running a process as another user needs root")
	}
	inspect, _ := buildInspectAndExample(t)
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()

	// A directory the other user can enter, holding the command: the
	// tests' own directories are 0700.
	tmp := os.Getenv("TMPDIR")
	info, err := os.Stat(tmp)
	require.NoError(t, err)
	require.NoError(t, os.Chmod(tmp, 0o711))
	t.Cleanup(func() { os.Chmod(tmp, info.Mode().Perm()) })
	public, err := os.MkdirTemp(tmp, "public-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(public) })
	require.NoError(t, os.Chmod(public, 0o755))
	bin := filepath.Join(public, "converge-inspect")
	copyFile(t, inspect, bin, 0o755)
	other := &syscall.Credential{Uid: 4242, Gid: 4242}

	// Through the state directory, 0700: the connection is refused by
	// the file system.
	sock := shortSocketPath(t, a.dir)
	code, stdout, stderr := runCommand(t, ctx, other, bin, "--socket", sock)
	require.Equal(t, 2, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Contains(t, stderr, "permission denied")
	require.Empty(t, stdout)

	// Linked where the other user can reach it, mode 0666: the shell
	// refuses the connection by its peer's credentials.
	link := filepath.Join(public, "shell.sock")
	require.NoError(t, os.Link(filepath.Join(a.dir, shellSocket), link))
	require.NoError(t, os.Chmod(link, 0o666))
	code, stdout, stderr = runCommand(t, ctx, other, bin, "--socket", link)
	require.Equal(t, 2, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Contains(t, stderr, "refused: the shell serves only the user running the example (uid 0), not uid 4242")
	require.Empty(t, stdout)
	require.Equal(t, uint64(1), a.shell.refusals.count())

	// The user running the example is served through the same link.
	code, stdout, stderr = runCommand(t, ctx, nil, bin, "--socket", link)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Regexp(t, `(?m)^files +running `, stdout)
}

// copyFile copies the file at from to to, with mode.
func copyFile(t *testing.T, from, to string, mode fs.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
	require.NoError(t, os.Chmod(to, mode))
}

// The shell does not start on a name in the state directory that is not
// a socket it left: a file of the user's there is left alone, and the
// start fails, naming it. A socket left by an example that was killed is
// replaced.
func TestTheShellLeavesAFileAtItsNameAlone(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.stop()
	path := filepath.Join(a.dir, shellSocket)
	require.NoError(t, os.WriteFile(path, []byte("the user's"), 0o600))
	cfg := testConfig()
	cfg.Dir, cfg.Addr = a.dir, "127.0.0.1:0"
	err := startFailure(t, cfg)
	require.ErrorContains(t, err, shellSocket+" exists and is not a socket the example left there: move it away")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "the user's", string(data))

	// A socket nothing accepts on, as a killed example leaves it.
	require.NoError(t, os.Remove(path))
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	short := shortSocketPath(t, a.dir)
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrUnix{Name: short}))
	syscall.Close(fd)
	b := startApp(t, cfg, nil)
	code, _ := b.do(http.MethodGet, "/health", nil)
	require.Equal(t, http.StatusOK, code)
	info, err := os.Lstat(path)
	require.NoError(t, err)
	require.Equal(t, fs.ModeSocket|0o600, info.Mode()&(fs.ModeType|fs.ModePerm))
}

// `example shell` talks only to a socket of the user's in directories
// only the user can change, as the example makes them: a socket another
// user (uid 4242, which the test, as root, gives it) made at the path,
// the default one say, would be answered by their program.
func TestTheShellClientRefusesAnotherUsersSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a directory to another user needs root")
	}
	_, example := buildInspectAndExample(t)
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	short, err := os.MkdirTemp("", "s")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(short) })
	dir := filepath.Join(short, "converge-example")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, stateDir), 0o700))
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	defer syscall.Close(fd)
	sock := filepath.Join(dir, shellSocket)
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrUnix{Name: sock}))
	require.NoError(t, syscall.Listen(fd, 1))
	for _, path := range []string{sock, filepath.Join(dir, stateDir), dir} {
		require.NoError(t, os.Lchown(path, 4242, 4242))
		code, stdout, stderr := runCommand(t, ctx, nil, example, "shell", "--shell-sock-path", sock, "db/show", "reconcilers")
		require.Equal(t, 2, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
		require.Contains(t, stderr, "example shell: the shell's socket "+sock)
		require.Regexp(t, `belongs to another user|is owned by uid 4242`, stderr)
		require.Empty(t, stdout)
	}
}

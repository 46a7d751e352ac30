package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// requireOnce checks that stderr holds msg exactly once, and no ERROR
// record of the hive repeating it.
func requireOnce(t *testing.T, stderr, msg string) {
	t.Helper()
	require.Equal(t, 1, strings.Count(stderr, msg), "want %q exactly once in:\n%s", msg, stderr)
	require.NotContains(t, stderr, "level=ERROR", stderr)
}

// One exit-status rule: 2 when the example refuses to start because of
// what it was given, including a --dir that is a file, an --addr with an
// invalid port and an --addr already in use; each error is printed once.
func TestExitStatusUsage(t *testing.T) {
	parent := t.TempDir()
	file := filepath.Join(parent, "a-file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	full := filepath.Join(parent, "full")
	require.NoError(t, os.Mkdir(full, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(full, "mine"), []byte("x"), 0o644))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	busy := ln.Addr().String()
	missing := filepath.Join(parent, "missing")

	cases := map[string]struct {
		args []string
		msg  string
	}{
		"dir is a file": {[]string{"--dir", file, "--addr", "127.0.0.1:0"},
			"example: target directory " + file + " is not a directory; choose another --dir\n"},
		"invalid port": {[]string{"--dir", missing, "--addr", ":99999"},
			"example: --addr :99999: address 99999: invalid port; give host:port, such as 127.0.0.1:8080\n"},
		"port in use": {[]string{"--dir", missing, "--addr", busy},
			"example: --addr " + busy + ": cannot listen: listen tcp " + busy + ": bind: address already in use\n"},
		"validation": {[]string{"--dir", missing, "--addr", "127.0.0.1:0", "--retry-max", "0"},
			"example: --retry-max must be positive, got 0s\n"},
		"non-empty directory": {[]string{"--dir", full, "--addr", "127.0.0.1:0"},
			"example: target directory " + full + " is not empty and the example did not create it (it has no .converge-example/): " +
				"choose another --dir, or pass --adopt to let the example add its files there (it never changes or removes the others)\n"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			code, stderr := runExample(t, c.args...)
			require.Equal(t, exitUsage, code, stderr)
			requireOnce(t, stderr, c.msg)
		})
	}
	requireAbsent(t, missing)
	require.Equal(t, []string{"mine"}, dirNames(t, full))
}

// A flag's environment variable is checked like the flag, and an error
// names the variable and the flag, once, with exit status 2. A value on
// the command line wins over the variable. The tests set the environment,
// so they do not run in parallel.
func TestEnvironmentErrors(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "target")
	args := []string{"--dir", dir, "--addr", "127.0.0.1:0"}
	t.Run("not a duration", func(t *testing.T) {
		t.Setenv(envPrefix+"REFRESH", "xyz")
		code, stderr := runExample(t, args...)
		require.Equal(t, exitUsage, code, stderr)
		require.Equal(t, "example: CONVERGE_EXAMPLE_REFRESH=\"xyz\": not a duration, such as 10s, 1m30s or 0 (sets --refresh)\n", stderr)
	})
	t.Run("not a bool", func(t *testing.T) {
		t.Setenv(envPrefix+"ADOPT", "maybe")
		code, stderr := runExample(t, args...)
		require.Equal(t, exitUsage, code, stderr)
		require.Equal(t, "example: CONVERGE_EXAMPLE_ADOPT=\"maybe\": not true or false (sets --adopt)\n", stderr)
	})
	t.Run("validation", func(t *testing.T) {
		t.Setenv(envPrefix+"RETRY_MAX", "0")
		code, stderr := runExample(t, args...)
		require.Equal(t, exitUsage, code, stderr)
		requireOnce(t, stderr, "example: --retry-max must be positive, got 0s (--retry-max is set by CONVERGE_EXAMPLE_RETRY_MAX=\"0\")\n")
	})
	t.Run("refused directory", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "f")
		require.NoError(t, os.WriteFile(file, nil, 0o644))
		t.Setenv(envPrefix+"DIR", file)
		code, stderr := runExample(t, "--addr", "127.0.0.1:0")
		require.Equal(t, exitUsage, code, stderr)
		requireOnce(t, stderr, fmt.Sprintf("example: target directory %s is not a directory; choose another --dir (--dir is set by CONVERGE_EXAMPLE_DIR=%q)\n", file, file))
	})
	t.Run("the command line wins", func(t *testing.T) {
		t.Setenv(envPrefix+"REFRESH", "xyz")
		code, stderr := runExample(t, append(args, "--refresh", "1s", "--prune", "-1s")...)
		require.Equal(t, exitUsage, code, stderr)
		require.Equal(t, "example: --prune must not be negative, got -1s\n", stderr)
	})
	requireAbsent(t, dir)
}

// --help lists every flag's environment variable and the exit-status rule.
func TestHelpListsEnvironmentAndExitStatus(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.Equal(t, exitOK, run(context.Background(), []string{"--help"}, &stdout, &stderr))
	require.Empty(t, stderr.String())
	help := stdout.String()
	flags := pflag.NewFlagSet("", pflag.ContinueOnError)
	newApp().RegisterFlags(flags)
	n := 0
	flags.VisitAll(func(f *pflag.Flag) {
		n++
		re := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(envName(f.Name)) + ` +--` + regexp.QuoteMeta(f.Name) + `$`)
		require.Regexp(t, re, help)
	})
	require.Equal(t, 8, n)
	for _, want := range []string{"CONVERGE_EXAMPLE_DIR", "CONVERGE_EXAMPLE_RETRY_MAX", "--retry-max", "Environment:", exitRule,
		"2  refused to start because of what it was given", "a port already in use", "1  any other failure"} {
		require.Contains(t, help, want)
	}
}

// A start failure that is not about the input exits 1, printed as it is;
// one that is exits 2, without the hive's wrapping.
func TestStartFailureStatus(t *testing.T) {
	other := errors.New("start hook: something broke")
	code, err := startFailureStatus(fmt.Errorf("hive: %w", other), map[string]string{"dir": `CONVERGE_EXAMPLE_DIR="x"`})
	require.Equal(t, exitFailure, code)
	require.EqualError(t, err, "hive: start hook: something broke")

	usage := fmt.Errorf("could not build: %w", refuse("dir", errors.New("target directory x is not a directory")))
	code, err = startFailureStatus(usage, nil)
	require.Equal(t, exitUsage, code)
	require.EqualError(t, err, "target directory x is not a directory")
	code, err = startFailureStatus(usage, map[string]string{"dir": `CONVERGE_EXAMPLE_DIR="x"`})
	require.Equal(t, exitUsage, code)
	require.EqualError(t, err, `target directory x is not a directory (--dir is set by CONVERGE_EXAMPLE_DIR="x")`)
}

package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// parseConfig builds the hive, parses args as main does and returns the
// config the hive provides.
func parseConfig(t *testing.T, args ...string) (config, error) {
	var cfg config
	app := newApp(cell.Invoke(func(c config) { cfg = c }))
	flags := pflag.NewFlagSet("test", pflag.ContinueOnError)
	app.RegisterFlags(flags)
	require.NoError(t, flags.Parse(args))
	err := app.Populate(hivetest.Logger(t))
	return cfg, err
}

func TestFlags(t *testing.T) {
	cfg, err := parseConfig(t)
	require.NoError(t, err)
	require.Equal(t, defaultConfig(), cfg)
	require.Equal(t, "127.0.0.1:8080", cfg.Addr)
	require.Equal(t, filepath.Join(os.TempDir(), "converge-example"), cfg.Dir)

	files := filepath.Join(t.TempDir(), "f.yaml")
	require.NoError(t, os.WriteFile(files, []byte("files: []\n"), 0o644))
	cfg, err = parseConfig(t, "--dir", "/srv/x", "--addr", "127.0.0.1:9999", "--files", files,
		"--refresh", "1s", "--prune", "2s", "--retry-max", "3s", "--adopt")
	require.NoError(t, err)
	require.Equal(t, config{Dir: "/srv/x", Addr: "127.0.0.1:9999", FilesPath: files,
		RefreshInterval: time.Second, PruneInterval: 2 * time.Second, RetryMax: 3 * time.Second, Adopt: true}, cfg)

	// The environment sets flags under the example's prefix only.
	t.Setenv("DIR", "/not/this")
	t.Setenv(envPrefix+"RETRY_MAX", "7s")
	cfg, err = parseConfig(t)
	require.NoError(t, err)
	require.Equal(t, defaultConfig().Dir, cfg.Dir)
	require.Equal(t, 7*time.Second, cfg.RetryMax)
}

func TestHelpAndBadFlags(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.Equal(t, exitOK, run(context.Background(), []string{"--help"}, &stdout, &stderr))
	for _, want := range []string{
		`--dir string`, `(default "` + filepath.Join(os.TempDir(), "converge-example") + `")`,
		`--addr string`, `(default "127.0.0.1:8080")`,
		`--files string`, `--refresh duration`, `--prune duration`, `(default 10s)`,
		`--retry-max duration`, `(default 5s)`, `--adopt`,
	} {
		require.Contains(t, stdout.String(), want)
	}
	require.Empty(t, stderr.String())

	cases := map[string]struct {
		args []string
		msg  string
	}{
		"unknown flag":     {[]string{"--nope"}, "unknown flag: --nope"},
		"single dash":      {[]string{"-dir", "x"}, "unknown shorthand flag"},
		"argument":         {[]string{"extra"}, `unexpected arguments: ["extra"]`},
		"negative prune":   {[]string{"--prune", "-1s"}, "--prune must not be negative"},
		"negative refresh": {[]string{"--refresh=-1s"}, "--refresh must not be negative"},
		"zero retry":       {[]string{"--retry-max", "0"}, "--retry-max must be positive"},
		"tiny refresh":     {[]string{"--refresh", "1ns"}, "--refresh must be 0 (never refresh) or at least 10ms, got 1ns"},
		"tiny prune":       {[]string{"--prune", "9ms"}, "--prune must be 0 (never prune) or at least 10ms, got 9ms"},
		"tiny retry":       {[]string{"--retry-max", "1ms"}, "--retry-max must be at least 10ms, got 1ms"},
		"empty dir":        {[]string{"--dir", ""}, "--dir must not be empty"},
		"not a duration":   {[]string{"--prune", "soon"}, `invalid argument "soon"`},
		"missing files":    {[]string{"--files", filepath.Join(t.TempDir(), "nope.yaml")}, "nope.yaml"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "target")
			args := append([]string{"--dir", dir, "--addr", "127.0.0.1:0"}, c.args...)
			var stdout, stderr bytes.Buffer
			require.Equal(t, exitUsage, run(context.Background(), args, &stdout, &stderr))
			require.Contains(t, stderr.String(), "example: ")
			require.Contains(t, stderr.String(), c.msg)
			require.Empty(t, stdout.String())
			requireAbsent(t, dir)
		})
	}
}

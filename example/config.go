package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
)

// config is the application's configuration. It is a hive cell.Config: the
// hive registers its flags (see Flags), parses them, and provides the
// result to every constructor that asks for a config. A flag can also be
// set in the environment, prefixed with envPrefix: CONVERGE_EXAMPLE_DIR,
// CONVERGE_EXAMPLE_RETRY_MAX, ...
//
// Fields match flags by name, ignoring case and dashes (RetryMax is
// --retry-max); the mapstructure tags name the others.
type config struct {
	Dir             string        // target directory
	Addr            string        // HTTP listen address
	FilesPath       string        `mapstructure:"files"`   // initial desired set; "" for the embedded files.yaml
	RefreshInterval time.Duration `mapstructure:"refresh"` // 0 disables refreshing
	PruneInterval   time.Duration `mapstructure:"prune"`   // 0 disables pruning
	RetryMax        time.Duration // longest backoff between retries
	Adopt           bool          // take over a non-empty directory the example did not create
}

// envPrefix prefixes the environment variables that set flags, so that a
// variable such as DIR in a user's environment is not taken for --dir.
const envPrefix = "CONVERGE_EXAMPLE_"

func defaultConfig() config {
	return config{
		Dir:             filepath.Join(os.TempDir(), "converge-example"),
		Addr:            "127.0.0.1:8080",
		RefreshInterval: 10 * time.Second,
		PruneInterval:   10 * time.Second,
		RetryMax:        5 * time.Second,
	}
}

// Flags implements cell.Flagger. def holds the defaults.
func (def config) Flags(flags *pflag.FlagSet) {
	flags.String("dir", def.Dir, "target directory the desired files are written to (created if missing; $TMPDIR is honoured)")
	flags.String("addr", def.Addr, "HTTP listen address, host:port")
	flags.String("files", def.FilesPath, "YAML file with the initial desired set (default: the embedded example/files.yaml)")
	flags.Duration("refresh", def.RefreshInterval, "check a file for drift once its status is this old (0 disables)")
	flags.Duration("prune", def.PruneInterval, "remove files the example wrote and no longer wants this often, starting once the initial set is loaded (0 disables)")
	flags.Duration("retry-max", def.RetryMax, "longest wait between retries of a failing file")
	flags.Bool("adopt", def.Adopt, "take over --dir even if it holds files the example did not write (they are never changed or removed)")
}

// usageError is a configuration the example refuses to run with. main
// exits with status 2 on one.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// validate checks the config when the hive is built, so a bad flag fails
// before anything starts.
func (cfg config) validate() error {
	switch {
	case cfg.Dir == "":
		return usageErrorf("--dir must not be empty")
	case cfg.Addr == "":
		return usageErrorf("--addr must not be empty")
	case cfg.RefreshInterval < 0:
		return usageErrorf("--refresh must not be negative, got %s", cfg.RefreshInterval)
	case cfg.PruneInterval < 0:
		return usageErrorf("--prune must not be negative, got %s", cfg.PruneInterval)
	case cfg.RetryMax <= 0:
		return usageErrorf("--retry-max must be positive, got %s", cfg.RetryMax)
	}
	return nil
}

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	TraceStdout     bool          // write the reconciler's spans to standard output
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
	flags.String("addr", def.Addr, "HTTP listen address, host:port (a warning unless it is a loopback address; the API always asks for its token)")
	flags.String("files", def.FilesPath, "YAML file with the initial desired set, at most 16 MiB (default: the embedded example/files.yaml)")
	flags.Duration("refresh", def.RefreshInterval, "check a file for drift once its status is this old (0 disables, else at least 10ms)")
	flags.Duration("prune", def.PruneInterval, "remove files the example wrote and no longer wants this often, starting once the initial set is loaded (0 disables, else at least 10ms)")
	flags.Duration("retry-max", def.RetryMax, "longest wait between retries of a failing file (at least 10ms)")
	flags.Bool("adopt", def.Adopt, "take over --dir even if it holds files the example did not write (they are never changed or removed)")
	flags.Bool("trace-stdout", def.TraceStdout, "write the reconciler's OpenTelemetry spans to standard output, one JSON object per span")
}

// usageError is input the example refuses to start with: a flag or
// environment variable value, a target directory it will not or cannot
// use, an address it cannot listen on. run exits with status 2 on one and
// prints it once; flag names the flag it is about ("dir"), if any, so run
// can name the environment variable that set it.
type usageError struct {
	flag string
	err  error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usageErrorf(flag, format string, args ...any) error {
	return &usageError{flag: flag, err: fmt.Errorf(format, args...)}
}

// refuse marks err, a failure to use the value of flag at start, as a
// usage error. nil stays nil.
func refuse(flag string, err error) error {
	if err == nil {
		return nil
	}
	return &usageError{flag: flag, err: err}
}

// minInterval is the shortest --refresh, --prune and --retry-max: shorter
// ones would keep a core busy for nothing.
const minInterval = 10 * time.Millisecond

// validate checks the config when the hive is built, so a bad flag fails
// before anything starts. (--dir, --addr and --files are checked by the
// constructors that use them, as the hive is built too.)
func (cfg config) validate() error {
	switch {
	case cfg.Dir == "":
		return usageErrorf("dir", "--dir must not be empty")
	case cfg.Addr == "":
		return usageErrorf("addr", "--addr must not be empty")
	}
	for _, d := range []struct {
		flag  string
		value time.Duration
		zero  string // what 0 means, if allowed
	}{
		{"refresh", cfg.RefreshInterval, "never refresh"},
		{"prune", cfg.PruneInterval, "never prune"},
		{"retry-max", cfg.RetryMax, ""},
	} {
		switch {
		case d.value == 0 && d.zero != "":
		case d.value < 0 && d.zero != "":
			return usageErrorf(d.flag, "--%s must not be negative, got %s", d.flag, d.value)
		case d.value <= 0:
			return usageErrorf(d.flag, "--%s must be positive, got %s", d.flag, d.value)
		case d.value < minInterval && d.zero != "":
			return usageErrorf(d.flag, "--%s must be 0 (%s) or at least %s, got %s", d.flag, d.zero, minInterval, d.value)
		case d.value < minInterval:
			return usageErrorf(d.flag, "--%s must be at least %s, got %s", d.flag, minInterval, d.value)
		}
	}
	return nil
}

// envName is the environment variable that sets flag: envPrefix and the
// flag's name in upper case, dashes as underscores, as the hive binds it.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyEnv sets every flag that was not given on the command line from its
// environment variable, if that is set and not empty (the hive, too, takes
// an empty variable as unset). A value the flag does not accept is an
// error naming the variable and the flag. It returns the flags set, mapped
// to their variables and values as `VAR="value"`.
func applyEnv(flags *pflag.FlagSet, lookup func(string) (string, bool)) (map[string]string, error) {
	var names []string
	flags.VisitAll(func(f *pflag.Flag) {
		if !f.Changed {
			names = append(names, f.Name)
		}
	})
	fromEnv := map[string]string{}
	for _, name := range names {
		variable := envName(name)
		value, ok := lookup(variable)
		if !ok || value == "" {
			continue
		}
		if err := flags.Set(name, value); err != nil {
			return nil, &usageError{flag: name, err: fmt.Errorf("%s=%q: %s (sets --%s)", variable, value, parseProblem(flags.Lookup(name), err), name)}
		}
		fromEnv[name] = fmt.Sprintf("%s=%q", variable, value)
	}
	return fromEnv, nil
}

// parseProblem says what is wrong with a value flag f did not accept.
func parseProblem(f *pflag.Flag, err error) string {
	switch f.Value.Type() {
	case "duration":
		return "not a duration, such as 10s, 1m30s or 0"
	case "bool":
		return "not true or false"
	}
	return err.Error()
}

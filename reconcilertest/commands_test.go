package reconcilertest_test

import (
	"bufio"
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cilium/hive/script"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconcilertest"
)

// scriptRunner runs script lines against a fixture's engine, one state for
// all of them.
type scriptRunner struct {
	t *testing.T
	e *script.Engine
	s *script.State
}

func newScriptRunner(t *testing.T, e *script.Engine) *scriptRunner {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("id: a\nvalue: \"1\"\nstatus: {kind: Pending}\n"), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	s, err := script.NewState(ctx, dir, nil)
	require.NoError(t, err)
	return &scriptRunner{t: t, e: e, s: s}
}

func (r *scriptRunner) run(line string) error {
	var log strings.Builder
	err := r.e.Execute(r.s, "test", bufio.NewReader(strings.NewReader(line+"\n")), &log)
	if err != nil {
		r.t.Logf("%s\n%s", log.String(), err)
	}
	return err
}

func TestCommandErrors(t *testing.T) {
	f := newFixture(t, nil)
	r := newScriptRunner(t, f.engine())
	require.NoError(t, r.run("hive start"))
	require.NoError(t, r.run("db/insert items a.yaml"))
	require.NoError(t, r.run("reconciler/wait --key=a"))

	for _, tc := range []struct{ line, err string }{
		{"reconciler/status nosuch", `no object with key "nosuch" in table "items"`},
		{"reconciler/wait --key=nosuch", `no object with key "nosuch"`},
		{"reconciler/status", "invalid usage: expected KEY [REGEXP]"},
		{"reconciler/status a '('", "bad regexp"},
		{"reconciler/status --kind=Nope a", `--kind: malformed status: unknown kind "Nope"`},
		{"reconciler/wait --timeout=soon", `invalid argument "soon" for "--timeout"`},
		{"reconciler/wait --timeout=-1s", "--timeout must be positive, got -1s"},
		{"reconciler/wait extra", "invalid usage: unexpected arguments"},
		{"reconciler/status --timeout=30ms --kind=Error a", "timed out after 30ms waiting for the status of \"a\" to match: a: Done"},
		{"reconciler/health --level=Great", `--level: unknown level "Great"`},
		{"reconciler/health '['", "bad regexp"},
		{"reconciler/health --timeout=30ms 'nothing like this'", "timed out after 30ms"},
		{"reconciler/target a", `invalid usage: "a" is not key=value`},
		{"reconciler/target a=1 a=2", `key "a" given twice`},
		{"reconciler/target --table --empty", "give only one of"},
		{"reconciler/target --timeout=30ms a=2", "waiting for the target to hold [a=2]: it holds [a=1]"},
		{"reconciler/target/set", "invalid usage"},
		{"reconciler/calls --op=frob", `--op: unknown operation "frob"`},
		{"reconciler/calls --min=1 --exactly=1", "give --min or --exactly, not both"},
		{"reconciler/calls --key=a --exactly=0", "1 matching call(s), more than the 0 expected"},
		{"reconciler/fault explode", `unknown fault mode "explode"`},
		{"reconciler/fault --prob=2 error", "--prob must be in (0, 1)"},
		{"reconciler/fault --seed=3 error", "--seed needs --prob"},
		{"reconciler/fault --duration=1s panic", "--duration applies to delay, retry-after and recheck"},
		{"reconciler/fault --op=prune --key=a error", "a prune has no key"},
		{"reconciler/fault error panic", "invalid usage"},
		{"reconciler/fault --after panic", "a panic cannot be injected after the operation"},
		{"reconciler/wait --name=zz", `no reconciler named "zz"; registered: ""`},
		{"reconciler/calls --via=both", `--via: want batch or single, got "both"`},
		{"reconciler/calls --in-flight --reset", "--reset forgets returned calls, not those in flight"},
		{"reconciler/calls --via=batch --min=1 --timeout=30ms", "timed out after 30ms waiting for calls (op \"\", key \"\", via \"batch\"): 0 matching call(s)"},
		{"reconciler/calls --in-flight --min=1 --timeout=30ms", "waiting for calls in flight (op"},
		{"reconciler/metrics 'nothing like this' --timeout=30ms", `no line matches "nothing like this" in:`},
		{"reconciler/metrics '('", "bad regexp"},
		{"reconciler/retries", `no "reconciler-retries" table in the hive's StateDB: include tables.Cell`},
		{"reconciler/wait-object", "invalid usage: expected one KEY"},
		{"reconciler/wait-object a b", "invalid usage: expected one KEY"},
		{"reconciler/wait-object --timeout=0s a", "--timeout must be positive"},
		{"reconciler/wait-object --timeout=30ms nosuch", `timed out after 30ms waiting for "nosuch" to appear in the table`},
		{"reconciler/pause now", "invalid usage: unexpected arguments"},
		{"reconciler/resume --timeout=-1s", "--timeout must be positive"},
		{"reconciler/save", "invalid usage: expected keys"},
		{"reconciler/save --delete a nosuch", `not in table "items": nosuch`},
		{"reconciler/put-back", "invalid usage: expected keys"},
		{"reconciler/put-back a", "not saved with reconciler/save: a"},
	} {
		err := r.run(tc.line)
		if assert.Error(t, err, tc.line) {
			assert.Contains(t, err.Error(), tc.err, tc.line)
		}
	}
	assert.Empty(t, f.faults.Faults(), "no bad fault line added a fault")
	require.NoError(t, r.run("reconciler/status --kind=Done a"), "a failed save --delete deleted nothing")
}

func TestCommandsNeedWhatTheyUse(t *testing.T) {
	// A subject with only the required fields: the commands that need a
	// Target, Faults or Health say so.
	f := newFixture(t, nil)
	bare := reconcilertest.NewRegistry()
	sub := newBareSubject(t, f)
	require.NoError(t, reconcilertest.Add(bare, sub))
	cmds := reconcilertest.ScriptCommands(bare)
	r := newScriptRunner(t, &script.Engine{Cmds: cmds})
	for _, tc := range []struct{ line, err string }{
		{"reconciler/prune", "neither Faults nor Target"},
		{"reconciler/calls", "neither Faults nor Target"},
		{"reconciler/target", "no Target or TargetReader"},
		{"reconciler/target/set a=1", "no Target or TargetReader"},
		{"reconciler/fault error", "no Faults"},
		{"reconciler/health", "no Health"},
		{"reconciler/metrics", "no Metrics"},
		{"reconciler/pause", "no Health in its Subject, so whether it paused cannot be seen"},
		{"reconciler/resume", "no Health in its Subject"},
	} {
		err := r.run(tc.line)
		if assert.Error(t, err, tc.line) {
			assert.Contains(t, err.Error(), tc.err, tc.line)
		}
	}
	require.NoError(t, r.run("reconciler/prune --no-wait"), "a prune can be asked for without seeing it")
	sub.Table = readOnly{sub.Table}
	require.NoError(t, reconcilertest.Add(bare, sub))
	assert.ErrorContains(t, r.run("reconciler/save a"), `table "items" of reconciler "" is read-only`)
	require.NoError(t, r.run("reconciler/pause --no-wait"), "a pause can be asked for without seeing it")
	require.NoError(t, r.run("reconciler/resume --no-wait"))

	empty := newScriptRunner(t, &script.Engine{Cmds: reconcilertest.ScriptCommands(reconcilertest.NewRegistry())})
	assert.ErrorContains(t, empty.run("reconciler/wait"), "no reconciler registered")

	assert.ErrorContains(t, reconcilertest.Add(bare, reconcilertest.Subject[*item]{Name: "x"}),
		`reconcilertest.Add("x"): Subject.DB must not be nil`)
}

func TestRetriesCommandErrors(t *testing.T) {
	f := newFixture(t, []string{"-tables"})
	r := newScriptRunner(t, f.engine())
	require.NoError(t, r.run("hive start"))
	require.NoError(t, r.run("db/insert items a.yaml"))
	require.NoError(t, r.run("reconciler/wait --key=a"))
	for _, tc := range []struct{ line, err string }{
		{"reconciler/retries '('", "bad regexp"},
		{"reconciler/retries a b", "invalid usage: expected at most one regexp"},
		{"reconciler/retries --timeout=30ms '^a: '", "timed out after 30ms waiting for a failing object to match: no failing objects"},
		{"reconciler/retries --timeout=0s", "--timeout must be positive"},
	} {
		err := r.run(tc.line)
		if assert.Error(t, err, tc.line) {
			assert.Contains(t, err.Error(), tc.err, tc.line)
		}
	}
	// Nothing fails: it prints nothing, and --absent holds at once.
	require.NoError(t, r.run("reconciler/retries"))
	require.NoError(t, r.run("reconciler/retries --absent --timeout=30ms"))
}

// readOnly hides that a table is a statedb.RWTable.
type readOnly struct{ statedb.Table[*item] }

// newBareSubject strips the fixture's (populated) reconciler to the
// required fields.
func newBareSubject(t *testing.T, f *fixture) reconcilertest.Subject[*item] {
	require.NotNil(t, f.last.Reconciler)
	return reconcilertest.Subject[*item]{DB: f.last.DB, Table: f.last.Table, Reconciler: f.last.Reconciler, GetStatus: f.last.GetStatus}
}

// TestHelpReadsAsSentences checks the usage that "help reconciler/" prints.
// help wraps each Detail entry on its own, starting it on a new line, so
// an entry must be one or more whole sentences (or a blank line, or an
// indented display after a sentence ending in ':'): an entry ending
// mid-sentence breaks the sentence across lines at a random place.
func TestHelpReadsAsSentences(t *testing.T) {
	cmds := reconcilertest.ScriptCommands(reconcilertest.NewRegistry())
	for _, name := range slices.Sorted(maps.Keys(cmds)) {
		u := cmds[name].Usage()
		assert.NotEmpty(t, u.Summary, name)
		assert.NotContains(t, u.Summary, "\n", name)
		assert.False(t, strings.HasSuffix(u.Summary, "."), "%s: a summary is a man page's NAME line, without a full stop", name)
		introduced := false // the last sentence ended in ':'
		for _, d := range u.Detail {
			switch {
			case d == "":
			case strings.HasPrefix(d, "  "):
				assert.True(t, introduced, "%s: the display line %q follows a sentence ending in ':'", name, d)
			default:
				first, _ := utf8.DecodeRuneInString(d)
				assert.False(t, unicode.IsLower(first), "%s: %q starts mid-sentence", name, d)
				assert.True(t, strings.HasSuffix(d, ".") || strings.HasSuffix(d, ":"), "%s: %q ends mid-sentence", name, d)
				introduced = strings.HasSuffix(d, ":")
			}
		}
	}

	// What help prints: each entry is a run of whole lines.
	const name = "reconciler/target/set"
	r := newScriptRunner(t, &script.Engine{Cmds: map[string]script.Cmd{"help": script.Help(), name: cmds[name]}})
	require.NoError(t, r.run("help "+name))
	out := r.s.Stdout()
	_, rest, ok := strings.Cut(out, "\n\n") // after the synopsis and summary
	require.True(t, ok, out)
	block, _, _ := strings.Cut(rest, "\n\n") // before the flags
	lines := strings.Split(block, "\n")
	detail := cmds[name].Usage().Detail
	require.NotEmpty(t, detail)
	for _, want := range detail {
		var got []string
		for len(lines) > 0 && len(strings.Join(got, " ")) < len(want) {
			got = append(got, strings.TrimPrefix(lines[0], "\t"))
			lines = lines[1:]
		}
		assert.Equal(t, want, strings.Join(got, " "), "in:\n%s", out)
	}
	assert.Empty(t, lines, "help printed more than the Detail, in:\n%s", out)
}

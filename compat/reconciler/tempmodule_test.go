package reconciler_test

import (
	"bytes"
	"context"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The tests in upstream_*_test.go build code written for the StateDB
// reconciler (its own example and test suite, from the module cache) in a
// temporary module that requires converge through a replace directive,
// with the StateDB reconciler's import path changed to this package's and
// nothing else. They need the go command and StateDB's module in the
// module cache, and no network: every module they use is in converge's
// module graph, whose checksums the temporary module copies from go.sum.

const (
	upstreamModule = "github.com/cilium/statedb"
	upstreamImport = "github.com/cilium/statedb/reconciler"
	compatImport   = "github.com/converge-go/converge/compat/reconciler"
	convergeModule = "github.com/converge-go/converge"
)

// toolchain is what building in a temporary module takes.
type toolchain struct {
	goCmd     string // the go command
	repo      string // the root directory of converge's module
	goVersion string // the go directive of converge's module
	upstream  string // the root directory of StateDB's module in the module cache
}

// needToolchain returns the toolchain, or skips the test when it cannot
// be had: under -short, without the go command, or without StateDB's
// module in the module cache. A go command that fails fails the test.
func needToolchain(t *testing.T) *toolchain {
	t.Helper()
	if testing.Short() {
		t.Skip("skipped with -short: builds code written for the StateDB reconciler in a temporary module with the go command")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("skipped: no go command: %v", err)
	}
	tc := &toolchain{goCmd: goCmd}
	query := func(args ...string) string {
		cmd := exec.Command(goCmd, args...)
		// As the module (or workspace) of this package is set up; only
		// flags from the environment are dropped.
		cmd.Env = append(os.Environ(), "GOFLAGS=")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return strings.TrimSpace(string(out))
	}
	gomod := query("env", "GOMOD")
	if gomod == "" || gomod == os.DevNull {
		t.Fatal("go env GOMOD: not inside converge's module")
	}
	tc.repo = filepath.Dir(gomod)
	tc.goVersion = query("list", "-m", "-f", "{{.GoVersion}}", convergeModule)
	tc.upstream = query("list", "-m", "-f", "{{.Dir}}", upstreamModule)
	if tc.upstream == "" {
		t.Skipf("skipped: %s is not in the module cache (go mod download fetches it)", upstreamModule)
	}
	return tc
}

// tempModule is a module in a temporary directory that requires converge
// from tc.repo.
type tempModule struct {
	tc  *toolchain
	dir string
}

// newModule writes the temporary module's go.mod and go.sum.
func (tc *toolchain) newModule(t *testing.T, name string) *tempModule {
	t.Helper()
	m := &tempModule{tc: tc, dir: t.TempDir()}
	gomod := fmt.Sprintf("module example.com/%s\n\ngo %s\n\nrequire %s v0.0.0\n\nreplace %s => %s\n",
		name, tc.goVersion, convergeModule, convergeModule, strconv.Quote(tc.repo))
	m.write(t, "go.mod", []byte(gomod))
	sum, err := os.ReadFile(filepath.Join(tc.repo, "go.sum"))
	if err != nil {
		t.Fatalf("reading converge's go.sum: %v", err)
	}
	m.write(t, "go.sum", sum)
	return m
}

// write writes data to the file at rel in the module, creating its
// directory.
func (m *tempModule) write(t *testing.T, rel string, data []byte) {
	t.Helper()
	path := filepath.Join(m.dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// copyFile copies the file at src to rel in the module, unchanged.
func (m *tempModule) copyFile(t *testing.T, src, rel string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	m.write(t, rel, data)
}

// copyRewritten copies the Go file at src to rel in the module with every
// import of the StateDB reconciler changed to import this package, and
// nothing else changed. It fails the test if src does not import the
// StateDB reconciler.
func (m *tempModule) copyRewritten(t *testing.T, src, rel string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	out, err := rewriteImport(src, data)
	if err != nil {
		t.Fatal(err)
	}
	m.write(t, rel, out)
}

// rewriteImport returns src with the path of every import of the StateDB
// reconciler replaced by this package's path; the rest of the bytes are
// kept as they are.
func rewriteImport(name string, src []byte) ([]byte, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ImportsOnly)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	last := 0
	for _, imp := range f.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		if err != nil || path != upstreamImport {
			continue
		}
		from, to := fset.Position(imp.Path.Pos()).Offset, fset.Position(imp.Path.End()).Offset
		out.Write(src[last:from])
		out.WriteString(strconv.Quote(compatImport))
		last = to
	}
	if last == 0 {
		return nil, fmt.Errorf("%s does not import %s", name, upstreamImport)
	}
	out.Write(src[last:])
	return out.Bytes(), nil
}

// goCommand runs the go command in the module and returns its combined
// output. It is stopped after timeout, or earlier if the test's deadline
// comes first.
func (m *tempModule) goCommand(t *testing.T, timeout time.Duration, args ...string) (string, error) {
	t.Helper()
	if deadline, ok := t.Deadline(); ok {
		timeout = min(timeout, time.Until(deadline)-10*time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, m.tc.goCmd, args...)
	cmd.Dir = m.dir
	// Outside any workspace; the go command may add the requirements the
	// copied code imports (all in converge's module graph) to go.mod.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("go %s: %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	if ctx.Err() != nil {
		err = fmt.Errorf("go %s: stopped after %v: %w", strings.Join(args, " "), timeout, err)
	}
	return string(out), err
}

// mustGo is goCommand failing the test, with the command's output, if the
// command fails.
func (m *tempModule) mustGo(t *testing.T, timeout time.Duration, args ...string) string {
	t.Helper()
	out, err := m.goCommand(t, timeout, args...)
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), m.dir, err, out)
	}
	return out
}

// goFiles returns the names of the files in dir matching pattern, sorted.
func goFiles(t *testing.T, dir, pattern string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		names[i] = filepath.Base(n)
	}
	slices.Sort(names)
	return names
}

// Package modgraph checks what a user of converge downloads: a module that
// imports the core packages has none of the modules of the adapters, the
// example or the benchmarks in its module graph (`go list -m all`), and a
// module that imports an adapter has that adapter's dependencies and none
// of the others', and a module that imports the core packages resolves no
// module above what one importing StateDB's reconciler resolves, but
// converge's direct requirements (statedb_test.go). Each test builds a
// fresh module in a temporary directory that requires the repository's
// modules through replace directives, as a user with a clone does.
//
// The tests run the go command, which reads the module cache and, for what
// is not in it, the module proxy (GOPROXY); go test -short skips them.
//
// To add an adapter as a module of its own:
// give its directory a go.mod that requires the core module with a replace
// (see metrics/prometheus/go.mod), add the directory to go.work, and add a
// line to adapters below with the modules it should bring.
package modgraph

import (
	"bytes"
	"context"
	"fmt"
	"go/version"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

const core = "github.com/converge-go/converge"

// corePackages are the packages of the core module a user imports.
var corePackages = []string{
	core + "/index",
	core + "/metrics",
	core + "/reconciler",
	core + "/reconcilertest",
	core + "/status",
	core + "/tracing",
}

// Module path prefixes that no user of the core packages may get: the
// Prometheus adapter's, the benchmarks' plotting and OpenTelemetry's.
var (
	prometheusModules = []string{"github.com/prometheus/"}
	plottingModules   = []string{
		"gonum.org/", "codeberg.org/", "github.com/go-pdf/", "github.com/go-fonts/", "github.com/go-latex/",
		"git.sr.ht/~sbinet/", "github.com/ajstarks/", "github.com/golang/freetype", "golang.org/x/image",
	}
	otelModules = []string{"go.opentelemetry.io/"}
)

// adapters are the modules beside the core that a user may import: their
// directory, a package to import, the module path prefixes they must bring
// and those they must not.
var adapters = []struct {
	dir     string
	pkg     string
	brings  []string
	without [][]string
}{
	{
		dir:     "metrics/prometheus",
		pkg:     core + "/metrics/prometheus",
		brings:  []string{"github.com/prometheus/client_golang", "github.com/prometheus/client_model"},
		without: [][]string{plottingModules, otelModules},
	},
	{
		dir:     "tracing/otel",
		pkg:     core + "/tracing/otel",
		brings:  []string{"go.opentelemetry.io/otel ", "go.opentelemetry.io/otel/trace "},
		without: [][]string{prometheusModules, plottingModules},
	},
}

func TestCoreModuleGraph(t *testing.T) {
	root := repoRoot(t)
	mods := moduleGraph(t, root, corePackages, nil)
	t.Logf("go list -m all of a module importing %s:\n%s", strings.Join(corePackages, ", "), strings.Join(mods, "\n"))
	for _, forbidden := range [][]string{prometheusModules, plottingModules, otelModules} {
		assertNone(t, mods, forbidden)
	}
	assertHas(t, mods, []string{"github.com/cilium/statedb v0.9.4", "github.com/cilium/hive v1.0.4"})
}

func TestAdapterModuleGraphs(t *testing.T) {
	root := repoRoot(t)
	for _, a := range adapters {
		t.Run(a.dir, func(t *testing.T) {
			mods := moduleGraph(t, root, []string{a.pkg}, []string{a.dir})
			t.Logf("go list -m all of a module importing %s:\n%s", a.pkg, strings.Join(mods, "\n"))
			assertHas(t, mods, a.brings)
			for _, forbidden := range a.without {
				assertNone(t, mods, forbidden)
			}
		})
	}
}

// The workspace (go.work) lists every module of the repository, so that the
// commands run from its root (go run ./example, go run ./benchmarks) and CI,
// which takes the modules from it, see them all; and each module's go.mod
// replaces the core module by its directory.
func TestWorkspaceListsEveryModule(t *testing.T) {
	root := repoRoot(t)
	var found []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			found = append(found, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	used := workspaceUses(read(t, filepath.Join(root, "go.work")))
	slices.Sort(found)
	slices.Sort(used)
	if !slices.Equal(found, used) {
		t.Errorf("go.work uses %q, but the modules of the repository are %q", used, found)
	}
	for _, dir := range found {
		if dir == "." {
			continue
		}
		gomod, err := os.ReadFile(filepath.Join(root, dir, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		back, err := filepath.Rel(filepath.Join(root, dir), root)
		if err != nil {
			t.Fatal(err)
		}
		want := "replace " + core + " => " + filepath.ToSlash(back)
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(want) + `$`).Match(gomod) {
			t.Errorf("%s/go.mod lacks %q", dir, want)
		}
	}
}

// Tests run from the root and from each module's directory use the
// workspace, whose build list takes the highest version any module asks
// for. They test what each module's users get only if every package they
// build comes from the version the module selects alone: one version of
// each dependency across the repository.
//
// There are two exceptions, which the test logs. A version that needs a
// newer Go than the module asks for: a module does not raise its users' Go
// for a dependency another module needs (the core stays on Go 1.25, which
// README promises, while the OpenTelemetry SDK of tracing/otel needs
// golang.org/x/sys v0.48.0 and with it Go 1.26). And a module that a
// library (the core, an adapter) requires only indirectly: a library asks
// for the lowest versions it needs (TestCoreGraphNoHeavierThanStateDB), so
// that importing it raises nothing in its users' builds, and the workspace
// raises them to what the adapters' dependencies need. CI builds each
// module alone at its own versions (GOWORK=off go build ./...).
func TestWorkspaceBuildsWhatEachModuleBuilds(t *testing.T) {
	libraries := map[string]bool{".": true}
	for _, a := range adapters {
		libraries[a.dir] = true
	}
	root := repoRoot(t)
	gowork := filepath.Join(root, "go.work")
	for _, dir := range workspaceUses(read(t, gowork)) {
		t.Run(dir, func(t *testing.T) {
			moduleDir := filepath.Join(root, dir)
			alone := buildModules(t, moduleDir, "off")
			inWorkspace := buildModules(t, moduleDir, gowork)
			gomod := read(t, filepath.Join(moduleDir, "go.mod"))
			own := goDirective(gomod)
			for path, v := range alone {
				if path == core || strings.HasPrefix(path, core+"/") {
					continue // the workspace's own, replaced by their directories alone
				}
				w := inWorkspace[path]
				if w == v {
					continue
				}
				if need := moduleGoVersion(t, moduleDir, path, w); version.Compare("go"+need, "go"+own) > 0 {
					t.Logf("%s builds %s %s alone but %s in the workspace, which needs Go %s, above the module's %s",
						dir, path, v, w, need, own)
					continue
				}
				if _, direct := directRequirements(gomod)[path]; libraries[dir] && !direct {
					t.Logf("%s, a library, builds %s %s alone, the lowest it needs, but %s in the workspace, which another module needs",
						dir, path, v, w)
					continue
				}
				t.Errorf("%s builds %s %s alone but %s in the workspace: make the modules of go.work require one version of it (go get it at the higher one in the modules that require less, then go mod tidy)",
					dir, path, v, w)
			}
		})
	}
}

// goDirective returns the version of the go directive of a go.mod file.
func goDirective(gomod string) string {
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(gomod)
	if m == nil {
		return ""
	}
	return m[1]
}

// moduleGoVersion returns the version of the go directive of module path
// at version v, as the go command run in dir finds it.
func moduleGoVersion(t *testing.T, dir, path, v string) string {
	t.Helper()
	return strings.TrimSpace(goCommand(t, dir, []string{"GOWORK=off", "GOFLAGS=-mod=mod"}, "list", "-m", "-f", "{{.GoVersion}}", path+"@"+v))
}

// buildModules returns the version of each module that provides a package
// to the packages of the module in dir or their tests, with GOWORK set to
// gowork.
func buildModules(t *testing.T, dir, gowork string) map[string]string {
	t.Helper()
	out := goCommand(t, dir, []string{"GOWORK=" + gowork}, "list", "-deps", "-test", "-f", "{{with .Module}}{{.Path}} {{.Version}}{{end}}", "./...")
	mods := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		path, version, _ := strings.Cut(line, " ")
		mods[path] = version
	}
	return mods
}

// workspaceUses returns the directories of the use directives of a go.work
// file, cleaned, with forward slashes.
func workspaceUses(gowork string) []string {
	var dirs []string
	inBlock := false
	for _, line := range strings.Split(gowork, "\n") {
		line, _, _ = strings.Cut(line, "//")
		fields := strings.Fields(line)
		switch {
		case inBlock && len(fields) == 1 && fields[0] == ")":
			inBlock = false
		case inBlock && len(fields) == 1:
			dirs = append(dirs, fields[0])
		case len(fields) == 2 && fields[0] == "use" && fields[1] == "(":
			inBlock = true
		case len(fields) == 2 && fields[0] == "use":
			dirs = append(dirs, fields[1])
		}
	}
	for i, d := range dirs {
		dirs[i] = filepath.ToSlash(filepath.Clean(strings.Trim(d, `"`)))
	}
	return dirs
}

// moduleGraph creates a module that imports pkgs and requires the core
// module and the modules in dirs (relative to root) at v0.0.0, replaced by
// their directories, and returns its `go list -m all`.
func moduleGraph(t *testing.T, root string, pkgs, dirs []string) []string {
	t.Helper()
	var src strings.Builder
	src.WriteString("package main\n\nimport (\n")
	for _, p := range pkgs {
		src.WriteString("\t_ \"" + p + "\"\n")
	}
	src.WriteString(")\n\nfunc main() {}\n")

	gomod := read(t, filepath.Join(root, "go.mod"))
	goVersion := regexp.MustCompile(`(?m)^go \S+$`).FindString(gomod)
	mod := "module example.com/user\n\n" + goVersion + "\n\nrequire " + core + " v0.0.0\n\nreplace " + core + " => " + root + "\n"
	// Every checksum the graph needs is in the go.sum of one of the
	// modules: no checksum database lookup.
	sums := read(t, filepath.Join(root, "go.sum"))
	for _, dir := range dirs {
		m := read(t, filepath.Join(root, dir, "go.mod"))
		path, _, _ := strings.Cut(strings.TrimPrefix(m, "module "), "\n")
		mod += "\nrequire " + path + " v0.0.0\n\nreplace " + path + " => " + filepath.Join(root, dir) + "\n"
		sums += read(t, filepath.Join(root, dir, "go.sum"))
	}
	dir := t.TempDir()
	write(t, filepath.Join(dir, "main.go"), src.String())
	write(t, filepath.Join(dir, "go.mod"), mod)
	write(t, filepath.Join(dir, "go.sum"), sums)

	env := []string{"GOFLAGS=-mod=mod", "GOWORK=off"}
	// As a user would: the program builds, and go mod tidy keeps what it
	// needs.
	goCommand(t, dir, env, "build", "-o", filepath.Join(dir, "prog"), ".")
	goCommand(t, dir, env, "mod", "tidy")
	return strings.Split(strings.TrimSpace(goCommand(t, dir, env, "list", "-m", "all")), "\n")
}

// goCommand runs the go command in dir with the environment plus env, and
// returns its standard output. It skips the test under -short and when
// there is no go command, and fails it if the command fails or takes more
// than two minutes.
func goCommand(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	out, err := tryGoCommand(t, dir, env, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tryGoCommand is goCommand returning the command's failure, with its
// standard error, instead of failing the test.
func tryGoCommand(t *testing.T, dir string, env []string, args ...string) (string, error) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test runs the go command, which may download modules through GOPROXY")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	deadline := time.Now().Add(2 * time.Minute)
	if d, ok := t.Deadline(); ok && d.Add(-10*time.Second).Before(deadline) {
		deadline = d.Add(-10 * time.Second)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s in %s: %v\n%s%s", strings.Join(args, " "), dir, err, stderr.Bytes(), stdout.Bytes())
	}
	return stdout.String(), nil
}

// assertNone fails if a module of mods has a path starting with one of
// prefixes.
func assertNone(t *testing.T, mods, prefixes []string) {
	t.Helper()
	for _, m := range mods {
		for _, p := range prefixes {
			if strings.HasPrefix(m, p) {
				t.Errorf("the module graph has %s", m)
			}
		}
	}
}

// assertHas fails unless, for each of want, a module of mods starts with it.
func assertHas(t *testing.T, mods, want []string) {
	t.Helper()
	for _, w := range want {
		if !slices.ContainsFunc(mods, func(m string) bool { return strings.HasPrefix(m, w) }) {
			t.Errorf("the module graph lacks %s", w)
		}
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

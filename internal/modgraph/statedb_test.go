package modgraph

import (
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// statedbReconciler is the package a user of StateDB's own reconciler
// imports; converge's core packages replace it.
const statedbReconciler = "github.com/cilium/statedb/reconciler"

// switchPackages are the core packages a user switching from StateDB's
// reconciler imports.
var switchPackages = []string{core + "/index", core + "/metrics", core + "/reconciler", core + "/status"}

// A library asks for the lowest versions it needs: a module that imports
// the core packages resolves no module to a higher version than the same
// module importing StateDB's reconciler does, and brings no module that one
// does not, but for converge's own direct requirements (go.mod's lines
// without "// indirect"), which it may ask for at versions of its own.
// Otherwise switching to converge raises modules in a user's build, which
// a program with pins of its own (Cilium) then has to lower again.
func TestCoreGraphNoHeavierThanStateDB(t *testing.T) {
	root := repoRoot(t)
	gomod := read(t, filepath.Join(root, "go.mod"))
	direct := directRequirements(gomod)
	statedbVersion, ok := direct["github.com/cilium/statedb"]
	if !ok {
		t.Fatal("go.mod does not require github.com/cilium/statedb")
	}
	goLine := regexp.MustCompile(`(?m)^go \S+$`).FindString(gomod)
	sums := read(t, filepath.Join(root, "go.sum"))

	converge := tidyGraph(t, switchPackages,
		"require "+core+" v0.0.0\n\nreplace "+core+" => "+root+"\n", goLine, sums)
	upstream := tidyGraph(t, []string{statedbReconciler},
		"require github.com/cilium/statedb "+statedbVersion+"\n", goLine, sums)
	t.Logf("go list -m all of a module importing %s:\n%s", strings.Join(switchPackages, ", "), strings.Join(converge, "\n"))
	t.Logf("go list -m all of a module importing %s:\n%s", statedbReconciler, strings.Join(upstream, "\n"))

	theirs, ours := versions(upstream[1:]), versions(converge[1:]) // [0] is the module itself
	for _, path := range slices.Sorted(maps.Keys(ours)) {
		v := ours[path]
		if path == core {
			continue
		}
		if _, ok := direct[path]; ok {
			continue
		}
		w, ok := theirs[path]
		switch {
		case !ok:
			t.Errorf("importing converge brings %s %s, which importing StateDB's reconciler does not", path, v)
		case compareSemver(v, w) > 0:
			t.Errorf("importing converge resolves %s to %s, StateDB's reconciler to %s: lower the requirement "+
				"(go get %s@%s in the module that raises it, then go mod tidy; go mod graph | grep %s@%s says which does)", path, v, w, path, w, path, v)
		}
	}
}

// directRequirements returns the modules a go.mod file requires without
// "// indirect", and their versions.
func directRequirements(gomod string) map[string]string {
	reqs := map[string]string{}
	inBlock := false
	for _, line := range strings.Split(gomod, "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) == 2 && fields[0] == "require" && fields[1] == "(":
			inBlock = true
			continue
		case inBlock && len(fields) == 1 && fields[0] == ")":
			inBlock = false
			continue
		case len(fields) >= 3 && fields[0] == "require" && !inBlock:
			fields = fields[1:]
		case !inBlock:
			continue
		}
		if len(fields) >= 2 && !strings.Contains(line, "// indirect") {
			reqs[fields[0]] = fields[1]
		}
	}
	return reqs
}

// tidyGraph creates a module that imports pkgs with the requirements reqs,
// tidies it as a user would and returns its `go list -m all`, the module
// itself first. It reads only the module cache if that has what the graph
// needs, else the module proxy; it skips the test if neither has it.
func tidyGraph(t *testing.T, pkgs []string, reqs, goLine, sums string) []string {
	t.Helper()
	var src strings.Builder
	src.WriteString("package main\n\nimport (\n")
	for _, p := range pkgs {
		fmt.Fprintf(&src, "\t_ %q\n", p)
	}
	src.WriteString(")\n\nfunc main() {}\n")
	dir := t.TempDir()
	write(t, filepath.Join(dir, "main.go"), src.String())
	write(t, filepath.Join(dir, "go.mod"), "module example.com/user\n\n"+goLine+"\n\n"+reqs)
	write(t, filepath.Join(dir, "go.sum"), sums)

	env := []string{"GOFLAGS=-mod=mod", "GOWORK=off", "GOPROXY=off"}
	if _, err := tryGoCommand(t, dir, env, "mod", "tidy"); err != nil {
		// Something the graph needs is not in the module cache: once more
		// with the module proxy, which fills the cache for the next run.
		proxy := strings.TrimSpace(goCommand(t, dir, []string{"GOWORK=off"}, "env", "GOPROXY"))
		if proxy == "off" {
			t.Skipf("GOPROXY=off and the module cache lacks modules the graph needs: %v", err)
		}
		env[len(env)-1] = "GOPROXY=" + proxy
		if _, err := tryGoCommand(t, dir, env, "mod", "tidy"); err != nil {
			if offline(err) {
				t.Skipf("the module cache lacks modules the graph needs and the module proxy cannot be reached: %v", err)
			}
			t.Fatal(err)
		}
	}
	// -e: a module of the graph whose .info is not in the cache (only its
	// go.mod was needed) is listed with an error, at the version selected.
	out := goCommand(t, dir, env, "list", "-m", "-e", "-f", "{{.Path}} {{.Version}}", "all")
	return strings.Split(strings.TrimSpace(out), "\n")
}

// offline reports whether err, from the go command, says that the module
// proxy could not be reached.
func offline(err error) bool {
	for _, s := range []string{"dial tcp", "no such host", "connection refused", "i/o timeout", "network is unreachable", "proxyconnect", "TLS handshake timeout"} {
		if strings.Contains(err.Error(), s) {
			return true
		}
	}
	return false
}

// versions maps the paths of `go list -m -f '{{.Path}} {{.Version}}'`
// lines to their versions.
func versions(lines []string) map[string]string {
	m := map[string]string{}
	for _, l := range lines {
		path, v, _ := strings.Cut(l, " ")
		m[path] = v
	}
	return m
}

// compareSemver compares two module versions (vMAJOR.MINOR.PATCH with an
// optional pre-release, pseudo-versions included) by semantic versioning's
// precedence: -1, 0 or +1.
func compareSemver(a, b string) int {
	core := func(v string) (nums [3]int, pre string) {
		v = strings.TrimPrefix(v, "v")
		v, _, _ = strings.Cut(v, "+")
		v, pre, _ = strings.Cut(v, "-")
		for i, p := range strings.SplitN(v, ".", 3) {
			nums[i], _ = strconv.Atoi(p)
		}
		return nums, pre
	}
	an, ap := core(a)
	bn, bp := core(b)
	for i := range an {
		if c := cmpInt(an[i], bn[i]); c != 0 {
			return c
		}
	}
	switch {
	case ap == bp:
		return 0
	case ap == "":
		return 1
	case bp == "":
		return -1
	}
	as, bs := strings.Split(ap, "."), strings.Split(bp, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		x, xerr := strconv.Atoi(as[i])
		y, yerr := strconv.Atoi(bs[i])
		var c int
		switch {
		case xerr == nil && yerr == nil:
			c = cmpInt(x, y)
		case xerr == nil:
			c = -1 // numeric identifiers have lower precedence
		case yerr == nil:
			c = 1
		default:
			c = strings.Compare(as[i], bs[i])
		}
		if c != 0 {
			return c
		}
	}
	return cmpInt(len(as), len(bs))
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestCompareSemver(t *testing.T) {
	ordered := []string{
		"v0.0.0-20231206192017-f3f8817b8deb", "v0.0.0-20240119083558-1b970713d09a", "v0.4.0",
		"v0.14.0", "v0.17.0", "v1.0.0-rc.1", "v1.0.0-rc.2", "v1.0.0", "v1.2.1-0.20180830191138-d8f796af33cc", "v1.2.1", "v1.10.0",
	}
	for i, a := range ordered {
		for j, b := range ordered {
			if got, want := compareSemver(a, b), cmpInt(i, j); got != want {
				t.Errorf("compareSemver(%s, %s) = %d, want %d", a, b, got, want)
			}
		}
	}
}

func TestDirectRequirements(t *testing.T) {
	got := directRequirements("module m\n\ngo 1.25.0\n\nrequire a.example v1.0.0\n\nrequire (\n\tb.example v0.2.0\n\tc.example v0.3.0 // indirect\n)\n")
	want := map[string]string{"a.example": "v1.0.0", "b.example": "v0.2.0"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("directRequirements = %v, want %v", got, want)
	}
}

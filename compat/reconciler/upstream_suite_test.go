package reconciler_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The StateDB reconciler's test files (reconciler/*_test.go of StateDB
// v0.9.4), by what TestUpstreamSuite does with them.
var (
	// Black-box tests (package reconciler_test): run as they are, with the
	// import path changed, with their testdata.
	upstreamPortedTests = []string{"multi_test.go", "progress_test.go", "script_test.go"}

	// Tests of the StateDB reconciler's unexported code (package
	// reconciler): not run. retries_test.go tests its private retry queue
	// and backoff, which converge does not have; status_test.go reads
	// unexported fields of StatusSet and sets Status.Error to a *string.
	// status_upstream_test.go restates what of status_test.go holds for
	// converge's statuses; docs/migration.md lists the rest.
	upstreamInternalTests = []string{"retries_test.go", "status_test.go"}
)

// TestUpstreamSuite runs the StateDB reconciler's own test suite against
// this package: its black-box test files and their testdata are copied
// into a temporary module with the import path changed and nothing else,
// and run there with go test -race. It fails with go test's output if any
// test fails or does not run.
func TestUpstreamSuite(t *testing.T) {
	tc := needToolchain(t)
	src := filepath.Join(tc.upstream, "reconciler")
	require.ElementsMatch(t, append(slices.Clone(upstreamPortedTests), upstreamInternalTests...), goFiles(t, src, "*_test.go"),
		"every test file of the StateDB reconciler is either run or accounted for")

	m := tc.newModule(t, "upstreamsuite")
	var want []string // the tests that must pass
	for _, f := range upstreamPortedTests {
		m.copyRewritten(t, filepath.Join(src, f), "reconciler/"+f)
		want = append(want, testNames(t, filepath.Join(src, f))...)
	}
	scripts := goFiles(t, filepath.Join(src, "testdata"), "*.txtar")
	require.NotEmpty(t, scripts)
	for _, f := range scripts {
		m.copyFile(t, filepath.Join(src, "testdata", f), "reconciler/testdata/"+f)
		want = append(want, "TestScript/"+f)
	}

	args := []string{"test", "-count=1", "-v", "-timeout=4m"}
	if cgo := strings.TrimSpace(m.mustGo(t, time.Minute, "env", "CGO_ENABLED")); cgo == "1" {
		args = append(args, "-race")
	} else {
		t.Log("cgo is off: running the suite without -race")
	}
	out, err := m.goCommand(t, 6*time.Minute, append(args, "./reconciler")...)
	if err != nil {
		t.Fatalf("the StateDB reconciler's suite failed against %s: %v\n%s", compatImport, err, out)
	}
	for _, name := range want {
		assert.Regexp(t, "(?m)^\\s*--- PASS: "+regexp.QuoteMeta(name)+" ", out, "%s passed", name)
	}
	t.Logf("passed: %s", strings.Join(want, ", "))
}

// testNames returns the names of the top-level tests in the Go file at
// path.
func testNames(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, match := range regexp.MustCompile(`(?m)^func (Test\w*)\(t \*testing\.T\)`).FindAllSubmatch(data, -1) {
		names = append(names, string(match[1]))
	}
	if len(names) == 0 {
		t.Fatal(fmt.Errorf("no tests in %s", path))
	}
	return names
}

package reconciler_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUpstreamExample builds and vets the StateDB reconciler's own example
// program (reconciler/example of StateDB v0.9.4, a memo store served over
// HTTP) and testdata/agent, an agent written for the StateDB reconciler
// that uses every name of it converge honours (a no-op Reconciler of its
// own included), against this package, with nothing changed but the
// import path. The agent is also built as it is, against the StateDB
// reconciler, to show that it is code for it. Where it can be done safely
// the example is then run (see runExample).
func TestUpstreamExample(t *testing.T) {
	tc := needToolchain(t)
	m := tc.newModule(t, "upstreamexample")

	example := filepath.Join(tc.upstream, "reconciler", "example")
	files := goFiles(t, example, "*.go")
	require.NotEmpty(t, files, "the StateDB reconciler's example in %s", example)
	for _, f := range files {
		m.copyRewritten(t, filepath.Join(example, f), "example/"+f)
	}
	m.copyRewritten(t, filepath.Join("testdata", "agent", "agent.go"), "agent/agent.go")
	m.copyFile(t, filepath.Join("testdata", "agent", "agent.go"), "agentupstream/agent.go")

	var flags []string
	if raceEnabled {
		flags = append(flags, "-race")
	}
	bin := filepath.Join(t.TempDir(), "example")
	m.mustGo(t, 5*time.Minute, append(append([]string{"build"}, flags...), "-o", bin, "./example")...)
	m.mustGo(t, 5*time.Minute, append(append([]string{"build"}, flags...), "./agent", "./agentupstream")...)
	m.mustGo(t, 5*time.Minute, "vet", "./...")

	// The copies use this package, and nothing of the StateDB reconciler.
	deps := strings.Fields(m.mustGo(t, time.Minute, "list", "-deps", "./example", "./agent"))
	assert.Contains(t, deps, compatImport)
	assert.NotContains(t, deps, upstreamImport)
	deps = strings.Fields(m.mustGo(t, time.Minute, "list", "-deps", "./agentupstream"))
	assert.Contains(t, deps, upstreamImport)
	assert.NotContains(t, deps, compatImport)

	t.Run("run", func(t *testing.T) { runExample(t, bin) })
}

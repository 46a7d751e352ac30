package reconcilertest

import (
	"os"
	"strings"
	"testing"
)

// Every fault mode is in reconciler/fault's usage, in the command list of
// the package documentation and in docs/testing.md (recheck was missing).
func TestEveryFaultModeIsDocumented(t *testing.T) {
	usage := faultCmd(NewRegistry()).Usage()
	docs := map[string]string{"the usage": usage.Args + " " + strings.Join(usage.Detail, " ")}
	for _, file := range []string{"doc.go", "../docs/testing.md"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, "reconciler/fault [MODE|clear]") {
				docs[file] = line
			}
		}
		if docs[file] == "" {
			t.Errorf("%s has no reconciler/fault [MODE|clear] line", file)
		}
	}
	for mode, name := range modeNames {
		if name == "" {
			continue
		}
		for where, text := range docs {
			if !strings.Contains(text, name) {
				t.Errorf("%s does not name mode %s (%s)", where, name, Mode(mode))
			}
		}
	}
}

// Package readme checks the README's Use example: the Go block after the
// marker <!-- use-example --> must build, pass go vet and print, when run,
// the block after <!-- use-output -->.
package readme

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const (
	exampleMarker = "<!-- use-example"
	outputMarker  = "<!-- use-output"
)

// fenced returns the body of the first fenced block (```lang ... ```) after
// marker in text, and the line of text on which the body starts.
func fenced(t *testing.T, text, marker, lang string) (body string, line int) {
	t.Helper()
	at := strings.Index(text, marker)
	if at < 0 {
		t.Fatalf("README.md has no %q marker", marker+" -->")
	}
	m := regexp.MustCompile("(?s)\n```" + lang + "\n(.*?\n)```\n").FindStringSubmatchIndex(text[at:])
	if m == nil {
		t.Fatalf("README.md has no ```%s block after %q", lang, marker+" -->")
	}
	start := at + m[2]
	return text[start : at+m[3]], strings.Count(text[:start], "\n") + 1
}

// requires returns the require directives of a go.mod file, so that the
// example module selects exactly the versions the repository tests with.
func requires(t *testing.T, gomod string) string {
	t.Helper()
	var b strings.Builder
	inBlock := false
	for _, line := range strings.Split(gomod, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case inBlock:
			b.WriteString(line + "\n")
			inBlock = trimmed != ")"
		case strings.HasPrefix(trimmed, "require ("):
			b.WriteString(line + "\n")
			inBlock = true
		case strings.HasPrefix(trimmed, "require "):
			b.WriteString(line + "\n")
		}
	}
	if b.Len() == 0 {
		t.Fatal("go.mod has no require directive")
	}
	return b.String()
}

func TestUseExample(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go tool is not on PATH")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	readme, gomod, gosum := read("README.md"), read("go.mod"), read("go.sum")
	program, line := fenced(t, readme, exampleMarker, "go")
	want, _ := fenced(t, readme, outputMarker, "")
	module, _, _ := strings.Cut(strings.TrimPrefix(gomod, "module "), "\n")
	goVersion := regexp.MustCompile(`(?m)^go \S+$`).FindString(gomod)

	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("main.go", program)
	write("go.sum", gosum)
	write("go.mod", "module example.com/readme\n\n"+goVersion+"\n\n"+
		"require "+module+" v0.0.0\n\n"+
		requires(t, gomod)+"\n"+
		"replace "+module+" => "+root+"\n")

	// Bound everything by the test's deadline, less time to report.
	deadline := time.Now().Add(5 * time.Minute)
	if d, ok := t.Deadline(); ok && d.Add(-30*time.Second).Before(deadline) {
		deadline = d.Add(-30 * time.Second)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()

	// Network-free: every dependency is the repository's own and already in
	// the module cache.
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\n%s%s\nmain.go is README.md's Use example: its line 1 is README.md's line %d.",
				filepath.Base(name), strings.Join(args, " "), err, stderr.Bytes(), stdout.Bytes(), line)
		}
		return stdout.String()
	}
	run(goTool, "build", "-o", "example", ".")
	run(goTool, "vet", ".")

	runCtx, cancelRun := context.WithTimeout(ctx, time.Minute)
	defer cancelRun()
	cmd := exec.CommandContext(runCtx, filepath.Join(dir, "example"))
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("running README.md's Use example: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.Bytes(), stderr.Bytes())
	}
	if got := stdout.String(); got != want {
		t.Errorf("README.md's Use example printed\n%s\nwhile the README says (after %s -->)\n%s", got, outputMarker, want)
	}
}

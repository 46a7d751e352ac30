package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// runningExample is the example started by run, as main starts it, with
// its stderr captured.
type runningExample struct {
	t      *testing.T
	dir    string
	base   string // http://127.0.0.1:port
	token  string // the API's
	stderr *syncBuffer
	client *http.Client
}

var apiAddr = regexp.MustCompile(`API on (http://[0-9.:]+) `)

// startRun runs the example with args on a new directory and a free port,
// waits until it serves, and stops it (asserting a clean exit) when the
// test ends.
func startRun(t *testing.T, args ...string) *runningExample {
	t.Helper()
	r := &runningExample{t: t, dir: filepath.Join(t.TempDir(), "target"), stderr: &syncBuffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	args = append([]string{"--dir", r.dir, "--addr", "127.0.0.1:0"}, args...)
	go func() { exited <- run(ctx, args, io.Discard, r.stderr) }()
	transport := &http.Transport{}
	r.client = &http.Client{Transport: transport, Timeout: waitFor}
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-exited:
			require.Equal(t, exitOK, code, r.stderr.String())
		case <-time.After(waitFor):
			t.Fatal("the example did not stop")
		}
		transport.CloseIdleConnections()
	})
	deadline := time.After(waitFor)
	for r.base == "" {
		select {
		case code := <-exited:
			t.Fatalf("the example exited with %d: %s", code, r.stderr.String())
		case <-deadline:
			t.Fatalf("the example did not start: %s", r.stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
		if m := apiAddr.FindStringSubmatch(r.stderr.String()); m != nil {
			r.base = m[1]
		}
	}
	r.token = readToken(t, r.dir)
	return r
}

func (r *runningExample) do(method, path, body string) (int, string) {
	r.t.Helper()
	req, err := http.NewRequest(method, r.base+path, strings.NewReader(body))
	require.NoError(r.t, err)
	req.Header.Set("Authorization", "Bearer "+r.token)
	resp, err := r.client.Do(req)
	require.NoError(r.t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(r.t, err)
	return resp.StatusCode, string(data)
}

// waitContent waits until the named file holds content.
func (r *runningExample) waitContent(name, content string) {
	r.t.Helper()
	var last string
	require.Eventually(r.t, func() bool {
		data, err := os.ReadFile(filepath.Join(r.dir, name))
		last = string(data)
		return err == nil && last == content
	}, waitFor, 5*time.Millisecond, "%s never held %q; last %q", name, content, last)
}

// waitDone waits until every desired file is Done and returns their
// contents on disk.
func (r *runningExample) waitDone() map[string]string {
	r.t.Helper()
	var files []*File
	require.Eventually(r.t, func() bool {
		code, body := r.do(http.MethodGet, "/files", "")
		require.Equal(r.t, http.StatusOK, code, body)
		require.NoError(r.t, json.Unmarshal([]byte(body), &files))
		for _, f := range files {
			if f.Status.Kind != status.KindDone {
				return false
			}
		}
		return len(files) > 0
	}, waitFor, 5*time.Millisecond)
	contents := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(r.dir, f.Name))
		require.NoError(r.t, err)
		contents[f.Name] = string(data)
	}
	return contents
}

// count counts the log lines of stderr at level with msg about the file
// name.
func (r *runningExample) count(level, msg, name string) int {
	re := regexp.MustCompile(`(?m)^time=\S+ level=` + level + ` msg="` + regexp.QuoteMeta(msg) + `" module=files name=` + regexp.QuoteMeta(name) + `( |$)`)
	return len(re.FindAllString(r.stderr.String(), -1))
}

// A refresh says what it found: "desired content changed" only when it
// did (a template changed), not for a file restored after the directory
// was removed, nor for one changed on disk.
func TestRefreshLogsSayWhatHappened(t *testing.T) {
	r := startRun(t, "--refresh", "20ms", "--prune", "1h", "--retry-max", "200ms")
	want := r.waitDone()
	require.Len(t, want, 3)
	const (
		restored = "Restoring a missing file"
		changed  = "Rewriting a file whose desired content changed"
		repaired = "Repairing drifted file"
	)

	// The directory removed: refreshes recreate it and restore every file.
	// (A refresh during the removal may restore a file that is removed
	// again, so a file may be restored more than once, and may write into
	// the directory as it is removed: then it is removed again.)
	var err error
	require.Eventually(t, func() bool {
		err = os.RemoveAll(r.dir)
		return err == nil
	}, waitFor, time.Millisecond, "could not remove the directory: %v", &err)
	for name, content := range want {
		r.waitContent(name, content)
	}
	for name := range want {
		require.Positive(t, r.count("INFO", restored, name), "%s:\n%s", name, r.stderr)
	}
	// and counts them as drift repaired. The directory claimed anew has a
	// new token: read it as a client would.
	var infos []tables.Info
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(filepath.Join(r.dir, tokenPath))
		if err != nil {
			return false
		}
		r.token = strings.TrimSpace(string(data))
		code, body := r.do(http.MethodGet, "/reconcilers", "")
		if code != http.StatusOK {
			return false
		}
		require.NoError(t, json.Unmarshal([]byte(body), &infos))
		return len(infos) == 1 && infos[0].DriftRepaired >= uint64(len(want))
	}, waitFor, 5*time.Millisecond, "restores not counted as drift repaired: %+v", &infos)

	// One file removed, another edited.
	before := r.count("INFO", restored, "motd")
	require.NoError(t, os.Remove(filepath.Join(r.dir, "motd")))
	r.waitContent("motd", want["motd"])
	require.Equal(t, before+1, r.count("INFO", restored, "motd"), r.stderr)
	require.NoError(t, os.WriteFile(filepath.Join(r.dir, "hello.txt"), []byte("edited"), 0o644))
	r.waitContent("hello.txt", want["hello.txt"])
	require.Regexp(t, `level=INFO msg="`+repaired+`" module=files name=hello.txt drift=size\n`, r.stderr.String())
	require.NotContains(t, r.stderr.String(), changed, "no desired content changed so far")

	// A new template: now the desired content of the files using it changed.
	code, body := r.do(http.MethodPut, "/templates/banner", "new banner {{content}}")
	require.Contains(t, []int{http.StatusOK, http.StatusCreated}, code, body)
	for _, name := range []string{"hello.txt", "motd"} { // written on workers, in any order
		r.waitContent(name, strings.Replace("new banner {{content}}", "{{content}}", mustContent(t, r, name), 1))
	}
	require.Equal(t, 1, r.count("INFO", changed, "hello.txt"), r.stderr)
	require.Equal(t, 1, r.count("INFO", changed, "motd"), r.stderr)
	require.Zero(t, r.count("INFO", changed, "secret.conf"), r.stderr)
}

// mustContent returns the content field of the desired file name.
func mustContent(t *testing.T, r *runningExample, name string) string {
	t.Helper()
	code, body := r.do(http.MethodGet, "/files/"+name, "")
	require.Equal(t, http.StatusOK, code, body)
	var f File
	require.NoError(t, json.Unmarshal([]byte(body), &f))
	return f.Content
}

// A directory put in place of a file the example wrote is not removed: the
// file fails, and is retried, with an error saying what to do, logged once
// rather than at every retry, and without the raw error of the system
// call. Once the directory is gone the file is written again; a directory
// put there again is reported again.
func TestDirectoryInTheWay(t *testing.T) {
	r := startRun(t, "--refresh", "20ms", "--prune", "1h", "--retry-max", "50ms")
	want := r.waitDone()
	motd := filepath.Join(r.dir, "motd")
	const friendly = "A directory is in the way of a file; remove the directory and the file will be written"
	const failure = "write motd: a directory is in the way: remove it and the file will be written"

	for round := 1; round <= 2; round++ {
		// A refresh may restore motd between the remove and the mkdir.
		var err error
		require.Eventually(t, func() bool {
			if err = os.Remove(motd); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return false
			}
			err = os.Mkdir(motd, 0o755)
			return err == nil
		}, waitFor, time.Millisecond, "could not put a directory in place of motd: %v", &err)

		var retries []tables.RetryInfo
		require.Eventually(t, func() bool {
			code, body := r.do(http.MethodGet, "/retries", "")
			require.Equal(t, http.StatusOK, code, body)
			require.NoError(t, json.Unmarshal([]byte(body), &retries))
			return len(retries) == 1 && retries[0].Key == "motd" && retries[0].Attempts >= 3
		}, waitFor, 5*time.Millisecond, "motd never failed 3 times: %+v", &retries)
		require.Equal(t, failure, retries[0].LastError)
		code, body := r.do(http.MethodGet, "/files/motd", "")
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, failure)

		require.Equal(t, round, r.count("WARN", friendly, "motd"), r.stderr)
		stderr := r.stderr.String()
		require.Contains(t, stderr, ` directory=`+motd+"\n")
		require.NotContains(t, stderr, "renameat")
		require.NotContains(t, stderr, "file exists")
		require.Zero(t, r.count("INFO", "Repairing drifted file", "motd"), stderr)

		// The example left the user's directory alone.
		info, err := os.Lstat(motd)
		require.NoError(t, err)
		require.True(t, info.IsDir())
		require.NoError(t, os.Remove(motd))
		r.waitContent("motd", want["motd"])
		// A refresh may write motd before the retry does: wait for the
		// retry too, so the next round does not read this round's row.
		require.Eventually(t, func() bool {
			code, body := r.do(http.MethodGet, "/retries", "")
			require.Equal(t, http.StatusOK, code, body)
			require.NoError(t, json.Unmarshal([]byte(body), &retries))
			return len(retries) == 0
		}, waitFor, 5*time.Millisecond, "motd is still retried: %+v", &retries)
	}
}

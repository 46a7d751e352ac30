package main

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/status"
)

// send is testApp.do with a Host (if not empty) and headers (name, value,
// name, value...) of the test's choosing.
func (a *testApp) send(method, path, host string, body io.Reader, header ...string) (int, string) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.base+path, body)
	require.NoError(a.t, err)
	if host != "" {
		req.Host = host
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := a.client.Do(req)
	require.NoError(a.t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(a.t, err)
	return resp.StatusCode, string(data)
}

// A page the user visits can reach the API on 127.0.0.1: under a name of
// its own after a DNS rebinding, or cross-site from the browser. Both are
// refused with 403 and change nothing; the API's own names and origin work.
func TestRequestsFromOtherSitesAreRefused(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(a.base, "http://"))
	require.NoError(t, err)

	code, body := a.send(http.MethodPut, "/files/x.txt", "evil.example.com", strings.NewReader("x"))
	assert.Equal(t, http.StatusForbidden, code, body)
	code, body = a.send(http.MethodPut, "/files/x.txt", "evil.example.com:"+port, strings.NewReader("x"))
	assert.Equal(t, http.StatusForbidden, code, body)
	code, body = a.send(http.MethodPut, "/files/x.txt", "127.0.0.1:1", strings.NewReader("x"))
	assert.Equal(t, http.StatusForbidden, code, body, "another port")
	code, body = a.send(http.MethodGet, "/files", "evil.example.com:"+port, nil)
	assert.Equal(t, http.StatusForbidden, code, body, "reads too")

	code, body = a.send(http.MethodPost, "/pause", "", nil, "Origin", "https://evil.example.com")
	assert.Equal(t, http.StatusForbidden, code, body)
	code, body = a.send(http.MethodPost, "/pause", "", nil, "Sec-Fetch-Site", "cross-site")
	assert.Equal(t, http.StatusForbidden, code, body)
	code, body = a.send(http.MethodPut, "/files/x.txt", "", strings.NewReader("x"), "Origin", "null")
	assert.Equal(t, http.StatusForbidden, code, body)

	// Nothing changed: no file x.txt, and the reconciler is not paused,
	// so a file written now reaches the directory.
	_, _, found := a.files.Get(a.db.ReadTxn(), nameIndex.Query("x.txt"))
	assert.False(t, found, "a refused PUT stored a desired file")
	_, err = os.Stat(filepath.Join(a.dir, "x.txt"))
	assert.True(t, os.IsNotExist(err), "a refused PUT wrote a file: %v", err)
	a.put("after.txt", "after")
	a.waitKind("after.txt", status.KindDone)
	data, err := os.ReadFile(filepath.Join(a.dir, "after.txt"))
	require.NoError(t, err)
	assert.Equal(t, "after", string(data))

	// The API's own names and origin are served.
	code, body = a.send(http.MethodGet, "/files", "localhost:"+port, nil)
	assert.Equal(t, http.StatusOK, code, body)
	code, body = a.send(http.MethodPost, "/pause", "", nil, "Origin", a.base, "Sec-Fetch-Site", "same-origin")
	assert.Equal(t, http.StatusOK, code, body)
	code, body = a.send(http.MethodPost, "/resume", "", nil)
	assert.Equal(t, http.StatusOK, code, body)
}

// Query parameters a route does not take, and bad template names, are
// refused with 400 and change nothing.
func TestUnknownQueryParametersAreRefused(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	for _, path := range []string{"/files/q.txt?colour=red", "/files/q.txt?template=bad%20name", "/files/q.txt?mode=0644&x=1"} {
		code, body := a.send(http.MethodPut, path, "", strings.NewReader("q"))
		assert.Equal(t, http.StatusBadRequest, code, "%s: %s", path, body)
	}
	_, _, found := a.files.Get(a.db.ReadTxn(), nameIndex.Query("q.txt"))
	assert.False(t, found, "a refused PUT stored a desired file")
	for _, path := range []string{"/files?x=1", "/files/q.txt?mode=0644", "/health?verbose=1", "/templates?all"} {
		code, body := a.send(http.MethodGet, path, "", nil)
		assert.Equal(t, http.StatusBadRequest, code, "%s: %s", path, body)
	}
	code, body := a.send(http.MethodPut, "/files/q.txt?mode=0600&template=ok-name_1.x", "", strings.NewReader("q"))
	assert.Equal(t, http.StatusCreated, code, body)
}

// GET / lists every route the server has.
func TestIndexListsEveryRoute(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	code, index := a.send(http.MethodGet, "/", "", nil)
	require.Equal(t, http.StatusOK, code)
	for _, route := range []string{
		"PUT    /files/{name}", "GET    /files/{name}", "DELETE /files/{name}", "GET    /files ",
		"PUT    /templates/{name}", "GET    /templates/{name}", "DELETE /templates/{name}", "GET    /templates ",
		"GET    /reconcilers", "GET    /retries", "POST   /pause", "POST   /resume",
		"GET    /health", "GET    /metrics", "GET    /debug/vars", "GET    /statedb/",
	} {
		assert.Contains(t, index, route)
	}
}

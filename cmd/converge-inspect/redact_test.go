package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/tables"
)

func TestRedact(t *testing.T) {
	require.Equal(t, "a [token] b [token][token]", redact("a "+testToken+" b "+testToken+testToken, testToken))
	require.Equal(t, "no token here", redact("no token here", testToken))
	require.Equal(t, "s "+testToken, redact("s "+testToken, ""), "without a token there is nothing to redact")
	// Overlapping occurrences leave no whole token behind.
	require.NotContains(t, redact("aaaaa", "aa"), "aa")
}

// redactFields covers every field of the rows that can hold text: a field
// of another kind added to tables.Info or RetryInfo fails here until
// redactFields covers it.
func TestRedactFieldsCoversRows(t *testing.T) {
	timeType := reflect.TypeFor[time.Time]()
	for _, typ := range []reflect.Type{reflect.TypeFor[tables.Info](), reflect.TypeFor[tables.RetryInfo]()} {
		for i := range typ.NumField() {
			f := typ.Field(i)
			switch f.Type.Kind() {
			case reflect.String, reflect.Bool,
				reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
				reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
				reflect.Float32, reflect.Float64:
				continue
			}
			if f.Type == reflect.TypeFor[[]tables.ErrorRecord]() {
				continue // redacted element by element, checked below
			}
			require.Equal(t, timeType, f.Type, "%s.%s (%s) may hold text that redactFields does not reach", typ.Name(), f.Name, f.Type)
		}
	}

	info := &tables.Info{ID: "m/" + testToken, Module: "m", Name: testToken, State: tables.State("x" + testToken),
		LastError: "e " + testToken, LastPruneError: testToken + " p", Objects: 3}
	redactFields(info, testToken)
	require.Equal(t, tables.Info{ID: "m/[token]", Module: "m", Name: "[token]", State: "x[token]",
		LastError: "e [token]", LastPruneError: "[token] p", Objects: 3}, *info)
	retry := &tables.RetryInfo{Reconciler: testToken, Key: "k" + testToken, LastError: "e " + testToken, Attempts: 2,
		Errors: []tables.ErrorRecord{{Error: "x", Attempt: 1}, {Error: "e " + testToken, Attempt: 2}}}
	redactFields(retry, testToken)
	require.Equal(t, tables.RetryInfo{Reconciler: "[token]", Key: "k[token]", LastError: "e [token]", Attempts: 2,
		Errors: []tables.ErrorRecord{{Error: "x", Attempt: 1}, {Error: "e [token]", Attempt: 2}}}, *retry)
}

// Rows that hold the token (an agent whose errors quote a request) are
// shown with it redacted, as text and as JSON, once and with --watch;
// deleting such a row still deletes it.
func TestTokenInRows(t *testing.T) {
	url := rowsAgent(t,
		[]string{`{"id":"r","module":"r","state":"degraded","last-prune":"2026-01-02T15:04:05Z","last-prune-error":"sent Bearer ` + testToken + `"}`},
		[]string{`{"reconciler":"r","key":"` + testToken + `","attempts":1,"first-failed":"2026-01-02T15:04:05Z","next-attempt":"2026-01-02T15:04:05Z","last-error":"echo ` + testToken + `"}`})
	env := map[string]string{tokenEnv: testToken}
	code, stdout, stderr := runBounded(t, env, "--url", url)
	t.Logf("exit %d\n%s%s", code, stdout, stderr)
	require.Equal(t, exitDegraded, code, stderr)
	require.NotContains(t, stdout+stderr, testToken)
	require.Regexp(t, `(?m)^r +degraded .* failed: sent Bearer \[token\]$`, stdout)
	require.Regexp(t, `(?m)^r +\[token\] +1 +due +echo \[token\]$`, stdout)

	code, stdout, stderr = runBounded(t, env, "--url", url, "--json")
	require.Equal(t, exitDegraded, code, stderr)
	require.NotContains(t, stdout+stderr, testToken)
	var rep report
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	require.Equal(t, "sent Bearer [token]", rep.Reconcilers[0].LastPruneError)
	require.Equal(t, "[token]", rep.Retries[0].Key)

	tb := rowSet{infos: map[string]*tables.Info{}, retries: map[string]*tables.RetryInfo{}, seen: map[string]uint64{}, token: testToken}
	put := func(table, obj string, deleted bool) {
		t.Helper()
		require.NoError(t, tb.put(table, row{Rev: 1, Obj: json.RawMessage(obj), Deleted: deleted}))
	}
	put(tables.ReconcilersTableName, `{"id":"r/`+testToken+`","module":"r","name":"`+testToken+`","state":"running"}`, false)
	put(tables.RetriesTableName, `{"reconciler":"r/`+testToken+`","key":"`+testToken+`"}`, false)
	require.Equal(t, "r/[token]", tb.report("").Reconcilers[0].ID)
	require.Len(t, tb.report("").Retries, 1)
	put(tables.ReconcilersTableName, `{"id":"r/`+testToken+`","module":"r","name":"`+testToken+`","state":"running"}`, true)
	put(tables.RetriesTableName, `{"reconciler":"r/`+testToken+`","key":"`+testToken+`"}`, true)
	require.Empty(t, tb.infos, "a row is deleted by the key the agent has")
	require.Empty(t, tb.retries)

	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(testToken), 0o600))
	w := startWatch(t, "--url", url, "--token-file", tokenFile)
	line, before := w.waitLine(`^r +\S+ +1 +due`)
	require.Regexp(t, `^r +\[token\] +1 +due +echo \[token\]$`, line)
	require.NotContains(t, strings.Join(before, "\n"), testToken)
	require.Equal(t, exitDegraded, w.stop(), w.stderr.String())
}

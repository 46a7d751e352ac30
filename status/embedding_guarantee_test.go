package status_test

// Claim 5 of the guarantee review: an object embedding status.Status
// anonymously keeps its other fields through JSON and YAML, encodes and
// decodes like one embedding the StateDB reconciler's Status, and bad input
// gets a clear error, never a panic. Named fields and status.Set too.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/script"
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"
	upstream "github.com/cilium/statedb/reconciler"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/converge-go/converge/status"
)

type (
	// The way users of the StateDB reconciler embed it: no tags.
	o30Emb struct {
		Name string
		status.Status
	}
	o30UpEmb struct {
		Name string
		upstream.Status
	}
	o30PtrEmb struct {
		Name string
		*status.Status
	}
	o30UpPtrEmb struct {
		Name string
		*upstream.Status
	}
	O30Inner struct {
		Extra string
		status.Status
	}
	// The yaml tag names the inner struct the same for both (YAML keys an
	// embedded struct by its type's name); JSON ignores it and inlines.
	o30Nested struct {
		Name     string
		O30Inner `yaml:"inner"`
	}
	O30UpInner struct {
		Extra string
		upstream.Status
	}
	o30UpNested struct {
		Name       string
		O30UpInner `yaml:"inner"`
	}
	o30NamedSet struct {
		Name     string
		Statuses status.Set
	}
	o30EmbSet struct {
		Name string
		status.Set
	}
	o30UpEmbSet struct {
		Name string
		upstream.StatusSet
	}
)

var o30At = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

// o30Statuses are statuses of every kind, stamped o30At, with the
// equivalent StateDB reconciler statuses.
func o30Statuses() []struct {
	st status.Status
	up upstream.Status
} {
	errText := "disk full"
	return []struct {
		st status.Status
		up upstream.Status
	}{
		{status.PendingAt(o30At), upstream.Status{UpdatedAt: o30At, Kind: upstream.StatusKindPending}},
		{status.RefreshingAt(o30At), upstream.Status{UpdatedAt: o30At, Kind: upstream.StatusKindRefreshing}},
		{status.DoneAt(o30At), upstream.Status{UpdatedAt: o30At, Kind: upstream.StatusKindDone}},
		{status.ErrorAt(o30At, errors.New(errText)), upstream.Status{UpdatedAt: o30At, Kind: upstream.StatusKindError, Error: &errText}},
	}
}

func o30RequireSameStatus(t *testing.T, want, got status.Status) {
	t.Helper()
	require.Equal(t, want.Kind, got.Kind)
	require.True(t, want.UpdatedAt.Equal(got.UpdatedAt), "updated-at %v, want %v", got.UpdatedAt, want.UpdatedAt)
	require.Equal(t, want.GetError(), got.GetError())
	require.Equal(t, want.Terminal, got.Terminal)
}

// Round trips of embedded (by value, by pointer, nested) and named statuses
// through JSON and YAML keep every field.
func TestGuaranteeEmbeddedRoundTrip(t *testing.T) {
	sts := []status.Status{
		status.PendingAt(o30At), status.RefreshingAt(o30At), status.DoneAt(o30At),
		status.ErrorAt(o30At, errors.New("disk full")), status.TerminalErrorAt(o30At, errors.New("bad config")),
		{},
	}
	codecs := []struct {
		name      string
		marshal   func(any) ([]byte, error)
		unmarshal func([]byte, any) error
	}{
		{"json", json.Marshal, json.Unmarshal},
		{"yaml", yaml.Marshal, yaml.Unmarshal},
	}
	for _, c := range codecs {
		for _, st := range sts {
			t.Run(c.name+"/"+st.Kind.String(), func(t *testing.T) {
				// By value.
				data, err := c.marshal(o30Emb{Name: "a", Status: st})
				require.NoError(t, err)
				var got o30Emb
				require.NoError(t, c.unmarshal(data, &got), "%s", data)
				require.Equal(t, "a", got.Name, "%s", data)
				o30RequireSameStatus(t, st, got.Status)

				// Into a pointer, as statedb's db/insert decodes.
				var gotPtr *o30Emb
				require.NoError(t, c.unmarshal(data, &gotPtr), "%s", data)
				require.NotNil(t, gotPtr)
				require.Equal(t, "a", gotPtr.Name, "%s", data)
				o30RequireSameStatus(t, st, gotPtr.Status)

				// Embedded by pointer.
				s := st
				data, err = c.marshal(o30PtrEmb{Name: "a", Status: &s})
				require.NoError(t, err)
				var gotP o30PtrEmb
				require.NoError(t, c.unmarshal(data, &gotP), "%s", data)
				require.Equal(t, "a", gotP.Name, "%s", data)
				require.NotNil(t, gotP.Status, "%s", data)
				o30RequireSameStatus(t, st, *gotP.Status)

				// Nested embedding.
				data, err = c.marshal(o30Nested{Name: "a", O30Inner: O30Inner{Extra: "x", Status: st}})
				require.NoError(t, err)
				var gotN o30Nested
				require.NoError(t, c.unmarshal(data, &gotN), "%s", data)
				require.Equal(t, "a", gotN.Name, "%s", data)
				require.Equal(t, "x", gotN.Extra, "%s", data)
				o30RequireSameStatus(t, st, gotN.Status)
			})
		}
	}
}

// o30Generic decodes data into a generic value, dropping keys that only one
// of the two reconcilers writes ("id" and "terminal").
func o30Generic(t *testing.T, data []byte, unmarshal func([]byte, any) error) any {
	t.Helper()
	var v any
	require.NoError(t, unmarshal(data, &v), "%s", data)
	var strip func(any) any
	strip = func(v any) any {
		switch m := v.(type) {
		case map[string]any:
			delete(m, "id")
			delete(m, "terminal")
			for k, x := range m {
				m[k] = strip(x)
			}
		}
		return v
	}
	return strip(v)
}

// Embedded (by value, by pointer, nested), an object encodes as the same
// object built on the StateDB reconciler's Status does, but for "id" and
// "terminal"; each decodes what the other encoded.
func TestGuaranteeEmbeddedLikeUpstream(t *testing.T) {
	codecs := []struct {
		name      string
		marshal   func(any) ([]byte, error)
		unmarshal func([]byte, any) error
	}{
		{"json", json.Marshal, json.Unmarshal},
		{"yaml", yaml.Marshal, yaml.Unmarshal},
	}
	for _, c := range codecs {
		for _, p := range o30Statuses() {
			t.Run(c.name+"/"+p.st.Kind.String(), func(t *testing.T) {
				pairs := []struct {
					what   string
					ours   any
					theirs any
				}{
					{"value", o30Emb{Name: "a", Status: p.st}, o30UpEmb{Name: "a", Status: p.up}},
					{"pointer", o30PtrEmb{Name: "a", Status: &p.st}, o30UpPtrEmb{Name: "a", Status: &p.up}},
					{"nil pointer", o30PtrEmb{Name: "a"}, o30UpPtrEmb{Name: "a"}},
					{"nested", o30Nested{Name: "a", O30Inner: O30Inner{Extra: "x", Status: p.st}}, o30UpNested{Name: "a", O30UpInner: O30UpInner{Extra: "x", Status: p.up}}},
				}
				for _, pair := range pairs {
					ours, err := c.marshal(pair.ours)
					require.NoError(t, err)
					theirs, err := c.marshal(pair.theirs)
					require.NoError(t, err)
					require.Equal(t, o30Generic(t, theirs, c.unmarshal), o30Generic(t, ours, c.unmarshal),
						"%s: ours\n%s\ntheirs\n%s", pair.what, ours, theirs)
				}

				// Each decodes the other's.
				theirs, err := c.marshal(o30UpEmb{Name: "a", Status: p.up})
				require.NoError(t, err)
				var ours o30Emb
				require.NoError(t, c.unmarshal(theirs, &ours), "%s", theirs)
				require.Equal(t, "a", ours.Name)
				o30RequireSameStatus(t, p.st, ours.Status)

				oursData, err := c.marshal(o30Emb{Name: "a", Status: p.st})
				require.NoError(t, err)
				var up o30UpEmb
				require.NoError(t, c.unmarshal(oursData, &up), "%s", oursData)
				require.Equal(t, "a", up.Name)
				require.Equal(t, p.up.Kind, up.Kind)
				require.Equal(t, p.up.GetError(), up.GetError())
				require.True(t, p.up.UpdatedAt.Equal(up.UpdatedAt))
			})
		}
	}
}

// Odd input for an object embedding a status: an error or a decoded
// object, never a panic; an unknown kind wraps ErrMalformed.
func TestGuaranteeEmbeddedOddInput(t *testing.T) {
	type tc struct {
		in        string
		wantErr   bool
		malformed bool
	}
	jsonCases := []tc{
		{`null`, false, false},
		{`[]`, true, false},
		{`[1,2]`, true, false},
		{`1`, true, false},
		{`"x"`, true, false},
		{`true`, true, false},
		{`{}`, false, false},
		{`{"Name":"a","kind":5}`, true, false},
		{`{"Name":"a","kind":{"a":1}}`, true, false},
		{`{"Name":"a","kind":["Done"]}`, true, false},
		{`{"Name":"a","kind":"Bogus"}`, true, true},
		{`{"Name":"a","kind":"pending"}`, true, true},
		{`{"Name":"a","kind":"Kind(9)"}`, true, true},
		{`{"Name":"a","kind":null}`, false, false},
		{`{"Name":"a","kind":""}`, false, false},
		{`{"Name":"a","updated-at":"yesterday"}`, true, false},
		{`{"Name":"a","updated-at":5}`, true, false},
		{`{"Name":"a","error":5}`, true, false},
		{`{"Name":"a","terminal":"yes"}`, true, false},
		{`{"Name":"a","kind":"Done","error":"x","terminal":true}`, false, false},
		{`{"Name":"a","kind":"Done"`, true, false},
		{`{"Name":"a","Status":{"kind":"Done"}}`, false, false},
	}
	for _, c := range jsonCases {
		t.Run("json/"+c.in, func(t *testing.T) {
			for _, target := range []any{new(o30Emb), new(o30PtrEmb), new(o30Nested), new(*o30Emb)} {
				var err error
				require.NotPanics(t, func() { err = json.Unmarshal([]byte(c.in), target) }, "%T", target)
				if c.wantErr {
					require.Error(t, err, "%T", target)
				} else {
					require.NoError(t, err, "%T", target)
				}
				if c.malformed {
					require.ErrorIs(t, err, status.ErrMalformed, "%T", target)
				}
			}
		})
	}
	yamlCases := []tc{
		{`null`, false, false},
		{`[]`, true, false},
		{`5`, true, false},
		{`x`, true, false},
		{`{}`, false, false},
		{"name: a\nstatus: null", false, false},
		{"name: a\nstatus: []", true, false},
		{"name: a\nstatus: [1, 2]", true, false},
		{"name: a\nstatus: 5", true, false},
		{"name: a\nstatus: x", true, false},
		{"name: a\nstatus: {kind: Bogus}", true, true},
		{"name: a\nstatus: {kind: pending}", true, true},
		{"name: a\nstatus: {kind: 3}", true, true},
		{"name: a\nstatus: {kind: [Done]}", true, false},
		{"name: a\nstatus: {kind: {a: 1}}", true, false},
		{"name: a\nstatus: {kind: Done, updated-at: yesterday}", true, false},
		{"name: a\nstatus: {kind: Done, error: [x]}", true, false},
		{"name: a\nstatus: {kind: Done, terminal: maybe}", true, false},
		{"name: a\nstatus: {kind: Done, error: x, terminal: true}", false, false},
		{"name: a\nstatus: &s {kind: Done}\nother: *s", false, false},
		{"name: a\nstatus: !!binary aGVsbG8=", true, false},
		{"name: [a\n", true, false},
	}
	for _, c := range yamlCases {
		t.Run("yaml/"+c.in, func(t *testing.T) {
			for _, target := range []any{new(o30Emb), new(o30PtrEmb), new(*o30Emb)} {
				var err error
				require.NotPanics(t, func() { err = yaml.Unmarshal([]byte(c.in), target) }, "%T", target)
				if c.wantErr {
					require.Error(t, err, "%T", target)
				} else {
					require.NoError(t, err, "%T", target)
				}
				if c.malformed {
					require.ErrorIs(t, err, status.ErrMalformed, "%T", target)
				}
			}
		})
	}
}

// A decoded object keeps its name whatever its status says, when decoding
// succeeds; the error text of a non-Error kind is ignored.
func TestGuaranteeEmbeddedIgnoredFields(t *testing.T) {
	var got o30Emb
	require.NoError(t, json.Unmarshal([]byte(`{"Name":"a","kind":"Done","error":"x","terminal":true}`), &got))
	require.Equal(t, "a", got.Name)
	require.Equal(t, status.KindDone, got.Kind)
	require.Equal(t, "", got.GetError())
	require.Zero(t, got.ID())
}

// Huge input: a huge error text round-trips; a huge unknown kind gets an
// error wrapping ErrMalformed whose text stays readable (bounded).
func TestGuaranteeEmbeddedHugeInput(t *testing.T) {
	huge := strings.Repeat("x", 4<<20)
	data, err := json.Marshal(o30Emb{Name: "a", Status: status.ErrorAt(o30At, errors.New(huge))})
	require.NoError(t, err)
	var got o30Emb
	require.NoError(t, json.Unmarshal(data, &got))
	require.Equal(t, huge, got.GetError())

	var bad o30Emb
	err = json.Unmarshal([]byte(`{"Name":"a","kind":"`+huge+`"}`), &bad)
	require.ErrorIs(t, err, status.ErrMalformed)
	err = yaml.Unmarshal([]byte("name: a\nstatus: {kind: "+huge+"}"), &bad)
	require.ErrorIs(t, err, status.ErrMalformed)
}

// Not a documented guarantee but STANDARDS.md's "bound every input" and
// "a clear error": the error for a huge unknown kind should not repeat the
// whole input.
func TestGuaranteeHugeKindErrorIsBounded(t *testing.T) {
	huge := strings.Repeat("x", 4<<20)
	var bad o30Emb
	err := json.Unmarshal([]byte(`{"Name":"a","kind":"`+huge+`"}`), &bad)
	require.ErrorIs(t, err, status.ErrMalformed)
	require.Less(t, len(err.Error()), 4096, "json: the error for a 4 MiB kind is %d bytes long", len(err.Error()))
	_, err = status.ParseKind(huge)
	require.ErrorIs(t, err, status.ErrMalformed)
	require.Less(t, len(err.Error()), 4096, "ParseKind: the error for a 4 MiB kind is %d bytes long", len(err.Error()))
}

// A Set in a named field round-trips with the object's other fields.
func TestGuaranteeNamedSetRoundTrip(t *testing.T) {
	set := status.NewSet().
		Set("a", status.DoneAt(o30At)).
		Set("b", status.ErrorAt(o30At, errors.New("disk full"))).
		Set("c", status.PendingAt(o30At))
	for _, c := range []struct {
		name      string
		marshal   func(any) ([]byte, error)
		unmarshal func([]byte, any) error
	}{{"json", json.Marshal, json.Unmarshal}, {"yaml", yaml.Marshal, yaml.Unmarshal}} {
		t.Run(c.name, func(t *testing.T) {
			data, err := c.marshal(o30NamedSet{Name: "obj", Statuses: set})
			require.NoError(t, err)
			var got o30NamedSet
			require.NoError(t, c.unmarshal(data, &got), "%s", data)
			require.Equal(t, "obj", got.Name)
			for name, st := range set.All() {
				o30RequireSameStatus(t, st, got.Statuses.Get(name))
				if d := got.Statuses.Get(name); d.IsPendingOrRefreshing() {
					require.NotZero(t, d.ID(), "a Pending or Refreshing status decoded in a Set gets an identity")
				} else {
					require.Zero(t, d.ID(), "a Done or Error decoded in a Set has none")
				}
			}
			var ptr *o30NamedSet
			require.NoError(t, c.unmarshal(data, &ptr), "%s", data)
			require.Equal(t, "obj", ptr.Name)
		})
	}
}

// Embedded, a Set encodes the whole object as the set alone, as the
// StateDB reconciler's StatusSet does (the documented behaviour).
func TestGuaranteeEmbeddedSetAsDocumented(t *testing.T) {
	set := status.NewSet().Set("a", status.DoneAt(o30At))
	upSet := upstream.NewStatusSet().Set("a", upstream.Status{UpdatedAt: o30At, Kind: upstream.StatusKindDone})
	for _, c := range []struct {
		name      string
		marshal   func(any) ([]byte, error)
		unmarshal func([]byte, any) error
	}{{"json", json.Marshal, json.Unmarshal}, {"yaml", yaml.Marshal, yaml.Unmarshal}} {
		t.Run(c.name, func(t *testing.T) {
			ours, err := c.marshal(o30EmbSet{Name: "obj", Set: set})
			require.NoError(t, err)
			require.NotContains(t, string(ours), "obj", "documented: the object's other fields are dropped")
			theirs, err := c.marshal(o30UpEmbSet{Name: "obj", StatusSet: upSet})
			require.NoError(t, err)
			require.Equal(t, o30Generic(t, theirs, c.unmarshal), o30Generic(t, ours, c.unmarshal), "ours\n%s\ntheirs\n%s", ours, theirs)
			var got o30EmbSet
			require.NoError(t, c.unmarshal(ours, &got), "%s", ours)
			o30RequireSameStatus(t, status.DoneAt(o30At), got.Get("a"))
		})
	}
}

// o30Row is a table object embedding status.Status, for statedb's script
// commands.
type o30Row struct {
	Name string
	status.Status
}

func (r *o30Row) TableHeader() []string { return []string{"Name", "Status"} }
func (r *o30Row) TableRow() []string    { return []string{r.Name, r.Status.String()} }

var o30RowByName = statedb.Index[*o30Row, string]{
	Name:       "name",
	FromObject: func(r *o30Row) index.KeySet { return index.NewKeySet(index.String(r.Name)) },
	FromKey:    index.String,
	FromString: index.FromString,
	Unique:     true,
}

// statedb's own db/insert decodes an object embedding a status from YAML,
// and db/show writes it back in YAML and JSON, keeping every field.
func TestGuaranteeDBInsertAndShow(t *testing.T) {
	var (
		db  *statedb.DB
		tbl statedb.RWTable[*o30Row]
	)
	h := hive.New(statedb.Cell, cell.Invoke(func(d *statedb.DB) error {
		db = d
		var err error
		tbl, err = statedb.NewTable(d, "rows", o30RowByName)
		return err
	}))
	log := hivetest.Logger(t)
	require.NoError(t, h.Start(log, context.Background()))
	t.Cleanup(func() { require.NoError(t, h.Stop(log, context.Background())) })

	dir := t.TempDir()
	write := func(name, text string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	write("a.yaml", "name: a\nstatus:\n  kind: Error\n  updated-at: 2024-05-06T07:08:09Z\n  error: disk full\n")
	write("b.yaml", "name: b\nstatus:\n  kind: Done\n  updated-at: 2024-05-06T07:08:09Z\n")
	// As the StateDB reconciler's db/show wrote it (with an id).
	write("c.yaml", "name: c\nstatus:\n  updated-at: 2024-05-06T07:08:09Z\n  id: 42\n  kind: Pending\n")
	write("bad.yaml", "name: d\nstatus:\n  kind: Bogus\n")

	engine := &script.Engine{Cmds: map[string]script.Cmd{
		"db/insert": statedb.InsertCmd(db),
		"db/show":   statedb.ShowCmd(db),
	}}
	run := func(text string) error {
		s, err := script.NewState(context.Background(), dir, nil)
		require.NoError(t, err)
		var out strings.Builder
		err = engine.Execute(s, "o30", bufio.NewReader(strings.NewReader(text)), &out)
		t.Log(out.String())
		return err
	}
	require.NoError(t, run("db/insert rows a.yaml b.yaml c.yaml\ndb/show --format=yaml -o shown.yaml rows\ndb/show --format=json -o shown.json rows\n"))
	err := run("db/insert rows bad.yaml\n")
	require.Error(t, err)
	require.Contains(t, err.Error(), "Bogus")

	check := func(where string, r *o30Row, kind status.Kind, errText string) {
		t.Helper()
		require.Equal(t, kind, r.Kind, where)
		require.True(t, r.UpdatedAt.Equal(o30At), "%s: %v", where, r.UpdatedAt)
		require.Equal(t, errText, r.GetError(), where)
	}
	want := map[string]struct {
		kind status.Kind
		err  string
	}{"a": {status.KindError, "disk full"}, "b": {status.KindDone, ""}, "c": {status.KindPending, ""}}
	n := 0
	for r := range tbl.All(db.ReadTxn()) {
		w, ok := want[r.Name]
		require.True(t, ok, "unexpected row %q", r.Name)
		check("table "+r.Name, r, w.kind, w.err)
		n++
	}
	require.Equal(t, 3, n)

	shown, err := os.ReadFile(filepath.Join(dir, "shown.yaml"))
	require.NoError(t, err)
	docs := yaml.NewDecoder(strings.NewReader(string(shown)))
	n = 0
	for {
		var r o30Row
		err := docs.Decode(&r)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "%s", shown)
		if r.Name == "" {
			continue
		}
		w := want[r.Name]
		check("shown.yaml "+r.Name, &r, w.kind, w.err)
		n++
	}
	require.Equal(t, 3, n, "%s", shown)

	shownJSON, err := os.ReadFile(filepath.Join(dir, "shown.json"))
	require.NoError(t, err)
	dec := json.NewDecoder(strings.NewReader(string(shownJSON)))
	n = 0
	for dec.More() {
		var r o30Row
		require.NoError(t, dec.Decode(&r), "%s", shownJSON)
		w := want[r.Name]
		check("shown.json "+r.Name, &r, w.kind, w.err)
		n++
	}
	require.Equal(t, 3, n, "%s", shownJSON)
}

// Decoding a Set (in a named field) fails with an error wrapping
// ErrMalformed on any bad input ("ErrMalformed is returned, wrapped, ...
// when decoding a Set from JSON or YAML fails"), never a panic.
func TestGuaranteeSetOddInput(t *testing.T) {
	jsonBad := []string{
		`{"Name":"o","Statuses":[]}`,
		`{"Name":"o","Statuses":5}`,
		`{"Name":"o","Statuses":"x"}`,
		`{"Name":"o","Statuses":{"a":5}}`,
		`{"Name":"o","Statuses":{"a":[]}}`,
		`{"Name":"o","Statuses":{"a":{"kind":"Bogus"}}}`,
		`{"Name":"o","Statuses":{"a":{"kind":5}}}`,
		`{"Name":"o","Statuses":{"a":{"kind":"Done","error":"x"}}}`,
		`{"Name":"o","Statuses":{"a":{"kind":"Done","terminal":true}}}`,
		`{"Name":"o","Statuses":{"a":{"kind":"Done","updated-at":"yesterday"}}}`,
	}
	for _, in := range jsonBad {
		t.Run("json/"+in, func(t *testing.T) {
			var got o30NamedSet
			var err error
			require.NotPanics(t, func() { err = json.Unmarshal([]byte(in), &got) })
			require.ErrorIs(t, err, status.ErrMalformed)
		})
	}
	yamlBad := []string{
		"name: o\nstatuses: []",
		"name: o\nstatuses: 5",
		"name: o\nstatuses: x",
		"name: o\nstatuses: {a: 5}",
		"name: o\nstatuses: {a: []}",
		"name: o\nstatuses: {a: {kind: Bogus}}",
		"name: o\nstatuses: {a: {kind: Done, error: x}}",
		"name: o\nstatuses: {a: {kind: Done, terminal: true}}",
		"name: o\nstatuses: {a: {kind: Done, updated-at: yesterday}}",
		"name: o\nstatuses: {[a]: {kind: Done}}",
	}
	for _, in := range yamlBad {
		t.Run("yaml/"+in, func(t *testing.T) {
			var got o30NamedSet
			var err error
			require.NotPanics(t, func() { err = yaml.Unmarshal([]byte(in), &got) })
			require.ErrorIs(t, err, status.ErrMalformed)
		})
	}
	for _, in := range []string{`{"Name":"o","Statuses":null}`, `{"Name":"o","Statuses":{}}`} {
		var got o30NamedSet
		require.NoError(t, json.Unmarshal([]byte(in), &got), in)
		require.Equal(t, "o", got.Name)
	}
}

package status_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	yamlv3 "go.yaml.in/yaml/v3"

	"github.com/converge-go/converge/status"
)

// statusesToEncode covers every kind, a zero time and a time with a zone and
// nanoseconds.
func statusesToEncode() map[string]status.Status {
	zone := time.FixedZone("X", -5*3600-30*60)
	return map[string]status.Status{
		"pending":    status.Pending(),
		"refreshing": status.Refreshing(),
		"done":       status.Done(),
		"error":      status.Error(errors.New(`disk "full": 100%`)),
		"error nil":  status.Error(nil),
		"terminal":   status.TerminalErrorAt(time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC), errors.New("invalid")),
		"error multiline": {
			Kind: status.KindError, Error: "line one\nline two: ünïcödé",
			UpdatedAt: time.Date(2024, 2, 29, 23, 59, 59, 123456789, zone),
		},
		"error empty text":  {Kind: status.KindError, UpdatedAt: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)},
		"done zoned":        {Kind: status.KindDone, UpdatedAt: time.Date(1999, 12, 31, 12, 0, 0, 1, zone)},
		"pending zero time": {Kind: status.KindPending},
		"zero":              {},
	}
}

func requireSameStatus(t testing.TB, want, got status.Status) {
	t.Helper()
	require.Equal(t, want.Kind, got.Kind)
	require.Equal(t, want.Error, got.Error)
	require.Equal(t, want.Terminal, got.Terminal)
	require.True(t, want.UpdatedAt.Equal(got.UpdatedAt), "updated-at: want %v, got %v", want.UpdatedAt, got.UpdatedAt)
}

func TestStatusRoundTrip(t *testing.T) {
	for _, c := range allCodecs {
		for name, st := range statusesToEncode() {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				data, err := c.marshal(st)
				require.NoError(t, err)

				var got status.Status
				require.NoError(t, c.unmarshal(data, &got), "decoding %s", data)
				requireSameStatus(t, st, got)

				// The identity is never encoded, and decoding makes
				// none: a status alone cannot tell a new write from the
				// one it was encoded from.
				assert.Zero(t, got.ID(), "a status decoded outside a Set has no identity")
			})
		}
	}
}

func TestStatusRoundTripInStruct(t *testing.T) {
	type object struct {
		Name   string         `json:"name" yaml:"name"`
		Status status.Status  `json:"status" yaml:"status"`
		Ptr    *status.Status `json:"ptr,omitempty" yaml:"ptr,omitempty"`
	}
	errSt := status.Error(errors.New("boom"))
	in := object{Name: "a", Status: status.Done(), Ptr: &errSt}
	for _, c := range allCodecs {
		t.Run(c.name, func(t *testing.T) {
			data, err := c.marshal(in)
			require.NoError(t, err)
			var out object
			require.NoError(t, c.unmarshal(data, &out), "decoding %s", data)
			assert.Equal(t, "a", out.Name)
			requireSameStatus(t, in.Status, out.Status)
			require.NotNil(t, out.Ptr)
			requireSameStatus(t, errSt, *out.Ptr)
			assert.Zero(t, out.Status.ID())
			assert.Zero(t, out.Ptr.ID())
		})
	}
}

func TestStatusJSONFields(t *testing.T) {
	at := time.Date(2024, 1, 2, 3, 4, 5, 6, time.UTC)

	data, err := json.Marshal(status.Status{Kind: status.KindDone, UpdatedAt: at})
	require.NoError(t, err)
	assert.JSONEq(t, `{"kind":"Done","updated-at":"2024-01-02T03:04:05.000000006Z"}`, string(data))

	data, err = json.Marshal(status.Status{Kind: status.KindError, UpdatedAt: at, Error: "boom"})
	require.NoError(t, err)
	assert.JSONEq(t, `{"kind":"Error","updated-at":"2024-01-02T03:04:05.000000006Z","error":"boom"}`, string(data))

	// Terminal is encoded only when set.
	data, err = json.Marshal(status.Status{Kind: status.KindError, UpdatedAt: at, Error: "boom", Terminal: true})
	require.NoError(t, err)
	assert.JSONEq(t, `{"kind":"Error","updated-at":"2024-01-02T03:04:05.000000006Z","error":"boom","terminal":true}`, string(data))

	// The identity is never encoded, whatever the encoding.
	st := status.Pending()
	for _, c := range allCodecs {
		data, err := c.marshal(st)
		require.NoError(t, err)
		var fields map[string]any
		require.NoError(t, c.unmarshal(data, &fields))
		keys := make([]string, 0, len(fields))
		for k := range fields {
			keys = append(keys, k)
		}
		assert.ElementsMatch(t, []string{"kind", "updated-at"}, keys, "%s: %s", c.name, data)
		assert.Equal(t, "Pending", fields["kind"], c.name)
	}
}

func TestStatusYAMLFields(t *testing.T) {
	at := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range yamlCodecs {
		data, err := c.marshal(status.Status{Kind: status.KindError, UpdatedAt: at, Error: "boom"})
		require.NoError(t, err)
		assert.Equal(t, "kind: Error\nupdated-at: 2024-01-02T03:04:05Z\nerror: boom\n", string(data), c.name)
	}
}

func TestStatusDecodesHandWrittenYAML(t *testing.T) {
	tests := []struct {
		in   string
		want status.Status
	}{
		{"kind: Done\nupdated-at: 2024-01-02T03:04:05Z\n",
			status.Status{Kind: status.KindDone, UpdatedAt: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)}},
		{"kind: Pending\nupdated-at: 2024-01-02\n",
			status.Status{Kind: status.KindPending, UpdatedAt: time.Date(2024, 1, 2, 0, 0, 0, 0, time.UTC)}},
		{"kind: \"Error\"\nerror: 'no route'\nupdated-at: \"2024-01-02T03:04:05+02:00\"\n",
			status.Status{Kind: status.KindError, Error: "no route", UpdatedAt: time.Date(2024, 1, 2, 1, 4, 5, 0, time.UTC)}},
		{"{kind: Refreshing}", status.Status{Kind: status.KindRefreshing}},
		{"kind: Done\nunknown-field: 1\n", status.Status{Kind: status.KindDone}},
		{"kind: \n", status.Status{}},
		{"kind: ''\n", status.Status{}},
	}
	for _, c := range yamlCodecs {
		for _, tc := range tests {
			var got status.Status
			require.NoError(t, c.unmarshal([]byte(tc.in), &got), "%s: %q", c.name, tc.in)
			requireSameStatus(t, tc.want, got)
		}
	}
}

func TestStatusDecodesHandWrittenJSON(t *testing.T) {
	tests := []struct {
		in   string
		want status.Status
	}{
		{`{"kind":"Done","updated-at":"2024-01-02T03:04:05Z"}`,
			status.Status{Kind: status.KindDone, UpdatedAt: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)}},
		{`{"kind":"Error","error":"x"}`, status.Status{Kind: status.KindError, Error: "x"}},
		{`{"kind":"Pending","extra":[1,2]}`, status.Status{Kind: status.KindPending}},
		{`{"kind":""}`, status.Status{}},
		{`{}`, status.Status{}},
		{`null`, status.Status{}},
	}
	for _, tc := range tests {
		var got status.Status
		require.NoError(t, json.Unmarshal([]byte(tc.in), &got), tc.in)
		requireSameStatus(t, tc.want, got)
	}
}

// requireDecodeError checks that decoding well-formed input into a Status
// failed with an error that says what is wrong: ErrMalformed for the kind,
// the decoder's type error for a value of the wrong type (or, in YAML, a
// repeated key), or time's error for a time it cannot parse.
func requireDecodeError(t testing.TB, err error) {
	t.Helper()
	require.Error(t, err)
	var (
		jsonType *json.UnmarshalTypeError
		yamlType *yamlv3.TypeError
		timeErr  *time.ParseError
	)
	require.True(t, errors.Is(err, status.ErrMalformed) || errors.As(err, &jsonType) || errors.As(err, &yamlType) ||
		errors.As(err, &timeErr) || strings.HasPrefix(err.Error(), "Time.UnmarshalJSON: "),
		"unexpected error %T: %v", err, err)
}

func TestStatusMalformedJSON(t *testing.T) {
	// Well-formed JSON that does not describe a status. An unknown kind
	// name is ErrMalformed; the rest are encoding/json's or time's errors.
	for in, malformed := range map[string]bool{
		`{"kind":"Bogus"}`:                         true,
		`{"kind":"pending"}`:                       true,
		`{"kind":"Kind(7)"}`:                       true,
		`{"kind":3}`:                               false,
		`{"kind":true}`:                            false,
		`{"kind":["Done"]}`:                        false,
		`{"kind":{"name":"Done"}}`:                 false,
		`{"kind":"Done","updated-at":"yesterday"}`: false,
		`{"kind":"Done","updated-at":5}`:           false,
		`{"kind":"Done","updated-at":"2024-13-01T00:00:00Z"}`: false,
		`{"kind":"Error","error":5}`:                          false,
		`{"kind":"Error","error":null,"updated-at":[]}`:       false,
		`{"kind":"Error","terminal":"yes"}`:                   false,
		`[]`:                                                  false,
		`[{"kind":"Done"}]`:                                   false,
		`"Done"`:                                              false,
		`42`:                                                  false,
		`true`:                                                false,
	} {
		t.Run(in, func(t *testing.T) {
			st := status.Done()
			var err error
			require.NotPanics(t, func() { err = json.Unmarshal([]byte(in), &st) })
			requireDecodeError(t, err)
			if malformed {
				assert.ErrorIs(t, err, status.ErrMalformed)
				assert.ErrorContains(t, err, "unknown kind")
			}
		})
	}

	for _, in := range []string{``, `{`, `{"kind":}`, `{"kind":"Done"`, "\xff", `{"kind":"Done"}}`} {
		t.Run("syntax/"+in, func(t *testing.T) {
			var st status.Status
			assert.Error(t, json.Unmarshal([]byte(in), &st))
		})
	}
}

func TestStatusMalformedYAML(t *testing.T) {
	// Well-formed YAML that does not describe a status. An unknown kind
	// name is ErrMalformed; the rest are the YAML library's or time's errors.
	for in, malformed := range map[string]bool{
		"kind: Bogus\n":                            true,
		"kind: done\n":                             true,
		"kind: 3\n":                                true,
		"kind: true\n":                             true,
		"kind: !!binary Qm9ndXM=\n":                true, // "Bogus"
		"kind: [Done]\n":                           false,
		"kind: {name: Done}\n":                     false,
		"kind: Done\nupdated-at: yesterday\n":      false,
		"kind: Done\nupdated-at: 5\n":              false,
		"kind: Done\nupdated-at: [2024-01-02]\n":   false,
		"kind: Done\nupdated-at: \"2024-01-02\"\n": false, // a quoted date is not RFC 3339
		"kind: Error\nerror: [a, b]\n":             false,
		"kind: Error\nerror: {a: b}\n":             false,
		"kind: Error\nterminal: [yes]\n":           false,
		"- kind: Done\n":                           false,
		"just a string\n":                          false,
		"42\n":                                     false,
		"!!binary aGVsbG8=\n":                      false,
	} {
		for _, c := range yamlCodecs {
			t.Run(c.name+"/"+in, func(t *testing.T) {
				require.True(t, c.valid([]byte(in)), "test input must be valid YAML")
				st := status.Done()
				var err error
				require.NotPanics(t, func() { err = c.unmarshal([]byte(in), &st) })
				requireDecodeError(t, err)
				if malformed {
					assert.ErrorIs(t, err, status.ErrMalformed)
					assert.ErrorContains(t, err, "unknown kind")
				}
			})
		}
	}
}

func TestStatusMalformedYAMLInStruct(t *testing.T) {
	type object struct {
		Status status.Status `yaml:"status"`
	}
	for _, c := range yamlCodecs {
		var obj object
		err := c.unmarshal([]byte("status:\n  kind: Bogus\n"), &obj)
		require.Error(t, err, c.name)
		assert.ErrorIs(t, err, status.ErrMalformed, c.name)
	}
}

func TestStatusMarshalUnknownKind(t *testing.T) {
	st := status.Status{Kind: status.Kind(9)}
	for _, c := range allCodecs {
		var err error
		require.NotPanics(t, func() { _, err = c.marshal(st) }, c.name)
		require.Error(t, err, c.name)
		if c.name == jsonCodec.name {
			// encoding/json wraps the MarshalText error so it can be
			// inspected; the YAML libraries flatten it to text.
			assert.ErrorIs(t, err, status.ErrMalformed)
		}
		assert.Contains(t, err.Error(), "unknown kind", c.name)
	}
}

func TestStatusInNamedFieldDecodesWholeObject(t *testing.T) {
	// The documented way to carry a status: a named field. All of the
	// object's fields survive decoding.
	type object struct {
		Name   string        `json:"name" yaml:"name"`
		Status status.Status `json:"status" yaml:"status"`
		Count  int           `json:"count" yaml:"count"`
	}
	inputs := map[string]string{
		jsonCodec.name: `{"name":"x","status":{"kind":"Done"},"count":3}`,
		yamlCodec.name: "name: x\nstatus: {kind: Done}\ncount: 3\n",
	}
	for _, c := range allCodecs {
		var o object
		require.NoError(t, c.unmarshal([]byte(inputs[c.name]), &o), c.name)
		assert.Equal(t, "x", o.Name, c.name)
		assert.Equal(t, 3, o.Count, c.name)
		assert.Equal(t, status.KindDone, o.Status.Kind, c.name)
	}
}

// An error text or terminal flag on a status other than Error, which no
// constructor writes, is kept as decoded and ignored by everything that reads
// the status; in a Set it is an error.
func TestStatusErrorFieldsOnOtherKindsAreIgnored(t *testing.T) {
	for _, c := range allCodecs {
		var st status.Status
		require.NoError(t, c.unmarshal([]byte(`{"kind":"Done","error":"boom","terminal":true}`), &st), c.name)
		assert.Equal(t, status.KindDone, st.Kind, c.name)
		assert.Empty(t, st.GetError(), c.name)
		assert.Equal(t, "Done", st.String(), c.name)

		var s status.Set
		err := c.unmarshal([]byte(`{"a":{"kind":"Done","terminal":true}}`), &s)
		require.ErrorIs(t, err, status.ErrMalformed, c.name)
		require.ErrorContains(t, err, `"a": terminal flag on a Done status`, c.name)
		err = c.unmarshal([]byte(`{"a":{"kind":"Pending","error":"boom"}}`), &s)
		require.ErrorIs(t, err, status.ErrMalformed, c.name)
		require.ErrorContains(t, err, `"a": error text on a Pending status`, c.name)
	}
}

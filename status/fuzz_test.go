package status_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"testing"

	"github.com/stretchr/testify/require"

	convergeindex "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/status"
)

// Seeds shared by the fuzzers in addition to the checked-in corpus under
// testdata/fuzz.
var (
	statusJSONSeeds = []string{
		`{"kind":"Done","updated-at":"2024-01-02T03:04:05Z"}`,
		`{"kind":"Error","updated-at":"2024-01-02T03:04:05.123456789+05:30","error":"disk full"}`,
		`{"kind":"Pending"}`,
		`{"kind":"Refreshing","updated-at":"0001-01-01T00:00:00Z"}`,
		`{"kind":""}`,
		`{"kind":"Bogus"}`,
		`{"kind":"Done","error":"x"}`,
		`{"kind":3}`,
		`null`,
		`[]`,
	}
	statusYAMLSeeds = []string{
		"kind: Done\nupdated-at: 2024-01-02T03:04:05Z\n",
		"kind: Error\nupdated-at: 2001-12-14 21:59:43.10 -5\nerror: |\n  multi\n  line\n",
		"kind: Pending\nupdated-at: 2024-01-02\n",
		"{kind: Refreshing, updated-at: \"2024-01-02T03:04:05+02:00\"}",
		"kind: ~\n",
		"kind: Bogus\n",
		"kind: Done\nerror: x\n",
		"a: &x {kind: Done}\nb: *x\n",
		"- 1\n",
		"",
	}
	setJSONSeeds = []string{
		`{}`,
		`{"a":{"kind":"Done","updated-at":"2024-01-02T03:04:05Z"},"b":{"kind":"Error","error":"boom"}}`,
		`{"":{"kind":"Pending"},"\u00e9":{"kind":"Refreshing"}}`,
		`{"a":null}`,
		`{"a":{}}`,
		`{"a":{"kind":"Bogus"}}`,
		`{"a":{"kind":"Done"},"a":{"kind":"Error","error":"dup"}}`,
		`null`,
		`[]`,
	}
	setYAMLSeeds = []string{
		"{}\n",
		"a:\n  kind: Done\n  updated-at: 2024-01-02T03:04:05Z\nb:\n  kind: Error\n  error: boom\n",
		"\"\": {kind: Pending}\n1: {kind: Done}\n~: {kind: Done}\n",
		"a: &s {kind: Done}\nb: *s\n",
		"a: ~\n",
		"a: {kind: Bogus}\n",
		"a: {kind: Done}\na: {kind: Done}\n",
		"<<: {a: {kind: Done}}\n",
		"- a\n",
		"",
	}
)

// checkStatusDecode decodes data with c and, if that works, checks that the
// result survives a round trip through every codec that can decode c's
// output. On data that c considers well-formed, a decode error must be one
// that says what is wrong (see requireDecodeError). Decoded into an object
// that embeds Status, data gives the same status.
func checkStatusDecode(t *testing.T, c codec, data []byte, decoders []codec) {
	var st status.Status
	err := c.unmarshal(data, &st)
	checkEmbeddedStatusDecode(t, c, data, st, err)
	if err != nil {
		if c.valid(data) {
			requireDecodeError(t, err)
		}
		return
	}
	require.Zero(t, st.ID(), "a status decoded outside a Set has no identity")
	if st.Kind != status.KindError {
		require.Empty(t, st.GetError(), "%s: error text read on a %s status", c.name, st.Kind)
	}

	out, err := c.marshal(st)
	require.NoError(t, err, "%s: re-encoding %#v decoded from %q", c.name, st, data)
	for _, d := range decoders {
		var again status.Status
		err := d.unmarshal(out, &again)
		if err != nil || !sameStatus(st, again) {
			skipIfLibraryCannotRoundTrip(t, c, d, nil, []string{st.Error})
		}
		require.NoError(t, err, "%s: decoding %q (from %q)", d.name, out, data)
		requireSameStatus(t, st, again)
		require.Zero(t, again.ID())
	}
}

// checkEmbeddedStatusDecode decodes data into an object that embeds Status
// (in YAML, inline: an anonymous field alone is nested under "status") and
// checks that it gets the status that decoding data alone gave (want, or
// wantErr), and the object's own field.
func checkEmbeddedStatusDecode(t *testing.T, c codec, data []byte, want status.Status, wantErr error) {
	type object struct {
		Note          string `json:"note" yaml:"note"`
		status.Status `yaml:",inline"`
	}
	var (
		obj     object
		note    struct{ Note string }
		noteErr = c.unmarshal(data, &note)
		err     = c.unmarshal(data, &obj)
	)
	if wantErr != nil || noteErr != nil {
		return // either part alone may fail, and fail first
	}
	require.NoError(t, err, "%s: %q decodes alone but not embedded", c.name, data)
	requireSameStatus(t, want, obj.Status)
	require.Equal(t, note.Note, obj.Note, "%s: the object's own field in %q", c.name, data)
}

func checkSetDecode(t *testing.T, c codec, data []byte, decoders []codec) {
	var s status.Set
	err := c.unmarshal(data, &s)
	if err != nil {
		if c.valid(data) {
			require.ErrorIs(t, err, status.ErrMalformed, "%s: %q", c.name, data)
		}
		return
	}
	// A decoded set works like any other.
	_ = s.String()
	require.Equal(t, status.KindPending, s.Get("\x00never-a-name").Kind)
	for name, st := range s.All() {
		require.Equal(t, st, s.Get(name), "Get(%q) disagrees with All", name)
	}

	out, err := c.marshal(s)
	require.NoError(t, err, "%s: re-encoding set decoded from %q", c.name, data)
	for _, d := range decoders {
		var again status.Set
		err := d.unmarshal(out, &again)
		if err != nil || !sameSet(s, again) {
			var names, texts []string
			for name, st := range s.All() {
				names = append(names, name)
				texts = append(texts, st.Error)
			}
			skipIfLibraryCannotRoundTrip(t, c, d, names, texts)
		}
		require.NoError(t, err, "%s: decoding %q (from %q)", d.name, out, data)
		requireSameSet(t, s, again)
	}
}

func sameStatus(a, b status.Status) bool {
	return a.Kind == b.Kind && a.Error == b.Error && a.Terminal == b.Terminal && a.UpdatedAt.Equal(b.UpdatedAt)
}

func sameSet(a, b status.Set) bool {
	am, bm := maps.Collect(a.All()), maps.Collect(b.All())
	if len(am) != len(bm) {
		return false
	}
	for name, st := range am {
		other, ok := bm[name]
		if !ok || !sameStatus(st, other) {
			return false
		}
	}
	return true
}

// skipIfLibraryCannotRoundTrip skips the input when encoding with enc and
// decoding with dec loses one of the given map keys or string values even in
// a plain map[string]string: that is a limitation of the library, not of
// status. The yaml.v3 encoders have two such bugs, both in how they write
// multi-line strings as literal blocks: gopkg.in/yaml.v3 v3.0.1 drops
// leading newlines ("\n00" reads back as "00"), and both write a line
// holding only a tab in a way they cannot read back ("a\n\t\nb").
func skipIfLibraryCannotRoundTrip(t *testing.T, enc, dec codec, keys, values []string) {
	t.Helper()
	roundTrips := func(m map[string]string) bool {
		out, err := enc.marshal(m)
		if err != nil {
			return false
		}
		var back map[string]string
		if dec.unmarshal(out, &back) != nil || len(back) != len(m) {
			return false
		}
		for k, v := range m {
			if got, ok := back[k]; !ok || got != v {
				return false
			}
		}
		return true
	}
	for _, k := range keys {
		if !roundTrips(map[string]string{k: "v"}) {
			t.Skipf("%s then %s cannot round-trip the key %q", enc.name, dec.name, k)
		}
	}
	for _, v := range values {
		if !roundTrips(map[string]string{"k": v}) {
			t.Skipf("%s then %s cannot round-trip the string %q", enc.name, dec.name, v)
		}
	}
}

func FuzzStatusJSON(f *testing.F) {
	for _, s := range statusJSONSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkStatusDecode(t, jsonCodec, data, []codec{jsonCodec})
	})
}

func FuzzStatusYAML(f *testing.F) {
	for _, s := range statusYAMLSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkStatusDecode(t, yamlCodec, data, yamlCodecs)
	})
}

func FuzzSetJSON(f *testing.F) {
	for _, s := range setJSONSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkSetDecode(t, jsonCodec, data, []codec{jsonCodec})
	})
}

func FuzzSetYAML(f *testing.F) {
	for _, s := range setYAMLSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkSetDecode(t, yamlCodec, data, yamlCodecs)
	})
}

func FuzzKindKey(f *testing.F) {
	for _, tc := range allKinds {
		f.Add(tc.name, uint8(tc.kind))
	}
	f.Add("", uint8(5))
	f.Add("pending", uint8(255))
	f.Add("Kind(5)", uint8(6))

	idx := convergeindex.NewStatusIndex(func(st status.Status) status.Status { return st })

	f.Fuzz(func(t *testing.T, s string, n uint8) {
		// Parsing a string: ParseKind, UnmarshalText and the index's
		// FromString agree.
		k, err := status.ParseKind(s)
		key, keyErr := idx.FromString(s)
		var viaText status.Kind
		textErr := viaText.UnmarshalText([]byte(s))
		if err != nil {
			require.ErrorIs(t, err, status.ErrMalformed)
			require.ErrorIs(t, keyErr, status.ErrMalformed)
			require.ErrorIs(t, textErr, status.ErrMalformed)
			require.Equal(t, status.KindUnset, k)
		} else {
			require.NoError(t, keyErr)
			require.NoError(t, textErr)
			require.Equal(t, k, viaText)
			require.Equal(t, k.Key(), key)
			require.Equal(t, idx.FromKey(k), key)
			if s != "" {
				require.Equal(t, s, k.String(), "only canonical names parse")
			} else {
				require.Equal(t, status.KindUnset, k)
			}
		}

		// A kind from a number: defined kinds round-trip through their
		// name and have their own key; others fail to encode and index
		// like KindUnset.
		kind := status.Kind(n)
		require.NotEmpty(t, kind.Key())
		text, mErr := kind.MarshalText()
		parsed, pErr := status.ParseKind(kind.String())
		if n <= uint8(status.KindError) {
			require.NoError(t, mErr)
			require.NoError(t, pErr)
			require.Equal(t, kind, parsed)
			require.Equal(t, kind.String(), string(text))
			for _, other := range allKinds {
				require.Equal(t, other.kind == kind, bytes.Equal(other.kind.Key(), kind.Key()),
					"keys of %s and %s", kind, other.kind)
			}
			fromString, err := idx.FromString(kind.String())
			require.NoError(t, err)
			require.Equal(t, kind.Key(), fromString)
		} else {
			require.ErrorIs(t, mErr, status.ErrMalformed)
			require.ErrorIs(t, pErr, status.ErrMalformed)
			require.Equal(t, status.KindUnset.Key(), kind.Key())
			_, jErr := json.Marshal(status.Status{Kind: kind})
			require.True(t, errors.Is(jErr, status.ErrMalformed), "json error %v", jErr)
		}
		require.Equal(t, kind.Key(), idx.FromKey(kind))
	})
}

package status_test

import (
	"testing"
	"time"

	"github.com/cilium/statedb/reconciler"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/status"
)

// Objects carrying a status the two ways users of the StateDB reconciler
// write them, each next to the same object built on that reconciler's
// Status.
type (
	embeddedObject struct {
		Name string `json:"name" yaml:"name"`
		status.Status
	}
	upstreamEmbeddedObject struct {
		Name string `json:"name" yaml:"name"`
		reconciler.Status
	}
	namedObject struct {
		Name   string        `json:"name" yaml:"name"`
		Status status.Status `json:"status" yaml:"status"`
	}
	upstreamNamedObject struct {
		Name   string            `json:"name" yaml:"name"`
		Status reconciler.Status `json:"status" yaml:"status"`
	}
)

// upstreamStatus is st as the StateDB reconciler's Status, without an
// identity.
func upstreamStatus(t testing.TB, st status.Status) reconciler.Status {
	t.Helper()
	up := reconciler.Status{UpdatedAt: st.UpdatedAt}
	switch st.Kind {
	case status.KindPending:
		up.Kind = reconciler.StatusKindPending
	case status.KindRefreshing:
		up.Kind = reconciler.StatusKindRefreshing
	case status.KindDone:
		up.Kind = reconciler.StatusKindDone
	case status.KindError:
		up.Kind = reconciler.StatusKindError
		text := st.Error
		up.Error = &text
	default:
		t.Fatalf("no StateDB kind for %s", st.Kind)
	}
	return up
}

// requireSameAsUpstream checks that st says what the StateDB reconciler's
// status up says.
func requireSameAsUpstream(t testing.TB, up reconciler.Status, st status.Status) {
	t.Helper()
	require.Equal(t, up.Kind.String(), st.Kind.String())
	require.True(t, up.UpdatedAt.Equal(st.UpdatedAt), "updated-at: StateDB %v, converge %v", up.UpdatedAt, st.UpdatedAt)
	require.Equal(t, up.GetError(), st.Error)
}

// statusesToEmbed are statuses the StateDB reconciler's Status can also
// hold: one of each kind, not terminal.
func statusesToEmbed() []status.Status {
	at := time.Date(2024, 1, 2, 3, 4, 5, 6, time.UTC)
	return []status.Status{
		{Kind: status.KindPending, UpdatedAt: at},
		{Kind: status.KindRefreshing, UpdatedAt: at},
		{Kind: status.KindDone, UpdatedAt: at},
		{Kind: status.KindError, UpdatedAt: at, Error: "disk full"},
	}
}

// decodeGeneric decodes data into plain maps, dropping the key "id", the
// StateDB reconciler's encoded identity, at the top and under "status".
func decodeGeneric(t testing.TB, c codec, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, c.unmarshal(data, &m), "%s: %s", c.name, data)
	delete(m, "id")
	if nested, ok := m["status"].(map[string]any); ok {
		delete(nested, "id")
	}
	return m
}

func TestEmbeddedStatusDecodesWithTheObject(t *testing.T) {
	// The forms the StateDB reconciler's Status takes in an object: its
	// fields are the object's own in JSON when embedded, and under
	// "status" otherwise (YAML does not inline an embedded field unasked).
	nested := map[string]string{
		jsonCodec.name: `{"name":"web","status":{"kind":"Error","updated-at":"2024-01-02T03:04:05Z","error":"boom"}}`,
		yamlCodec.name: "name: web\nstatus:\n  kind: Error\n  updated-at: 2024-01-02T03:04:05Z\n  error: boom\n",
	}
	embedded := map[string]string{
		jsonCodec.name: `{"name":"web","kind":"Error","updated-at":"2024-01-02T03:04:05Z","error":"boom"}`,
		yamlCodec.name: nested[yamlCodec.name],
	}
	for _, c := range allCodecs {
		t.Run("embedded/"+c.name, func(t *testing.T) {
			in := []byte(embedded[c.name])
			var up upstreamEmbeddedObject
			require.NoError(t, c.unmarshal(in, &up))
			var got embeddedObject
			require.NoError(t, c.unmarshal(in, &got))
			assert.Equal(t, "web", got.Name, "the object's own field")
			assert.Equal(t, up.Name, got.Name)
			requireSameAsUpstream(t, up.Status, got.Status)
			assert.Equal(t, status.KindError, got.Kind)
			assert.Zero(t, got.ID(), "a status decoded outside a Set has no identity")
		})
		t.Run("named/"+c.name, func(t *testing.T) {
			in := []byte(nested[c.name])
			var up upstreamNamedObject
			require.NoError(t, c.unmarshal(in, &up))
			var got namedObject
			require.NoError(t, c.unmarshal(in, &got))
			assert.Equal(t, "web", got.Name)
			requireSameAsUpstream(t, up.Status, got.Status)
			assert.Equal(t, status.KindError, got.Status.Kind)
		})
	}
}

func TestEmbeddedStatusRoundTripsLikeStateDBs(t *testing.T) {
	for _, c := range allCodecs {
		for _, st := range statusesToEmbed() {
			t.Run("embedded/"+c.name+"/"+st.Kind.String(), func(t *testing.T) {
				in := embeddedObject{Name: "web", Status: st}
				upIn := upstreamEmbeddedObject{Name: "web", Status: upstreamStatus(t, st)}
				data, err := c.marshal(in)
				require.NoError(t, err)
				upData, err := c.marshal(upIn)
				require.NoError(t, err)
				assert.Equal(t, decodeGeneric(t, c, upData), decodeGeneric(t, c, data),
					"the same keys as the StateDB reconciler's, its id aside:\n%s\n%s", data, upData)

				var out embeddedObject
				require.NoError(t, c.unmarshal(data, &out), "decoding %s", data)
				assert.Equal(t, "web", out.Name, "the object's own field survives %s", data)
				requireSameStatus(t, st, out.Status)

				// Each reads what the other wrote.
				var fromUp embeddedObject
				require.NoError(t, c.unmarshal(upData, &fromUp), "decoding %s", upData)
				assert.Equal(t, "web", fromUp.Name)
				requireSameStatus(t, st, fromUp.Status)
				var upOut upstreamEmbeddedObject
				require.NoError(t, c.unmarshal(data, &upOut), "decoding %s", data)
				assert.Equal(t, "web", upOut.Name)
				requireSameAsUpstream(t, upOut.Status, st)
			})
			t.Run("named/"+c.name+"/"+st.Kind.String(), func(t *testing.T) {
				in := namedObject{Name: "web", Status: st}
				upIn := upstreamNamedObject{Name: "web", Status: upstreamStatus(t, st)}
				data, err := c.marshal(in)
				require.NoError(t, err)
				upData, err := c.marshal(upIn)
				require.NoError(t, err)
				assert.Equal(t, decodeGeneric(t, c, upData), decodeGeneric(t, c, data),
					"the same keys as the StateDB reconciler's, its id aside:\n%s\n%s", data, upData)

				var out namedObject
				require.NoError(t, c.unmarshal(data, &out), "decoding %s", data)
				assert.Equal(t, "web", out.Name)
				requireSameStatus(t, st, out.Status)

				var fromUp namedObject
				require.NoError(t, c.unmarshal(upData, &fromUp), "decoding %s", upData)
				assert.Equal(t, "web", fromUp.Name)
				requireSameStatus(t, st, fromUp.Status)
				var upOut upstreamNamedObject
				require.NoError(t, c.unmarshal(data, &upOut), "decoding %s", data)
				assert.Equal(t, "web", upOut.Name)
				requireSameAsUpstream(t, upOut.Status, st)
			})
		}
	}
}

// A terminal status, which the StateDB reconciler cannot express, also
// travels with its object.
func TestEmbeddedTerminalStatusRoundTrips(t *testing.T) {
	st := status.TerminalErrorAt(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC), assert.AnError)
	for _, c := range allCodecs {
		data, err := c.marshal(embeddedObject{Name: "web", Status: st})
		require.NoError(t, err, c.name)
		var out embeddedObject
		require.NoError(t, c.unmarshal(data, &out), "%s: decoding %s", c.name, data)
		assert.Equal(t, "web", out.Name, c.name)
		requireSameStatus(t, st, out.Status)
		assert.True(t, out.Terminal, c.name)
	}
}

func TestSetInNamedFieldRoundTripsLikeStateDBs(t *testing.T) {
	type object struct {
		Name     string     `json:"name" yaml:"name"`
		Statuses status.Set `json:"statuses" yaml:"statuses"`
	}
	type upstreamObject struct {
		Name     string               `json:"name" yaml:"name"`
		Statuses reconciler.StatusSet `json:"statuses" yaml:"statuses"`
	}
	sts := statusesToEmbed()
	set, upSet := status.NewSet(), reconciler.NewStatusSet()
	for i, name := range []string{"a", "b", "c", "d"} {
		set = set.Set(name, sts[i])
		upSet = upSet.Set(name, upstreamStatus(t, sts[i]))
	}
	withoutIDs := func(m map[string]any) map[string]any {
		for _, st := range m["statuses"].(map[string]any) {
			delete(st.(map[string]any), "id")
		}
		return m
	}
	for _, c := range allCodecs {
		t.Run(c.name, func(t *testing.T) {
			data, err := c.marshal(object{Name: "web", Statuses: set})
			require.NoError(t, err)
			upData, err := c.marshal(upstreamObject{Name: "web", Statuses: upSet})
			require.NoError(t, err)
			assert.Equal(t, withoutIDs(decodeGeneric(t, c, upData)), withoutIDs(decodeGeneric(t, c, data)),
				"the same keys as the StateDB reconciler's, its ids aside:\n%s\n%s", data, upData)

			for _, in := range [][]byte{data, upData} {
				var out object
				require.NoError(t, c.unmarshal(in, &out), "decoding %s", in)
				assert.Equal(t, "web", out.Name)
				requireSameSet(t, set, out.Statuses)
				for name, st := range out.Statuses.All() {
					if st.IsPendingOrRefreshing() {
						assert.NotZero(t, st.ID(), "%s: a Pending or Refreshing status decoded in a Set is a new write", name)
					} else {
						assert.Zero(t, st.ID(), "%s: a Done or Error decoded in a Set has no age", name)
					}
				}
			}
			if c.name == jsonCodec.name {
				// The StateDB reconciler's StatusSet decodes only JSON.
				var upOut upstreamObject
				require.NoError(t, c.unmarshal(data, &upOut), "decoding %s", data)
				assert.Equal(t, "web", upOut.Name)
				for i, name := range []string{"a", "b", "c", "d"} {
					requireSameAsUpstream(t, upOut.Statuses.Get(name), sts[i])
				}
			}
		})
	}
}

// Embedded anonymously, a Set's encoding methods stand for the whole
// object, as a StatusSet's do in the StateDB reconciler: the object encodes
// as its set alone. Decoding such an object fails rather than dropping its
// fields. The Set's documentation says to keep it in a named field.
func TestEmbeddedSetStandsForTheObject(t *testing.T) {
	type object struct {
		Name string `json:"name" yaml:"name"`
		status.Set
	}
	type upstreamObject struct {
		Name string `json:"name" yaml:"name"`
		reconciler.StatusSet
	}
	st := statusesToEmbed()[2]
	set := status.NewSet().Set("a", st)
	upSet := reconciler.NewStatusSet().Set("a", upstreamStatus(t, st))
	for _, c := range allCodecs {
		t.Run(c.name, func(t *testing.T) {
			data, err := c.marshal(object{Name: "web", Set: set})
			require.NoError(t, err)
			alone, err := c.marshal(set)
			require.NoError(t, err)
			assert.Equal(t, string(alone), string(data), "the set stands for the object")
			upData, err := c.marshal(upstreamObject{Name: "web", StatusSet: upSet})
			require.NoError(t, err)
			assert.NotContains(t, string(upData), "web", "the same with the StateDB reconciler")

			var out object
			err = c.unmarshal([]byte(`{"name":"web","a":{"kind":"Done"}}`), &out)
			require.ErrorIs(t, err, status.ErrMalformed)
		})
	}
}

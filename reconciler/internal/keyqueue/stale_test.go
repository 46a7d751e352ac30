package keyqueue

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/converge-go/converge/internal/ident"
	"github.com/converge-go/converge/status"
)

// TestStaleAfterDelete checks the cuts of staleCuts: a status created
// before a delete of its key was read is stale, one created after is not,
// a commit's cut lies just below the version it applied, and between one
// and two generations of keys are kept.
func TestStaleAfterDelete(t *testing.T) {
	var lc staleCuts
	before := status.Done()
	assert.False(t, lc.cut([]byte("a"), before.ID()), "nothing recorded yet")

	lc.supersede([]byte("a"), ident.Last())
	after := status.Done()
	assert.True(t, lc.cut([]byte("a"), before.ID()), "created before the delete was read")
	assert.False(t, lc.cut([]byte("a"), after.ID()), "created after")
	assert.False(t, lc.cut([]byte("b"), before.ID()), "another key")
	assert.True(t, lc.cut([]byte("a"), 0), "no identity: no age, stale")
	assert.False(t, lc.cut([]byte("a"), 0), "no identity: stale once per delete")
	assert.True(t, lc.cut([]byte("a"), before.ID()), "identities are still compared")
	assert.False(t, lc.cut([]byte("b"), 0), "no identity, another key")

	applied := status.Pending()
	lc.supersede([]byte("c"), applied.ID()-1)
	assert.True(t, lc.cut([]byte("c"), after.ID()), "older than the version applied")
	assert.False(t, lc.cut([]byte("c"), applied.ID()), "the version applied itself")
	lc.supersede([]byte("a"), after.ID()-1)
	assert.False(t, lc.cut([]byte("a"), after.ID()), "a later cut never lowers")

	lc.supersede([]byte("a"), ident.Last())
	assert.True(t, lc.cut([]byte("a"), 0), "no identity: stale again after another delete")

	for i := range supersededGeneration - 2 {
		lc.supersede(fmt.Appendf(nil, "k%d", i), ident.Last())
	}
	assert.True(t, lc.cut([]byte("a"), before.ID()), "one generation is kept whole")
	for i := range supersededGeneration {
		lc.supersede(fmt.Appendf(nil, "m%d", i), ident.Last())
	}
	assert.True(t, lc.cut([]byte("k0"), before.ID()), "the previous generation is kept")
	for i := range supersededGeneration {
		lc.supersede(fmt.Appendf(nil, "n%d", i), ident.Last())
	}
	assert.False(t, lc.cut([]byte("k0"), before.ID()), "two generations back are dropped")
	assert.LessOrEqual(t, len(lc.cur)+len(lc.old), 2*supersededGeneration)
}

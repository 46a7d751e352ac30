package report

import (
	"context"
	"sync"

	"github.com/cilium/statedb"
)

// Progress publishes how far the reconciler has got, for
// WaitUntilReconciled. Make one with NewProgress. The loop updates it; it
// is safe for concurrent use, and any goroutine may wait on it.
type Progress struct {
	mu       sync.Mutex
	revision statedb.Revision
	low      statedb.Revision
	changed  chan struct{} // closed and replaced on every change
}

// NewProgress returns a Progress at revision 0.
func NewProgress() *Progress {
	return &Progress{changed: make(chan struct{})}
}

// Update records that every change up to revision is done and that the
// lowest revision waiting for a retry is low. The revision never goes back.
func (p *Progress) Update(revision, low statedb.Revision) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if revision <= p.revision && low == p.low {
		return
	}
	p.revision = max(p.revision, revision)
	p.low = low
	close(p.changed)
	p.changed = make(chan struct{})
}

// Wait blocks until every change up to revision is done, or ctx ends, and
// returns the revision reached and the lowest revision waiting for a retry.
func (p *Progress) Wait(ctx context.Context, revision statedb.Revision) (statedb.Revision, statedb.Revision, error) {
	for {
		p.mu.Lock()
		current, low, changed := p.revision, p.low, p.changed
		p.mu.Unlock()
		if current >= revision {
			return current, low, nil
		}
		select {
		case <-ctx.Done():
			return current, low, ctx.Err()
		case <-changed:
		}
	}
}

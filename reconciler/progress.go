package reconciler

import (
	"context"
	"sync"

	"github.com/cilium/statedb"
)

// progress publishes how far the reconciler has got, for
// WaitUntilReconciled. The loop updates it; any goroutine may wait on it.
type progress struct {
	mu       sync.Mutex
	revision statedb.Revision
	low      statedb.Revision
	changed  chan struct{} // closed and replaced on every change
}

func newProgress() *progress {
	return &progress{changed: make(chan struct{})}
}

// update records that every change up to revision is done and that the
// lowest revision waiting for a retry is low. The revision never goes back.
func (p *progress) update(revision, low statedb.Revision) {
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

func (p *progress) wait(ctx context.Context, revision statedb.Revision) (statedb.Revision, statedb.Revision, error) {
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

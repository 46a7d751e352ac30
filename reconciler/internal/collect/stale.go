package collect

import "github.com/cilium/statedb"

// staleness remembers which statuses of this reconciler, found on an
// object put back, are stale: made before the target changed since (a
// delete read, a newer version applied: the key queue's cuts, see
// keyqueue.Queue.Stale; a prune: the snapshots below), so the object is new
// work whatever its status says. The zero value remembers nothing. The
// loop's goroutine owns it.
type staleness struct {
	pruned []pruneSnapshot // oldest first
}

// pruneSnapshot is the snapshot a prune ran with while changes up to its
// revision were unread. The prune may have removed from the target an
// object whose delete was not read yet; put back before the read, its
// delete never shows. Such an object, absent from the snapshot of a prune
// kept and with a status no newer than cut (the greatest identity handed
// out when the snapshot was taken), is stale. Every such prune is kept
// until the changes read pass it (see readUpTo), not only the last.
type pruneSnapshot struct {
	txn   statedb.ReadTxn
	rev   statedb.Revision
	cut   uint64
	until statedb.Revision // once known, kept until the changes read reach it
}

// any reports whether a prune's snapshot is remembered (the key queue's
// cuts are told by its Figures().Stale).
func (m *staleness) any() bool { return len(m.pruned) > 0 }

// sawPrune records the snapshot of a prune that ran while changes up to its
// revision rev were still unread; cut is the greatest status identity
// handed out when it was taken.
func (m *staleness) sawPrune(txn statedb.ReadTxn, rev statedb.Revision, cut uint64) {
	m.pruned = append(m.pruned, pruneSnapshot{txn: txn, rev: rev, cut: cut})
}

// readUpTo drops the prunes' snapshots that can no longer be needed: read
// is the last change read, txnRev the revision of the snapshot it was read
// from. Once read passes a prune's revision, a delete before it has shown,
// or its key was put back and the object put back shows by txnRev at the
// latest: the snapshot is kept until read passes that txnRev too.
func (m *staleness) readUpTo(read, txnRev statedb.Revision) {
	kept := m.pruned[:0]
	for _, p := range m.pruned {
		if read >= p.rev && p.until == 0 {
			p.until = txnRev
		}
		if p.until == 0 || read < p.until {
			kept = append(kept, p)
		}
	}
	clear(m.pruned[len(kept):])
	m.pruned = kept
	if len(kept) == 0 {
		m.pruned = nil
	}
}

package reconciler

import (
	"hash/maphash"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/internal/ident"
)

// staleness remembers which statuses of this reconciler, found on an
// object put back, are stale: made before the target changed since (a
// delete read, a newer version applied, a prune), so the object is new
// work whatever its status says. Per key it keeps a cut (identities
// increase; see package ident), for between one and two generations of
// keys, by 64-bit hash: a collision costs a needless Update, never a lost
// one. The zero value remembers nothing. The loop's goroutine owns it.
type staleness struct {
	seed     maphash.Seed
	cur, old map[uint64]uint64 // key hash → cut; old is the generation before
	pruned   []pruneSnapshot   // oldest first
}

// supersededGeneration is the number of keys one generation of cuts
// holds: about 150 KiB of memory.
const supersededGeneration = 1 << 13

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

// any reports whether anything is remembered: a cut or a prune's snapshot.
func (m *staleness) any() bool { return m.cur != nil || len(m.pruned) > 0 }

// sawDelete records that a delete of key was read: every status handed out
// so far is stale for the key.
func (m *staleness) sawDelete(key []byte) { m.supersede(key, ident.Last()) }

// sawOlder records that a commit found the object of key written back with
// a status older than statusID, the identity of the status that asked for
// the version it applied: the target holds a newer version.
func (m *staleness) sawOlder(key []byte, statusID uint64) { m.supersede(key, statusID-1) }

// supersede raises the cut of key to cut.
func (m *staleness) supersede(key []byte, cut uint64) {
	if m.cur == nil {
		m.seed = maphash.MakeSeed()
		m.cur = make(map[uint64]uint64)
	}
	h := maphash.Bytes(m.seed, key)
	if c, ok := m.cur[h]; ok {
		m.cur[h] = max(c&^unagedTaken, cut)
		return
	}
	if len(m.cur) >= supersededGeneration {
		clear(m.old)
		m.old, m.cur = m.cur, m.old
		if m.cur == nil {
			m.cur = make(map[uint64]uint64, supersededGeneration)
		}
	}
	m.cur[h] = max(m.old[h]&^unagedTaken, cut)
}

// cut reports whether statusID, a status found on an object of key, is no
// newer than the cut of key. A status without identity (statusID 0) has
// no age: it is taken for stale once per cut, the first time it is asked,
// so that two reconcilers whose statuses lose their identity (a getStatus
// that builds them from fields of its own) do not apply one object in turn
// for ever, each taking the other's write for a put-back.
func (m *staleness) cut(key []byte, statusID uint64) bool {
	if m.cur == nil {
		return false
	}
	h := maphash.Bytes(m.seed, key)
	gen := m.cur
	c, ok := gen[h]
	if !ok {
		gen = m.old
		c, ok = gen[h]
	}
	switch {
	case !ok:
		return false
	case statusID == 0:
		gen[h] = c | unagedTaken
		return c&unagedTaken == 0
	}
	return statusID <= c&^unagedTaken
}

// unagedTaken marks a cut for which a status without identity was taken
// for stale (see cut). Identities never reach it.
const unagedTaken = 1 << 63

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

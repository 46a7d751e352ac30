package keyqueue

import "hash/maphash"

// staleCuts remembers which statuses of this reconciler, found on an object
// put back, are stale: made before the target changed since (a delete
// read, a newer version applied), so the object is new work whatever its
// status says. Per key it keeps a cut (status identities increase: see
// status.Status.ID), for between one and two generations of keys, by
// 64-bit hash: a collision costs a needless Update, never a lost one. The
// zero value remembers nothing. What a prune may have removed is the
// reconciler's to remember (its prune snapshots).
type staleCuts struct {
	seed     maphash.Seed
	cur, old map[uint64]uint64 // key hash → cut; old is the generation before
}

// supersededGeneration is the number of keys one generation of cuts
// holds: about 150 KiB of memory.
const supersededGeneration = 1 << 13

// any reports whether a cut is remembered.
func (m *staleCuts) any() bool { return m.cur != nil }

// supersede raises the cut of key to cut: every status up to the
// identity cut is stale for the key. A delete read cuts at the last
// identity handed out; a status found written back over the version a
// commit applied, just below the identity of the status that asked for
// that version.
func (m *staleCuts) supersede(key []byte, cut uint64) {
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
func (m *staleCuts) cut(key []byte, statusID uint64) bool {
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
// for stale (see Cut). Identities never reach it.
const unagedTaken = 1 << 63

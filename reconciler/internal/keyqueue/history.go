package keyqueue

import (
	"strings"
	"time"
	"unicode/utf8"
)

// Each failing key's recent errors: the last HistoryLen distinct errors of
// the version it retries, oldest first, kept with its record from its
// first failure until the record's failure ends (a success, a terminal
// error, a newer version or a delete of the key, the object changed: see
// resetFailure and forget), exactly as long as its row of the retries
// table lives.

const (
	// HistoryLen is how many distinct errors a failing key keeps.
	HistoryLen = 4
	// MaxErrorText bounds each error text kept, in bytes; a longer one is
	// cut at a rune boundary and ends with "…" (3 bytes more).
	MaxErrorText = 256
)

// ErrorRecord is one error of a failing key's history: its text (bounded
// by MaxErrorText), when the last failure with that text was recorded,
// and which attempt it was (the key's attempts counted then).
type ErrorRecord struct {
	Error   string
	At      time.Time
	Attempt int
}

// errorHistory is a key's errors, oldest first: n records of recs. It is
// made at a key's first failure and dropped with the failure, so that a
// key that does not fail costs one nil pointer.
type errorHistory struct {
	recs [HistoryLen]historyRecord
	n    uint8
}

// historyRecord is an ErrorRecord as kept: the time in Unix ns.
type historyRecord struct {
	text    string
	at      int64
	attempt int64
}

// recordError adds the failure err of s's task, its attempt-th, at to the
// history of s: a text equal to the newest record's updates that record's
// time and attempt, another is appended, dropping the oldest beyond
// HistoryLen.
func (s *State[Obj]) recordError(err error, at time.Time, attempt int) {
	text := ""
	if err != nil {
		text = boundText(err.Error())
	}
	h := s.hist
	if h == nil {
		h = &errorHistory{}
		s.hist = h
	}
	r := historyRecord{text: text, at: unixNanoSat(at), attempt: int64(attempt)}
	switch {
	case h.n > 0 && h.recs[h.n-1].text == text:
		h.recs[h.n-1].at, h.recs[h.n-1].attempt = r.at, r.attempt
		return
	case int(h.n) == HistoryLen:
		copy(h.recs[:], h.recs[1:])
		h.n--
	}
	// A copy: the text an error returns may share the memory of a larger
	// string, which the history would otherwise keep.
	r.text = strings.Clone(text)
	h.recs[h.n] = r
	h.n++
}

// boundText returns text cut to MaxErrorText bytes, at a rune boundary,
// with "…" appended, if it is longer (a new string, then).
func boundText(text string) string {
	if len(text) <= MaxErrorText {
		return text
	}
	cut := MaxErrorText
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return text[:cut] + "…"
}

// History appends to dst the recent errors of the record v is a copy of,
// oldest first (none if the key does not fail), and returns the extended
// slice. Unlike the other fields of v, the errors are read when History is
// called: call it before the next verb. The texts are shared, not copied:
// strings are immutable.
func (v View[Obj]) History(dst []ErrorRecord) []ErrorRecord {
	if v.hist == nil {
		return dst
	}
	for _, r := range v.hist.recs[:v.hist.n] {
		dst = append(dst, ErrorRecord{Error: r.text, At: time.Unix(0, r.at), Attempt: int(r.attempt)})
	}
	return dst
}

package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/converge-go/converge/tables"
)

// rowSet holds the rows of the two tables as last read, by primary key.
type rowSet struct {
	infos   map[string]*tables.Info      // by ID
	retries map[string]*tables.RetryInfo // by tables.RetryKey
	// seen is, per table, the highest revision the snapshot held: a change
	// at or below it is already in the rows.
	seen map[string]uint64
	// token is redacted from the rows' text.
	token string
	// sizes is the size of each row kept, as the agent encoded it, by
	// table and key; kept is their sum, at most maxKept.
	sizes map[string]map[string]int
	kept  int
}

// maxKept bounds the rows the command keeps of both tables together, as
// the agent encoded them: a snapshot and, with --watch, every change
// since. An agent that streams large rows under new keys fails the
// command, rather than grow its memory without bound. (A variable for the
// tests, which lower it to keep the race detector's time short.)
var maxKept = maxResponse

// keep records that the row of table at key is size bytes now (-1: it is
// deleted), and fails if the rows kept would pass maxKept.
func (t *rowSet) keep(table, key string, size int) error {
	if t.sizes == nil {
		t.sizes = map[string]map[string]int{}
	}
	if t.sizes[table] == nil {
		t.sizes[table] = map[string]int{}
	}
	old := t.sizes[table][key]
	if size < 0 {
		delete(t.sizes[table], key)
		t.kept -= old
		return nil
	}
	if t.kept-old+size > maxKept {
		return fmt.Errorf("%w: the rows of tables %s and %s pass %d bytes in all", errTooLarge,
			tables.ReconcilersTableName, tables.RetriesTableName, maxKept)
	}
	t.sizes[table][key] = size
	t.kept += size - old
	return nil
}

// snapshot reads both tables from src; token, if not empty, is redacted
// from their text.
func snapshot(ctx context.Context, src source, token string) (*rowSet, error) {
	t := &rowSet{infos: map[string]*tables.Info{}, retries: map[string]*tables.RetryInfo{}, seen: map[string]uint64{}, token: token}
	for _, table := range []struct{ name, index string }{
		{tables.ReconcilersTableName, tables.InfoByID.Name},
		{tables.RetriesTableName, tables.RetryByKey.Name},
	} {
		rows, err := src.query(ctx, table.name, table.index)
		if err != nil {
			return nil, err
		}
		var seen uint64
		for _, r := range rows {
			if err := t.put(table.name, r); err != nil {
				return nil, err
			}
			seen = max(seen, r.Rev)
		}
		t.seen[table.name] = seen
	}
	return t, nil
}

// apply applies a change of table, and reports whether the rows changed:
// a change the snapshot already held does not.
func (t *rowSet) apply(table string, r row) (bool, error) {
	if r.Rev <= t.seen[table] {
		return false, nil
	}
	return true, t.put(table, r)
}

// put puts a row of table in t, or deletes it.
func (t *rowSet) put(table string, r row) error {
	switch table {
	case tables.ReconcilersTableName:
		info, err := decodeInfo(r.Obj)
		if err != nil {
			return err
		}
		if r.Deleted {
			delete(t.infos, info.ID)
			return t.keep(table, info.ID, -1)
		}
		if _, ok := t.infos[info.ID]; !ok && len(t.infos) == maxRows {
			return fmt.Errorf("%w: table %s has more than %d rows", errTooLarge, table, maxRows)
		}
		if err := t.keep(table, info.ID, len(r.Obj)); err != nil {
			return err
		}
		id := info.ID // the key as the agent has it, for its deletion
		redactFields(info, t.token)
		t.infos[id] = info
	case tables.RetriesTableName:
		retry, err := decodeRetry(r.Obj)
		if err != nil {
			return err
		}
		key := tables.RetryKey(retry.Reconciler, retry.Key)
		if r.Deleted {
			delete(t.retries, key)
			return t.keep(table, key, -1)
		}
		if _, ok := t.retries[key]; !ok && len(t.retries) == maxRows {
			return fmt.Errorf("%w: table %s has more than %d rows", errTooLarge, table, maxRows)
		}
		if err := t.keep(table, key, len(r.Obj)); err != nil {
			return err
		}
		redactFields(retry, t.token)
		t.retries[key] = retry
	}
	return nil
}

// decodeInfo decodes a row of the reconcilers table, and checks that it
// has what this command relies on.
func decodeInfo(data json.RawMessage) (*tables.Info, error) {
	var info tables.Info
	if err := json.Unmarshal(data, &info); err != nil {
		return nil, versionError(tables.ReconcilersTableName, err)
	}
	switch {
	case info.ID == "":
		return nil, versionError(tables.ReconcilersTableName, fmt.Errorf("a row has no id"))
	case !slices.Contains([]tables.State{tables.StateRunning, tables.StateDegraded, tables.StatePaused, tables.StateStopped, tables.StateWaiting, tables.StateSettingUp}, info.State):
		return nil, versionError(tables.ReconcilersTableName, fmt.Errorf("reconciler %s has the unknown state %q", cleanText(info.ID), cleanText(string(info.State))))
	}
	return &info, nil
}

// decodeRetry decodes a row of the retries table, and checks that it has
// what this command relies on.
func decodeRetry(data json.RawMessage) (*tables.RetryInfo, error) {
	var retry tables.RetryInfo
	if err := json.Unmarshal(data, &retry); err != nil {
		return nil, versionError(tables.RetriesTableName, err)
	}
	if retry.Reconciler == "" {
		return nil, versionError(tables.RetriesTableName, fmt.Errorf("a row has no reconciler"))
	}
	return &retry, nil
}

func versionError(table string, err error) error {
	return fmt.Errorf("%w: a row of table %s does not decode as this command's converge version writes it "+
		"(is the agent built with another version of converge?): %v", errVersion, table, err)
}

// report is what the command shows, and prints with --json.
type report struct {
	Reconcilers []*tables.Info      `json:"reconcilers"`
	Retries     []*tables.RetryInfo `json:"retries"`
	// Degraded is true if a reconciler shown is degraded.
	Degraded bool `json:"degraded"`
	// filter is the ID of the reconciler picked by --reconciler, or ""; it
	// is gone if Reconcilers is empty.
	filter string
}

// report returns the row of the reconciler whose ID is id (every row,
// sorted by ID, if id is empty), and their failing objects, sorted by key.
// tables.pick finds the id that --reconciler names.
func (t *rowSet) report(id string) report {
	rep := report{Reconcilers: []*tables.Info{}, Retries: []*tables.RetryInfo{}, filter: id}
	shown := map[string]bool{}
	for _, info := range t.infos {
		if id == "" || info.ID == id {
			rep.Reconcilers = append(rep.Reconcilers, info)
			shown[info.ID] = true
			rep.Degraded = rep.Degraded || info.State == tables.StateDegraded || info.SetupError != ""
		}
	}
	for _, retry := range t.retries {
		if id == "" || shown[retry.Reconciler] {
			rep.Retries = append(rep.Retries, retry)
		}
	}
	slices.SortFunc(rep.Reconcilers, func(a, b *tables.Info) int { return strings.Compare(a.ID, b.ID) })
	slices.SortFunc(rep.Retries, func(a, b *tables.RetryInfo) int {
		return cmp.Or(strings.Compare(a.Reconciler, b.Reconciler), strings.Compare(a.Key, b.Key))
	})
	return rep
}

// exitStatus is the exit status the report calls for.
func (r report) exitStatus() int {
	if r.Degraded {
		return exitDegraded
	}
	return exitHealthy
}

// column is a column of the reconcilers table.
type column struct {
	header string
	value  func(i *tables.Info, now time.Time) string
}

// infoColumns are the columns shown of the reconcilers table. A figure
// added to tables.Info is shown by adding a line here.
var infoColumns = []column{
	{"RECONCILER", func(i *tables.Info, _ time.Time) string { return i.ID }},
	{"STATE", func(i *tables.Info, _ time.Time) string { return string(i.State) }},
	{"OBJECTS", func(i *tables.Info, _ time.Time) string { return strconv.Itoa(i.Objects) }},
	{"FAILING", func(i *tables.Info, _ time.Time) string { return strconv.Itoa(i.Retrying) }},
	{"IN FLIGHT", func(i *tables.Info, _ time.Time) string { return strconv.Itoa(i.InFlight) }},
	{"WORKERS", func(i *tables.Info, _ time.Time) string { return strconv.Itoa(i.Workers) }},
	{"BUSY", func(i *tables.Info, _ time.Time) string { return strconv.Itoa(i.BusyWorkers) }},
	{"OLDEST PENDING", func(i *tables.Info, now time.Time) string { return since(i.OldestPending, now, "") }},
	{"LAST PRUNE", func(i *tables.Info, now time.Time) string {
		s := since(i.LastPrune, now, " ago")
		if i.LastPruneError != "" {
			s += ", failed: " + i.LastPruneError
		}
		if i.PruneHeld {
			s += fmt.Sprintf(", held: would remove %d of %d", i.PruneHeldRemove, i.PruneHeldOf)
		}
		return s
	}},
}

// maxRetriesShown is how many failing objects of each reconciler the text
// shows.
const maxRetriesShown = 10

// maxText bounds each text from the agent shown in a cell of a table.
const maxText = 200

// writeText writes the report as text tables, with ages as of now.
func (r report) writeText(w io.Writer, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(r.Reconcilers) == 0 {
		if r.filter != "" {
			fmt.Fprintf(tw, "No reconciler %s.\n", cleanText(r.filter))
		} else {
			fmt.Fprintln(tw, "No reconcilers.")
		}
		return tw.Flush()
	}
	for n, c := range infoColumns {
		fmt.Fprint(tw, sep(n), c.header)
	}
	fmt.Fprintln(tw)
	for _, info := range r.Reconcilers {
		for n, c := range infoColumns {
			fmt.Fprint(tw, sep(n), clip(c.value(info, now)))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, info := range r.Reconcilers {
		if info.TargetError != "" {
			fmt.Fprintf(w, "%s: its circuit breaker is open, only probes start: %s\n", cleanText(info.ID), clip(info.TargetError))
			continue
		}
		if info.SetupError != "" {
			fmt.Fprintf(w, "%s is setting up: its setup step failed %d time(s), no operation starts until it succeeds: %s\n", cleanText(info.ID), info.SetupAttempts, clip(info.SetupError))
			continue
		}
		if info.PruneHeld {
			fmt.Fprintf(w, "%s holds a prune that would remove %d of the %d entries of its target: Reconciler.ConfirmPrune runs it, the desired set growing back releases it\n", cleanText(info.ID), info.PruneHeldRemove, info.PruneHeldOf)
			continue
		}
		if info.State == tables.StateDegraded && info.Retrying == 0 && info.LastPruneError == "" {
			fmt.Fprintf(w, "%s is degraded with no failing object and no failed prune: its round limiter or start gate fails (its health says which)\n", cleanText(info.ID))
		}
	}
	fmt.Fprintln(w)
	if len(r.Retries) == 0 {
		_, err := fmt.Fprintln(w, "No failing objects.")
		return err
	}
	held := map[string]bool{} // by ID: the circuit breaker is open
	for _, info := range r.Reconcilers {
		held[info.ID] = info.TargetError != "" || !info.TargetFailingSince.IsZero()
	}
	fmt.Fprintln(tw, "RECONCILER\tFAILING OBJECT\tATTEMPTS\tNEXT ATTEMPT\tERROR")
	shown, more := 0, 0
	for i, retry := range r.Retries {
		if i == 0 || retry.Reconciler != r.Retries[i-1].Reconciler {
			shown = 0
		}
		if shown == maxRetriesShown {
			more++
		} else {
			shown++
			key := clip(retry.Key)
			if retry.Delete {
				key += " (delete)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s%s\n", clip(retry.Reconciler), key, retry.Attempts, nextAttempt(retry.NextAttempt, now, held[retry.Reconciler]), clip(retry.LastError), earlierErrors(retry))
		}
		if more > 0 && (i == len(r.Retries)-1 || retry.Reconciler != r.Retries[i+1].Reconciler) {
			fmt.Fprintf(tw, "%s\t...\t\t\tand %d more (--json lists them all)\n", clip(retry.Reconciler), more)
			more = 0
		}
	}
	return tw.Flush()
}

func sep(n int) string {
	if n == 0 {
		return ""
	}
	return "\t"
}

// writeJSON writes the report as JSON: indented, or on one line if compact.
// The characters the text view refuses (see cleanText), which
// encoding/json passes through (DEL, C1 controls such as U+009B, CSI, and
// bidi controls such as U+202E), are escaped as \uXXXX: the JSON decodes
// to the agent's text as it is, and cannot drive a terminal it is shown
// on.
func (r report) writeJSON(w io.Writer, compact bool) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	if !compact {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(r); err != nil {
		return err
	}
	_, err := w.Write(escapeControls(b.Bytes()))
	return err
}

// escapeControls escapes, in data, JSON as encoding/json writes it, every
// control character but the new lines between values, and every bidi
// control. encoding/json writes valid UTF-8, escapes the C0 controls and
// writes no other control outside a string, so each one escaped is
// inside a string, where \uXXXX means the same character.
func escapeControls(data []byte) []byte {
	var out []byte
	last := 0 // data[:last] is in out
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r != '\n' && (unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)) {
			out = append(out, data[last:i]...)
			out = fmt.Appendf(out, `\u%04x`, r)
			last = i + size
		}
		i += size
	}
	if out == nil {
		return data
	}
	return append(out, data[last:]...)
}

// since renders how long before now t was, then suffix, or "-" if t is
// zero.
func since(t, now time.Time, suffix string) string {
	if t.IsZero() {
		return "-"
	}
	return short(now.Sub(t)) + suffix
}

// nextAttempt renders when a failing object is tried next: "in D",
// "running" while an attempt runs, and once the time has passed "held by
// breaker" if held (the reconciler's circuit breaker is open: only probes
// start), else "due" (it starts in the round under way, and may run
// already: the tables are written at the end of each round).
func nextAttempt(t, now time.Time, held bool) string {
	switch {
	case t.IsZero():
		return "running"
	case !t.After(now) && held:
		return "held by breaker"
	case !t.After(now):
		return "due"
	}
	return "in " + short(t.Sub(now))
}

// short renders d to two or three significant figures: 350ms, 4.2s, 1m5s,
// 3h20m.
func short(d time.Duration) string {
	switch d = max(d, 0); {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
}

// clip returns s for a cell of a table: at most maxText runes, cleaned.
// It cuts before it cleans: the cost of a frame does not grow with the
// length of the agent's texts.
func clip(s string) string {
	n := 0
	for i := range s {
		if n == maxText {
			return cleanText(s[:i]) + "…"
		}
		n++
	}
	return cleanText(s)
}

// cleanText replaces control characters (escape sequences, tabs, new
// lines) and invalid UTF-8 in s, from the agent, with '?', so that
// it cannot drive the terminal or break the tables.
func cleanText(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == unicode.ReplacementChar || unicode.Is(unicode.Bidi_Control, r) {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}

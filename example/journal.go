package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"sync"
	"time"
)

// The ownership journal lists the files the example wrote in a directory,
// as it wrote them. It is an append-only log, journalPath: a header line,
// then one JSON record per line, each setting or deleting one file's
// entry. A write appends a record and syncs the log, so its cost does not
// depend on how many files the journal lists; concurrent writes share one
// fsync. When the log holds more than twice as many records as the
// journal has entries, it is compacted: rewritten, with one record per
// entry, into a temporary file that is renamed over it.
const (
	// journalPath is the log, inside the target directory.
	journalPath = stateDir + "/journal.log"
	// legacyJournalPath is the journal of earlier versions of the example,
	// one JSON document rewritten at every write. It is converted once.
	legacyJournalPath = stateDir + "/journal.json"
	// journalOwner identifies our journal among other tools' files.
	journalOwner = "converge example"
	// journalVersion is the version of the log's format.
	journalVersion = 2
	// compactMin is the number of records the log may hold beyond twice
	// the journal's entries before it is compacted.
	compactMin = 1024
	// maxRecordLen bounds a record's line: a name is at most 255 bytes.
	maxRecordLen = 4096
)

// fileID identifies a file on its file system: its device and inode
// numbers and, where the file system gives one, its file handle. An inode
// number alone does not identify a file for long: ext4 gives a freed one
// to the next new file at once. The handle also holds the inode's
// generation, which differs for that new file. The zero fileID is unknown
// (a system without inode numbers).
type fileID struct {
	Dev    uint64 `json:"dev"`
	Ino    uint64 `json:"ino"`
	Handle string `json:"handle,omitempty"` // the file handle, in hex; "" if unknown
}

// strong reports whether id has a file handle: then no other file has
// the same id while the file system exists.
func (id fileID) strong() bool { return id.Handle != "" }

// sameFile reports whether a and b, both seen on this system, are the
// same file.
func sameFile(a, b fileID) bool { return a.Ino != 0 && a == b }

// journalEntry describes a file as the example last wrote it. Size, mode
// and modification time let the drift check tell an unchanged file without
// reading it; the digest is that of the content written. ID is the file
// the example put in place, and Prev the one that write replaced, if any:
// a write cut short after its record was written leaves Prev in place.
// A file at the entry's name is the example's only if it is one of these,
// by file handle, or, where there is no handle, if it is ID by inode
// number and holds the content recorded: see target.ours.
type journalEntry struct {
	Size    int64
	Mode    Mode
	ModTime time.Time
	SHA256  [sha256.Size]byte
	ID      fileID
	Prev    fileID
}

// identifies reports whether id is the file the entry records, or the one
// its write replaced, by file handle: an id without one identifies
// nothing.
func (e journalEntry) identifies(id fileID) bool {
	return id.strong() && (id == e.ID || id == e.Prev)
}

// record is one line of the log.
type record struct {
	Name   string `json:"name"`
	Delete bool   `json:"delete,omitempty"`
	Size   int64  `json:"size,omitempty"`
	Mode   Mode   `json:"mode,omitempty"`
	MTime  int64  `json:"mtime,omitempty"` // Unix nanoseconds
	SHA256 string `json:"sha256,omitempty"`
	ID     fileID `json:"id,omitzero"`
	Prev   fileID `json:"prev,omitzero"`
}

// header is the log's first line.
type header struct {
	Owner   string `json:"owner"`
	Version int    `json:"version"`
}

func setRecord(name string, e journalEntry) record {
	return record{Name: name, Size: e.Size, Mode: e.Mode, MTime: e.ModTime.UnixNano(),
		SHA256: hex.EncodeToString(e.SHA256[:]), ID: e.ID, Prev: e.Prev}
}

func deleteRecord(name string) record { return record{Name: name, Delete: true} }

// entry returns the entry a set record sets.
func (r record) entry() (journalEntry, error) {
	e := journalEntry{Size: r.Size, Mode: r.Mode, ModTime: time.Unix(0, r.MTime), ID: r.ID, Prev: r.Prev}
	sum, err := hex.DecodeString(r.SHA256)
	if err != nil || len(sum) != sha256.Size {
		return e, fmt.Errorf("invalid sha256 %q", r.SHA256)
	}
	copy(e.SHA256[:], sum)
	return e, nil
}

// journal is the ownership journal of one claimed directory, in memory and
// in its log. It is safe for concurrent use. After a failed write or sync
// it fails every call (see failed): what the log holds is then unknown,
// and the directory is claimed again, which loads it from disk.
type journal struct {
	root *os.Root // the target directory

	mu      sync.Mutex
	file    *os.File // the log, opened for appending
	entries map[string]journalEntry
	records int    // records in the log
	commits uint64 // commits appended to the log
	err     error  // set once a write failed

	syncMu sync.Mutex // held while syncing or compacting
	synced uint64     // commits known to be on disk
}

// errJournalClosed fails a commit to the journal of a directory given up.
var errJournalClosed = errors.New("the ownership journal was closed")

// createJournal writes an empty journal into root, whose state directory
// exists, and opens it.
func createJournal(root *os.Root) (*journal, error) {
	j := &journal{root: root, entries: map[string]journalEntry{}}
	if err := j.rewrite(); err != nil {
		return nil, err
	}
	return j, nil
}

// loadJournal opens the journal of root, converting the journal of an
// earlier version if that is what it finds. A record cut short at the end
// of the log, by a crash during a write, is dropped. read reads a file of
// the directory, for the conversion.
func loadJournal(root *os.Root, read fileReader) (*journal, error) {
	info, err := root.Lstat(journalPath)
	if errors.Is(err, fs.ErrNotExist) {
		if _, legacyErr := root.Lstat(legacyJournalPath); legacyErr == nil {
			return convertLegacyJournal(root, read)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the ownership journal: %w", err)
	}
	if !info.Mode().IsRegular() {
		return nil, &refusedError{journalPath + " is not a regular file"}
	}
	if err := checkPrivate(journalPath, info, ""); err != nil {
		return nil, err
	}
	file, err := root.OpenFile(journalPath, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		return nil, fmt.Errorf("reading the ownership journal: %w", err)
	}
	j := &journal{root: root, file: file, entries: map[string]journalEntry{}}
	if err := j.replay(); err != nil {
		file.Close()
		return nil, err
	}
	return j, nil
}

// replay reads the log into entries, and truncates a last line cut short.
func (j *journal) replay() error {
	r := bufio.NewReader(j.file)
	var offset int64
	for n := 1; ; n++ {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, io.EOF) {
			if len(line) > 0 { // cut short by a crash: drop it
				if err := j.file.Truncate(offset); err != nil {
					return fmt.Errorf("reading the ownership journal: %w", err)
				}
			}
			break
		}
		if err != nil {
			return j.damaged(n, err)
		}
		offset += int64(len(line))
		if n == 1 {
			var h header
			if json.Unmarshal(line, &h) != nil || h.Owner != journalOwner {
				return &refusedError{journalPath + " is not the example's ownership journal"}
			}
			if h.Version != journalVersion {
				return &refusedError{fmt.Sprintf("%s has version %d; this example reads version %d", journalPath, h.Version, journalVersion)}
			}
			continue
		}
		var rec record
		if err := json.Unmarshal(line, &rec); err != nil {
			return j.damaged(n, err)
		}
		if err := validateName(rec.Name); err != nil {
			return j.damaged(n, err)
		}
		if err := j.apply(rec); err != nil {
			return j.damaged(n, err)
		}
		j.records++
	}
	if j.records == 0 && offset == 0 {
		return &refusedError{journalPath + " is empty: it is not the example's ownership journal"}
	}
	return nil
}

func (j *journal) damaged(line int, err error) error {
	return &refusedError{fmt.Sprintf("%s is damaged at line %d: %v", journalPath, line, err)}
}

// apply applies rec to the entries.
func (j *journal) apply(rec record) error {
	if rec.Delete {
		delete(j.entries, rec.Name)
		return nil
	}
	e, err := rec.entry()
	if err != nil {
		return err
	}
	j.entries[rec.Name] = e
	return nil
}

// get returns the entry for name, if the example wrote it.
func (j *journal) get(name string) (journalEntry, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok := j.entries[name]
	return e, ok
}

// names returns the names of every file the journal lists, sorted.
func (j *journal) names() []string {
	j.mu.Lock()
	names := make([]string, 0, len(j.entries))
	for name := range j.entries {
		names = append(names, name)
	}
	j.mu.Unlock()
	slices.Sort(names)
	return names
}

// len returns the number of entries.
func (j *journal) len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.entries)
}

// failed returns the error that failed the journal, or nil.
func (j *journal) failed() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err
}

// commit appends recs to the log and returns once they are on disk, or
// the error that prevented it. The entries change at once, before the
// sync: a failure fails the journal, so they are not used any more.
func (j *journal) commit(recs ...record) error {
	if len(recs) == 0 {
		return nil
	}
	var buf bytes.Buffer
	for _, rec := range recs {
		data, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		buf.Write(data)
		buf.WriteByte('\n')
	}
	j.mu.Lock()
	if j.err != nil {
		j.mu.Unlock()
		return j.err
	}
	if _, err := j.file.Write(buf.Bytes()); err != nil {
		j.failLocked(err)
		j.mu.Unlock()
		return j.err
	}
	for _, rec := range recs {
		j.apply(rec) // a record made by setRecord applies
	}
	j.records += len(recs)
	j.commits++
	seq := j.commits
	j.mu.Unlock()
	return j.sync(seq)
}

// sync returns once commit seq is on disk. One fsync covers every commit
// appended before it starts, so concurrent writers share it. The log is
// compacted here when it is due, with no sync running.
func (j *journal) sync(seq uint64) error {
	j.syncMu.Lock()
	defer j.syncMu.Unlock()
	if j.synced >= seq {
		return nil
	}
	j.mu.Lock()
	upto, file, err := j.commits, j.file, j.err
	j.mu.Unlock()
	if err != nil {
		return err
	}
	if err := file.Sync(); err != nil {
		j.fail(err)
		return err
	}
	j.synced = upto

	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err == nil && j.records > 2*len(j.entries)+compactMin {
		if err := j.rewrite(); err != nil {
			j.failLocked(err) // the commits above are on disk, in either log
		}
		j.synced = j.commits
	}
	return nil
}

// rewrite writes the log anew, one record per entry, and switches to it.
// Called with mu held, and syncMu unless the journal is new.
func (j *journal) rewrite() error {
	names := make([]string, 0, len(j.entries))
	for name := range j.entries {
		names = append(names, name)
	}
	slices.Sort(names)
	var buf bytes.Buffer
	h, _ := json.Marshal(header{Owner: journalOwner, Version: journalVersion})
	buf.Write(h)
	buf.WriteByte('\n')
	for _, name := range names {
		data, err := json.Marshal(setRecord(name, j.entries[name]))
		if err != nil {
			return err
		}
		buf.Write(data)
		buf.WriteByte('\n')
	}
	base, _, err := writeTemp(j.root, buf.Bytes(), 0o600)
	tmp := stateDir + "/" + base
	if err != nil {
		return fmt.Errorf("writing the ownership journal: %w", err)
	}
	if err := j.root.Rename(tmp, journalPath); err != nil {
		j.root.Remove(tmp)
		return fmt.Errorf("writing the ownership journal: %w", err)
	}
	// From here on the new log is in place: any failure fails the journal.
	if j.file != nil {
		j.file.Close()
		j.file = nil
	}
	file, err := j.root.OpenFile(journalPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("writing the ownership journal: %w", err)
	}
	j.file = file
	j.records = len(names)
	if err := syncDir(j.root, stateDir); err != nil {
		return fmt.Errorf("writing the ownership journal: %w", err)
	}
	return nil
}

func (j *journal) fail(err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.failLocked(err)
}

func (j *journal) failLocked(err error) {
	if j.err == nil {
		j.err = fmt.Errorf("writing the ownership journal: %w", err)
	}
}

// close closes the log; later commits fail.
func (j *journal) close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.failLocked(errJournalClosed)
	if j.file != nil {
		j.file.Close()
		j.file = nil
	}
}

// legacyJournal is the journal of earlier versions of the example.
type legacyJournal struct {
	Owner string `json:"owner"`
	Files map[string]struct {
		Size   int64  `json:"size"`
		Mode   Mode   `json:"mode"`
		SHA256 string `json:"sha256"`
	} `json:"files"`
}

// convertLegacyJournal turns the journal of an earlier version, which did
// not record which file it wrote, into the log. An entry is kept only if
// the file at its name still holds the content recorded: anything else
// there is not known to be the example's, so it is forgotten and left
// alone.
func convertLegacyJournal(root *os.Root, read fileReader) (*journal, error) {
	info, err := root.Lstat(legacyJournalPath)
	if err != nil {
		return nil, fmt.Errorf("reading the ownership journal: %w", err)
	}
	if err := checkPrivate(legacyJournalPath, info, ""); err != nil {
		return nil, err
	}
	data, err := root.ReadFile(legacyJournalPath)
	if err != nil {
		return nil, fmt.Errorf("reading the ownership journal: %w", err)
	}
	var old legacyJournal
	if json.Unmarshal(data, &old) != nil || old.Owner != journalOwner {
		return nil, &refusedError{legacyJournalPath + " is not the example's ownership journal"}
	}
	j := &journal{root: root, entries: map[string]journalEntry{}}
	for name, e := range old.Files {
		if validateName(name) != nil {
			continue
		}
		info, err := root.Lstat(name)
		if err != nil || !info.Mode().IsRegular() || info.Size() != e.Size {
			continue
		}
		content, id, err := read(root, name)
		if err != nil || id.Dev != idOf(info).Dev || id.Ino != idOf(info).Ino {
			continue // unreadable, or replaced since the Lstat
		}
		sum := digest(content)
		if hex.EncodeToString(sum[:]) != e.SHA256 {
			continue
		}
		j.entries[name] = journalEntry{Size: info.Size(), Mode: e.Mode, ModTime: info.ModTime(), SHA256: sum, ID: id}
	}
	if err := j.rewrite(); err != nil {
		return nil, err
	}
	if err := root.Remove(legacyJournalPath); err != nil {
		j.close()
		return nil, fmt.Errorf("removing the converted journal: %w", err)
	}
	return j, nil
}

// readJournalHeader checks, without changing anything, that root holds the
// example's journal (of this or an earlier version), owned by the user.
func readJournalHeader(root *os.Root) error {
	name := journalPath
	info, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		name = legacyJournalPath
		info, err = root.Lstat(name)
	}
	if err != nil {
		return &refusedError{fmt.Sprintf("%s holds no ownership journal (%v)", stateDir, err)}
	}
	if !info.Mode().IsRegular() {
		return &refusedError{name + " is not a regular file"}
	}
	if err := checkPrivate(name, info, ""); err != nil {
		return err
	}
	f, err := root.Open(name)
	if err != nil {
		return fmt.Errorf("reading the ownership journal: %w", err)
	}
	defer f.Close()
	if name == legacyJournalPath {
		return nil // one JSON document: loadJournal checks it
	}
	line, err := bufio.NewReader(io.LimitReader(f, maxRecordLen)).ReadSlice('\n')
	var h header
	if err != nil || json.Unmarshal(line, &h) != nil || h.Owner != journalOwner {
		return &refusedError{journalPath + " is not the example's ownership journal"}
	}
	return nil
}

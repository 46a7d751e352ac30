package main

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/cilium/statedb"
	sindex "github.com/cilium/statedb/index"

	"github.com/converge-go/converge/index"
	"github.com/converge-go/converge/status"
)

// File is one desired file: the row of the "files" table. Objects stored in
// StateDB are never modified in place; the reconciler and the handlers work
// on copies made with Clone.
type File struct {
	// Name is the file's name inside the target directory. It is a single
	// path element; see validateName.
	Name string `json:"name" yaml:"name"`
	// Content is written to the file verbatim, or, if Template is set,
	// replaces "{{content}}" in the template's text.
	Content string `json:"content" yaml:"content"`
	// Template, if set, names the Template the file is rendered from.
	Template string `json:"template,omitempty" yaml:"template,omitempty"`
	// Mode holds the file's permission bits.
	Mode Mode `json:"mode" yaml:"mode"`
	// Status is the file's reconciliation status, written by the reconciler.
	Status status.Status `json:"status" yaml:"status"`
}

// Clone returns a shallow copy; the fields are values or immutable strings.
func (f *File) Clone() *File {
	c := *f
	return &c
}

// GetStatus returns the reconciliation status.
func (f *File) GetStatus() status.Status { return f.Status }

// SetStatus sets the reconciliation status. The reconciler hands it a clone.
func (f *File) SetStatus(st status.Status) *File {
	f.Status = st
	return f
}

// TableHeader implements statedb.TableWritable (db/show, "db show files").
func (*File) TableHeader() []string {
	return []string{"Name", "Mode", "Size", "Template", "Status"}
}

// TableRow implements statedb.TableWritable.
func (f *File) TableRow() []string {
	return []string{f.Name, f.Mode.String(), strconv.Itoa(len(f.Content)), f.Template, f.Status.String()}
}

var _ statedb.TableWritable = &File{}

// Mode is a file's permission bits. It reads and writes as an octal string
// such as "0644" in JSON and YAML; YAML also accepts a bare 0644.
type Mode fs.FileMode

// defaultMode is used when a file is given no mode.
const defaultMode Mode = 0o644

func (m Mode) String() string { return fmt.Sprintf("%#04o", uint32(m)) }

// MarshalText implements encoding.TextMarshaler.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (m *Mode) UnmarshalText(text []byte) error {
	parsed, err := parseMode(string(text))
	if err != nil {
		return err
	}
	*m = parsed
	return nil
}

// parseMode parses octal permission bits: "644", "0644" or "0o644".
func parseMode(s string) (Mode, error) {
	digits := strings.TrimPrefix(strings.TrimPrefix(s, "0o"), "0O")
	v, err := strconv.ParseUint(digits, 8, 32)
	if err != nil || digits == "" || v > 0o777 {
		return 0, fmt.Errorf("invalid mode %q: want octal permission bits 0000 to 0777, such as 0644", s)
	}
	return Mode(v), nil
}

// Limits on what is accepted as a file.
const (
	maxNameLen    = 255     // bytes, the usual file system limit
	maxContentLen = 1 << 20 // 1 MiB per file
)

// errInvalidName is wrapped by every error of validateName.
var errInvalidName = errors.New("invalid file name")

// validateName accepts only a plain file name: one path element, valid
// UTF-8, that cannot climb out of the directory or name something else
// than a file in it. The target also opens the directory with os.Root, so
// a name that slipped through could still not escape.
func validateName(name string) error {
	bad := func(why string) error { return fmt.Errorf("%w %q: %s", errInvalidName, name, why) }
	switch {
	case name == "":
		return fmt.Errorf("%w: the name is empty", errInvalidName)
	case name == "." || name == "..":
		return bad("names the directory itself or its parent")
	case len(name) > maxNameLen:
		return bad(fmt.Sprintf("longer than %d bytes", maxNameLen))
	case !utf8.ValidString(name):
		// It could not be stored in the journal or shown as it is.
		return bad("not valid UTF-8")
	case strings.ContainsAny(name, `/\`):
		return bad(`must not contain "/" or "\"`)
	case name == stateDir:
		return bad("the name is reserved for the example's state directory")
	}
	if strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return bad("contains control characters")
	}
	return nil
}

// nameIndex is the primary index: files by name.
var nameIndex = statedb.Index[*File, string]{
	Name: "name",
	FromObject: func(f *File) sindex.KeySet {
		return sindex.NewKeySet(sindex.String(f.Name))
	},
	FromKey:    sindex.String,
	FromString: sindex.FromString,
	Unique:     true,
}

// statusIndex finds files by status kind ("db show" and
// reconciler.WaitForReconciliation use it).
var statusIndex = index.NewStatusIndex((*File).GetStatus)

// filesTable is the table of desired files, with the function that marks it
// initialized once the initial set is loaded.
type filesTable struct {
	statedb.RWTable[*File]
	markInitialized func(statedb.WriteTxn)
}

// newFilesTable creates the table and registers an initializer on it, so the
// reconciler does not prune until initialSet.insert has inserted the initial
// set: a prune of an empty table would delete every file the example wrote.
func newFilesTable(db *statedb.DB) (filesTable, error) {
	tbl, err := statedb.NewTable(db, "files", nameIndex, statusIndex, templateIndex)
	if err != nil {
		return filesTable{}, err
	}
	wtxn := db.WriteTxn(tbl)
	done := tbl.RegisterInitializer(wtxn, "initial-files")
	wtxn.Commit()
	return filesTable{tbl, done}, nil
}

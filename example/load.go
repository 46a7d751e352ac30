package main

import (
	_ "embed"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"syscall"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"go.yaml.in/yaml/v3"

	"github.com/converge-go/converge/status"
)

// desiredSet is the initial desired state: the files and the templates
// they may be rendered from.
type desiredSet struct {
	Files     []*File
	Templates []*Template
}

// maxFilesLen bounds the size of the --files file.
const maxFilesLen = 16 << 20

// Keys of the initial YAML file, at each level.
var (
	docKeys      = []string{"templates", "files"}
	templateKeys = []string{"name", "text"}
	fileKeys     = []string{"name", "content", "mode", "template"}
)

// parseFiles decodes the initial desired set, a YAML document of the form
//
//	templates:            # optional
//	  - name: banner
//	    text: "== {{name}} ==\n{{content}}"
//	files:
//	  - name: hello.txt
//	    content: "Hello\n"
//	    mode: 0644        # optional, default 0644
//	    template: banner  # optional
//
// Unknown or repeated keys, values of the wrong kind, invalid or duplicate
// names, invalid templates, templates that are not defined and oversized
// contents are errors naming the source, the line and the entry. They
// never quote a value other than a known key, a name or a mode, so that
// pointing --files at some other file does not print what it holds: an
// unknown key is given by its line and column only, as the first key of a
// credentials file is often a secret. An empty document is an empty set.
func parseFiles(source string, data []byte) (desiredSet, error) {
	fail := func(format string, args ...any) (desiredSet, error) {
		return desiredSet{}, fmt.Errorf("%s: %s", source, fmt.Sprintf(format, args...))
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return fail("invalid YAML: %s", yamlProblem(err))
	}
	if len(root.Content) == 0 {
		return desiredSet{}, nil
	}
	doc := resolve(root.Content[0])
	if doc.Kind == yaml.ScalarNode && doc.Tag == "!!null" {
		return desiredSet{}, nil
	}
	top, err := mapping(doc, "the document", docKeys)
	if err != nil {
		return fail("%v", err)
	}
	for _, key := range docKeys {
		if err := sequence(top[key], key); err != nil {
			return fail("%v", err)
		}
	}
	var set desiredSet
	templates := map[string]int{}
	for i, node := range items(top["templates"]) {
		where := fmt.Sprintf("templates[%d]", i)
		fields, err := mapping(node, where, templateKeys)
		if err != nil {
			return fail("%v", err)
		}
		var name, text string
		if err := scalars(fields, map[string]*string{"name": &name, "text": &text}, where); err != nil {
			return fail("%v", err)
		}
		where = fmt.Sprintf("line %d: %s", node.Line, where)
		if err := validateTemplateName(name); err != nil {
			return fail("%s: %v", where, err)
		}
		if j, dup := templates[name]; dup {
			return fail("%s: duplicate name %q (also templates[%d])", where, name, j)
		}
		templates[name] = i
		if len(text) > maxContentLen {
			return fail("%s (%q): text is larger than %d bytes", where, name, maxContentLen)
		}
		if err := parseTemplate(text); err != nil {
			return fail("%s (%q): %v", where, name, err)
		}
		set.Templates = append(set.Templates, &Template{Name: name, Text: text})
	}
	seen := map[string]int{}
	for i, node := range items(top["files"]) {
		where := fmt.Sprintf("files[%d]", i)
		fields, err := mapping(node, where, fileKeys)
		if err != nil {
			return fail("%v", err)
		}
		var name, content, tmpl, modeText string
		if err := scalars(fields, map[string]*string{"name": &name, "content": &content, "template": &tmpl, "mode": &modeText}, where); err != nil {
			return fail("%v", err)
		}
		where = fmt.Sprintf("line %d: %s", node.Line, where)
		if err := validateName(name); err != nil {
			return fail("%s: %v", where, err)
		}
		if j, dup := seen[name]; dup {
			return fail("%s: duplicate name %q (also files[%d])", where, name, j)
		}
		seen[name] = i
		if len(content) > maxContentLen {
			return fail("%s (%q): content is larger than %d bytes", where, name, maxContentLen)
		}
		if _, ok := templates[tmpl]; tmpl != "" && !ok {
			return fail("%s (%q): template %q is not defined under templates", where, name, tmpl)
		}
		mode := defaultMode
		if fields["mode"] != nil {
			if mode, err = parseMode(modeText); err != nil {
				return fail("%s (%q): %v", where, name, err)
			}
		}
		set.Files = append(set.Files, &File{Name: name, Content: content, Mode: mode, Template: tmpl})
	}
	return set, nil
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// mapping returns the values of n, a mapping whose keys must be among
// keys, each at most once.
func mapping(n *yaml.Node, what string, keys []string) (map[string]*yaml.Node, error) {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: %s must be a mapping with the keys %s", n.Line, what, strings.Join(keys, ", "))
	}
	out := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := resolve(n.Content[i])
		if k.Kind != yaml.ScalarNode || !contains(keys, k.Value) {
			return nil, fmt.Errorf("line %d, column %d: unknown key in %s (its text is not shown); it takes %s", k.Line, k.Column, what, strings.Join(keys, ", "))
		}
		if _, dup := out[k.Value]; dup {
			return nil, fmt.Errorf("line %d: key %q appears twice in %s", k.Line, k.Value, what)
		}
		out[k.Value] = n.Content[i+1]
	}
	return out, nil
}

// sequence checks that n, if present, is a list.
func sequence(n *yaml.Node, what string) error {
	if n = resolve(n); n == nil || n.Kind == yaml.SequenceNode || (n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
		return nil
	}
	return fmt.Errorf("line %d: %s must be a list", n.Line, what)
}

// items returns the entries of the list n; nothing if n is not a list.
func items(n *yaml.Node) []*yaml.Node {
	if n = resolve(n); n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	return n.Content
}

// scalars sets each destination to the value of its key in fields, which
// must be a plain value (null is empty).
func scalars(fields map[string]*yaml.Node, dst map[string]*string, what string) error {
	for key, p := range dst {
		n := resolve(fields[key])
		switch {
		case n == nil:
		case n.Kind != yaml.ScalarNode:
			return fmt.Errorf("line %d: %s: %s must be a plain value, not a list or a mapping", n.Line, what, key)
		case n.Tag != "!!null":
			*p = n.Value
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// quoted matches what the YAML parser's errors quote of the input.
var quoted = regexp.MustCompile("'[^']*'|`[^`]*`|\"[^\"]*\"")

// yamlProblem is the parser's error without the input it quotes.
func yamlProblem(err error) string {
	return quoted.ReplaceAllString(strings.TrimPrefix(err.Error(), "yaml: "), "(...)")
}

// readFilesFlag reads the --files file: a regular file of at most
// maxFilesLen bytes. It is opened without blocking, so a named pipe is
// refused rather than waited on.
func readFilesFlag(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s); give a YAML file", path, describeType(info.Mode()))
	}
	if info.Size() > maxFilesLen {
		return nil, fmt.Errorf("%s is larger than the limit of %d bytes", path, maxFilesLen)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFilesLen+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFilesLen {
		return nil, fmt.Errorf("%s is larger than the limit of %d bytes", path, maxFilesLen)
	}
	return data, nil
}

// describeType names the type of a file that is not regular.
func describeType(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "mode " + m.String()
}

// embeddedFiles is the default initial desired set.
//
//go:embed files.yaml
var embeddedFiles []byte

// initialSet is the initial desired set, read when the hive is built, so
// that a bad file fails before anything starts, and inserted at start
// (see registerStart).
type initialSet struct {
	source    string
	set       desiredSet
	dir       string
	log       *slog.Logger
	db        *statedb.DB
	files     filesTable
	templates statedb.RWTable[*Template]
}

func newInitialSet(cfg config, log *slog.Logger, db *statedb.DB, files filesTable, templates statedb.RWTable[*Template]) (*initialSet, error) {
	source, data := "files.yaml (embedded)", embeddedFiles
	if cfg.FilesPath != "" {
		source = cfg.FilesPath
		var err error
		if data, err = readFilesFlag(cfg.FilesPath); err != nil {
			return nil, refuse("files", fmt.Errorf("--files: %w", err))
		}
	}
	set, err := parseFiles(source, data)
	switch {
	case err != nil && cfg.FilesPath != "":
		return nil, refuse("files", fmt.Errorf("--files: %w", err))
	case err != nil: // the embedded set: not the user's input
		return nil, fmt.Errorf("initial desired files: %w", err)
	}
	return &initialSet{source: source, set: set, dir: cfg.Dir, log: log, db: db, files: files, templates: templates}, nil
}

// insert inserts the set, templates and files in one transaction, so no
// file is reconciled before its template is there. Only after that commit
// is the files table marked initialized, which lets the reconciler run its
// first prune: pruning before would delete the wanted files the example
// wrote in an earlier run.
func (s *initialSet) insert(cell.HookContext) error {
	wtxn := s.db.WriteTxn(s.files, s.templates)
	for _, t := range s.set.Templates {
		if _, _, err := s.templates.Insert(wtxn, t); err != nil {
			wtxn.Abort()
			return err
		}
	}
	for _, f := range s.set.Files {
		f.Status = status.Pending()
		if _, _, err := s.files.Insert(wtxn, f); err != nil {
			wtxn.Abort()
			return err
		}
	}
	wtxn.Commit()
	wtxn = s.db.WriteTxn(s.files)
	s.files.markInitialized(wtxn)
	wtxn.Commit()
	s.log.Info("Loaded the initial desired files", "source", s.source, "count", len(s.set.Files), "templates", len(s.set.Templates), "directory", s.dir)
	return nil
}

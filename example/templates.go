package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/cilium/statedb"
	sindex "github.com/cilium/statedb/index"

	"github.com/converge-go/converge/reconciler"
)

// Template is a row of the "templates" table: text that files can be
// rendered from. A file that names a template (File.Template) is written
// as the template's text with "{{name}}" replaced by the file's name and
// "{{content}}" by the file's own content. Templates are not reconciled
// themselves: the reconciler of files depends on them (see
// templateDependency), so changing a template rewrites every file that
// uses it, and only those.
type Template struct {
	Name string `json:"name" yaml:"name"`
	Text string `json:"text" yaml:"text"`
}

// TableHeader implements statedb.TableWritable (db/show, "db show templates").
func (*Template) TableHeader() []string { return []string{"Name", "Size"} }

// TableRow implements statedb.TableWritable.
func (t *Template) TableRow() []string {
	return []string{t.Name, fmt.Sprint(len(t.Text))}
}

// templateNameIndex is the primary index of the templates table.
var templateNameIndex = statedb.Index[*Template, string]{
	Name: "name",
	FromObject: func(t *Template) sindex.KeySet {
		return sindex.NewKeySet(sindex.String(t.Name))
	},
	FromKey:    sindex.String,
	FromString: sindex.FromString,
	Unique:     true,
}

// templateIndex indexes the files table by the template a file uses; a
// file without one is not in it. The dependency uses it to find the files
// to rewrite when a template changes.
var templateIndex = statedb.Index[*File, string]{
	Name: "template",
	FromObject: func(f *File) sindex.KeySet {
		if f.Template == "" {
			return sindex.EmptyKeySet
		}
		return sindex.NewKeySet(sindex.String(f.Template))
	},
	FromKey:    sindex.String,
	FromString: sindex.FromString,
	Unique:     false,
}

func newTemplatesTable(db *statedb.DB) (statedb.RWTable[*Template], error) {
	return statedb.NewTable(db, "templates", templateNameIndex)
}

// templateDependency is the reconciler option that re-reconciles the files
// using a template whenever the template is inserted, changed or deleted.
// The mapper returns queries on the files table's primary index, one per
// file that names the template; the reconciler marks those files
// Refreshing (or renews their Pending status) and Update renders them
// again. A file added with the template after this lookup is Pending
// anyway.
func templateDependency(db *statedb.DB, files statedb.Table[*File], templates statedb.Table[*Template]) reconciler.Option {
	return reconciler.WithDependency(templates, func(t *Template, _ bool) []statedb.Query[*File] {
		var queries []statedb.Query[*File]
		for f := range files.List(db.ReadTxn(), templateIndex.Query(t.Name)) {
			queries = append(queries, nameIndex.Query(f.Name))
		}
		return queries
	})
}

// errNoTemplate is wrapped by the error of an Update whose file names a
// template that does not exist.
var errNoTemplate = errors.New("template is not defined")

// render returns the content to write for f: its own content, or the text
// of its template rendered for it, looked up in txn, the transaction the
// reconciler gives Update. A missing template or a result over the size
// limit is a terminal error: retrying cannot fix it, and the dependency
// on the templates table reconciles the file again when its template
// changes.
func render(txn statedb.ReadTxn, templates statedb.Table[*Template], f *File) (string, error) {
	if f.Template == "" {
		return f.Content, nil
	}
	t, _, found := templates.Get(txn, templateNameIndex.Query(f.Template))
	if !found {
		return "", reconciler.TerminalError(fmt.Errorf("%w: %q (PUT /templates/%s to define it)", errNoTemplate, f.Template, f.Template))
	}
	var out strings.Builder
	r := strings.NewReplacer("{{name}}", f.Name, "{{content}}", f.Content)
	if _, err := r.WriteString(&limitedWriter{w: &out, n: maxContentLen}, t.Text); err != nil {
		return "", reconciler.TerminalError(fmt.Errorf("template %q: %w", f.Template, err))
	}
	return out.String(), nil
}

// limitedWriter fails a write that would take the total past n bytes, so
// a template that repeats "{{content}}" cannot render a huge file.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if len(p) > l.n {
		return 0, fmt.Errorf("renders to more than the limit of %d bytes", maxContentLen)
	}
	l.n -= len(p)
	return l.w.Write(p)
}

// errInvalidTemplate is wrapped by every error of parseTemplate.
var errInvalidTemplate = errors.New("invalid template")

// parseTemplate checks a template's text: every "{{" must start one of
// the placeholders {{name}} and {{content}}. A template is checked when it
// is stored, so that a mistake is answered at once rather than written
// into files. It costs time linear in the text's length: it looks at each
// byte a bounded number of times, and finds the line and column of a
// mistake only once it found one.
func parseTemplate(text string) error {
	offset := 0
	for {
		i := strings.Index(text[offset:], "{{")
		if i < 0 {
			return nil
		}
		at := offset + i
		tail := text[at:]
		end := strings.Index(tail, "}}")
		if end < 0 || strings.IndexByte(tail[:end], '\n') >= 0 {
			line, column := position(text, at)
			return fmt.Errorf("%w: line %d, column %d: \"{{\" is not closed by \"}}\"; a template may use {{name}} and {{content}}", errInvalidTemplate, line, column)
		}
		switch placeholder := tail[:end+2]; placeholder {
		case "{{name}}", "{{content}}":
		default:
			if len(placeholder) > 40 {
				placeholder = placeholder[:37] + "..."
			}
			line, column := position(text, at)
			return fmt.Errorf("%w: line %d, column %d: unknown placeholder %q; a template may use {{name}} and {{content}}", errInvalidTemplate, line, column, placeholder)
		}
		offset = at + end + 2
	}
}

// position returns the line and column, counted from 1, of the byte at in
// text; a column counts runes.
func position(text string, at int) (line, column int) {
	start := strings.LastIndexByte(text[:at], '\n') + 1
	return 1 + strings.Count(text[:start], "\n"), 1 + utf8.RuneCountInString(text[start:at])
}

// errInvalidTemplateName is wrapped by every error of
// validateTemplateName.
var errInvalidTemplateName = errors.New("invalid template name")

// validateTemplateName accepts a name that needs no escaping in a URL, a
// query parameter or a log line: letters, digits, ".", "-" and "_", not
// starting with ".".
func validateTemplateName(name string) error {
	bad := func(why string) error { return fmt.Errorf("%w %q: %s", errInvalidTemplateName, name, why) }
	switch {
	case name == "":
		return fmt.Errorf("%w: the name is empty", errInvalidTemplateName)
	case len(name) > maxNameLen:
		return bad(fmt.Sprintf("longer than %d bytes", maxNameLen))
	case strings.HasPrefix(name, "."):
		return bad(`must not start with "."`)
	case strings.IndexFunc(name, notTemplateNameRune) >= 0:
		return bad(`may hold only letters, digits, ".", "-" and "_"`)
	}
	return nil
}

func notTemplateNameRune(r rune) bool {
	return !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '-' || r == '_')
}

package main

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

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

// fileSpec is one file of the initial YAML file. It has no status: every
// loaded file starts Pending.
type fileSpec struct {
	Name     string `yaml:"name"`
	Content  string `yaml:"content"`
	Mode     *Mode  `yaml:"mode"`
	Template string `yaml:"template"`
}

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
// Unknown fields, invalid or duplicate names, templates that are not
// defined and oversized contents are errors naming the source and the
// entry. An empty document is an empty set.
func parseFiles(source string, data []byte) (desiredSet, error) {
	var doc struct {
		Templates []Template `yaml:"templates"`
		Files     []fileSpec `yaml:"files"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return desiredSet{}, fmt.Errorf("%s: invalid YAML: %w", source, err)
	}
	var set desiredSet
	templates := make(map[string]int, len(doc.Templates))
	for i, t := range doc.Templates {
		where := fmt.Sprintf("%s: templates[%d]", source, i)
		if err := validateTemplateName(t.Name); err != nil {
			return desiredSet{}, fmt.Errorf("%s: %w", where, err)
		}
		if j, dup := templates[t.Name]; dup {
			return desiredSet{}, fmt.Errorf("%s: duplicate name %q (also templates[%d])", where, t.Name, j)
		}
		templates[t.Name] = i
		if len(t.Text) > maxContentLen {
			return desiredSet{}, fmt.Errorf("%s (%q): text is larger than %d bytes", where, t.Name, maxContentLen)
		}
		if err := parseTemplate(t.Text); err != nil {
			return desiredSet{}, fmt.Errorf("%s (%q): %w", where, t.Name, err)
		}
		set.Templates = append(set.Templates, &Template{Name: t.Name, Text: t.Text})
	}
	seen := make(map[string]int, len(doc.Files))
	for i, spec := range doc.Files {
		where := fmt.Sprintf("%s: files[%d]", source, i)
		if err := validateName(spec.Name); err != nil {
			return desiredSet{}, fmt.Errorf("%s: %w", where, err)
		}
		if j, dup := seen[spec.Name]; dup {
			return desiredSet{}, fmt.Errorf("%s: duplicate name %q (also files[%d])", where, spec.Name, j)
		}
		seen[spec.Name] = i
		if len(spec.Content) > maxContentLen {
			return desiredSet{}, fmt.Errorf("%s (%q): content is larger than %d bytes", where, spec.Name, maxContentLen)
		}
		if _, ok := templates[spec.Template]; spec.Template != "" && !ok {
			return desiredSet{}, fmt.Errorf("%s (%q): template %q is not defined under templates", where, spec.Name, spec.Template)
		}
		mode := defaultMode
		if spec.Mode != nil {
			mode = *spec.Mode
		}
		set.Files = append(set.Files, &File{Name: spec.Name, Content: spec.Content, Mode: mode, Template: spec.Template})
	}
	return set, nil
}

// embeddedFiles is the default initial desired set.
//
//go:embed files.yaml
var embeddedFiles []byte

// loadInitialFiles reads the initial desired set when the hive is built, so
// a bad file fails the start with a clear error, and inserts it when the
// hive starts, templates and files in one transaction, so no file is
// reconciled before its template is there. Only after that commit is the
// files table marked initialized, which lets the reconciler run its first
// prune: pruning before would delete the wanted files the example wrote in
// an earlier run.
func loadInitialFiles(lc cell.Lifecycle, cfg config, log *slog.Logger, db *statedb.DB, files filesTable, templates statedb.RWTable[*Template]) error {
	source, data := "files.yaml (embedded)", embeddedFiles
	if cfg.FilesPath != "" {
		source = cfg.FilesPath
		var err error
		if data, err = os.ReadFile(cfg.FilesPath); err != nil {
			return refuse("files", fmt.Errorf("--files: %w", err))
		}
	}
	initial, err := parseFiles(source, data)
	switch {
	case err != nil && cfg.FilesPath != "":
		return refuse("files", fmt.Errorf("--files: %w", err))
	case err != nil: // the embedded set: not the user's input
		return fmt.Errorf("initial desired files: %w", err)
	}
	lc.Append(cell.Hook{OnStart: func(cell.HookContext) error {
		wtxn := db.WriteTxn(files, templates)
		for _, t := range initial.Templates {
			if _, _, err := templates.Insert(wtxn, t); err != nil {
				wtxn.Abort()
				return err
			}
		}
		for _, f := range initial.Files {
			f.Status = status.Pending()
			if _, _, err := files.Insert(wtxn, f); err != nil {
				wtxn.Abort()
				return err
			}
		}
		wtxn.Commit()
		wtxn = db.WriteTxn(files)
		files.markInitialized(wtxn)
		wtxn.Commit()
		log.Info("Loaded the initial desired files", "source", source, "count", len(initial.Files), "templates", len(initial.Templates), "directory", cfg.Dir)
		return nil
	}})
	return nil
}

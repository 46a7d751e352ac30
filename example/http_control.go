package main

import (
	"net/http"

	"github.com/cilium/statedb"
)

// The handlers of what converge offers beyond reconciling the files:
// templates (a dependency), the reconcilers and retries tables, and pause
// and resume.

// template serves /templates/{name}.
func (s *server) template(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := validateTemplateName(name); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		t, _, found := s.templates.Get(s.db.ReadTxn(), templateNameIndex.Query(name))
		if !found {
			writeError(w, http.StatusNotFound, "no template %q", name)
			return
		}
		writeJSON(w, http.StatusOK, t)
	case http.MethodPut:
		s.putTemplate(w, r, name)
	case http.MethodDelete:
		s.deleteTemplate(w, name)
	default:
		methodNotAllowed(w, r, http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete)
	}
}

// putTemplate stores a template. The reconciler's dependency on the
// templates table then marks every file that uses it, and those files are
// rendered and written again; the answer does not wait for that.
func (s *server) putTemplate(w http.ResponseWriter, r *http.Request, name string) {
	text, ok := readBody(w, r, "text")
	if !ok {
		return
	}
	if err := parseTemplate(string(text)); err != nil {
		writeError(w, http.StatusBadRequest, "template %q: %v", name, err)
		return
	}
	t := &Template{Name: name, Text: string(text)}
	wtxn := s.db.WriteTxn(s.templates)
	_, replaced, err := s.templates.Insert(wtxn, t)
	if err != nil {
		wtxn.Abort()
		writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	users := s.templateUsers(wtxn, name)
	wtxn.Commit()
	code := http.StatusCreated
	if replaced {
		code = http.StatusOK
	}
	s.log.Info("Template stored", "name", name, "bytes", len(text), "files", len(users))
	writeJSON(w, code, templateAnswer{t, users})
}

// templateAnswer is a template and the files that use it.
type templateAnswer struct {
	*Template
	Files []string `json:"files"`
}

// templateUsers returns the names of the files that use the template.
func (s *server) templateUsers(txn statedb.ReadTxn, name string) []string {
	users := []string{}
	for f := range s.files.List(txn, templateIndex.Query(name)) {
		users = append(users, f.Name)
	}
	return users
}

func (s *server) deleteTemplate(w http.ResponseWriter, name string) {
	wtxn := s.db.WriteTxn(s.templates)
	_, found, err := s.templates.Delete(wtxn, &Template{Name: name})
	if err != nil || !found {
		wtxn.Abort()
		if err == nil {
			writeError(w, http.StatusNotFound, "no template %q", name)
		} else {
			writeError(w, http.StatusInternalServerError, "%v", err)
		}
		return
	}
	wtxn.Commit()
	s.log.Info("Template deleted", "name", name)
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) listTemplates(w http.ResponseWriter, _ *http.Request) {
	txn := s.db.ReadTxn()
	list := []templateAnswer{}
	for t := range s.templates.All(txn) {
		list = append(list, templateAnswer{t, s.templateUsers(txn, t.Name)})
	}
	writeJSON(w, http.StatusOK, list)
}

// listReconcilers serves the reconcilers table that tables.Cell
// provides: one row per reconciler, with its state and figures.
func (s *server) listReconcilers(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, collectAll(s.reconcilers.All(s.db.ReadTxn())))
}

// listRetries serves the reconciler-retries table: one row per failing
// object, with its attempts, last error and next attempt.
func (s *server) listRetries(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, collectAll(s.retries.All(s.db.ReadTxn())))
}

// collectAll is statedb.Collect, but an empty list rather than nil, so
// that it serves as "[]".
func collectAll[Obj any](seq func(yield func(Obj, statedb.Revision) bool)) []Obj {
	list := []Obj{}
	for obj := range seq {
		list = append(list, obj)
	}
	return list
}

// pause pauses the reconciler. It answers at once; health and the
// reconcilers table say "Paused" and "paused" once the reconciler has
// stopped starting operations (an operation already running finishes).
func (s *server) pause(w http.ResponseWriter, _ *http.Request) {
	s.control.Pause()
	s.log.Info("Reconciler paused")
	writeJSON(w, http.StatusOK, map[string]bool{"paused": true})
}

// resume resumes the reconciler: every change made while it was paused
// converges.
func (s *server) resume(w http.ResponseWriter, _ *http.Request) {
	s.control.Resume()
	s.log.Info("Reconciler resumed")
	writeJSON(w, http.StatusOK, map[string]bool{"paused": false})
}

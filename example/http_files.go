package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/status"
)

// The handlers of /files: the desired files, one row of the files table
// each.

func (s *server) file(w http.ResponseWriter, r *http.Request, raw string) {
	name, err := url.PathUnescape(raw)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid file name: %v", err)
		return
	}
	if err := validateName(name); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		f, _, found := s.files.Get(s.db.ReadTxn(), nameIndex.Query(name))
		if !found {
			writeError(w, http.StatusNotFound, "no desired file %q", name)
			return
		}
		writeJSON(w, http.StatusOK, f)
	case http.MethodPut:
		s.put(w, r, name)
	case http.MethodDelete:
		s.delete(w, name)
	default:
		methodNotAllowed(w, r, http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete)
	}
}

func (s *server) put(w http.ResponseWriter, r *http.Request, name string) {
	mode := defaultMode
	if q := r.URL.Query().Get("mode"); q != "" {
		var err error
		if mode, err = parseMode(q); err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
	}
	// A template that is not defined yet is accepted: the file fails until
	// it is, and the dependency on the templates table then writes it.
	tmpl := r.URL.Query().Get("template")
	if tmpl != "" {
		if err := validateTemplateName(tmpl); err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
	}
	content, ok := readBody(w, r, "content")
	if !ok {
		return
	}
	f := &File{Name: name, Content: string(content), Mode: mode, Template: tmpl, Status: status.Pending()}
	wtxn := s.db.WriteTxn(s.files)
	_, replaced, err := s.files.Insert(wtxn, f)
	if err != nil {
		wtxn.Abort()
		writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	wtxn.Commit()
	code := http.StatusCreated
	if replaced {
		code = http.StatusOK
	}
	s.log.Info("Desired file stored", "name", name, "bytes", len(content), "mode", mode, "template", tmpl)
	writeJSON(w, code, f)
}

// readBody reads a request's body of at most maxContentLen bytes. If it
// cannot, it answers the request and returns false. what names the body in
// the error.
func readBody(w http.ResponseWriter, r *http.Request, what string) ([]byte, bool) {
	tooLarge := fmt.Sprintf("%s is larger than the limit of %d bytes", what, maxContentLen)
	if r.ContentLength > maxContentLen {
		writeError(w, http.StatusRequestEntityTooLarge, "%s", tooLarge)
		return nil, false
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxContentLen))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "%s", tooLarge)
		} else {
			writeError(w, http.StatusBadRequest, "reading the body: %v", err)
		}
		return nil, false
	}
	return data, true
}

func (s *server) delete(w http.ResponseWriter, name string) {
	wtxn := s.db.WriteTxn(s.files)
	_, found, err := s.files.Delete(wtxn, &File{Name: name})
	if err != nil || !found {
		wtxn.Abort()
		if err == nil {
			writeError(w, http.StatusNotFound, "no desired file %q", name)
		} else {
			writeError(w, http.StatusInternalServerError, "%v", err)
		}
		return
	}
	wtxn.Commit()
	s.log.Info("Desired file deleted", "name", name)
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) list(w http.ResponseWriter, _ *http.Request) {
	files := statedb.Collect(s.files.All(s.db.ReadTxn()))
	if files == nil {
		files = []*File{} // "[]", not "null"
	}
	writeJSON(w, http.StatusOK, files)
}

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
		http.Error(w, "invalid file name: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := validateName(name); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		f, _, found := s.files.Get(s.db.ReadTxn(), nameIndex.Query(name))
		if !found {
			http.Error(w, fmt.Sprintf("no desired file %q", name), http.StatusNotFound)
			return
		}
		writeJSON(w, http.StatusOK, f)
	case http.MethodPut:
		s.put(w, r, name)
	case http.MethodDelete:
		s.delete(w, name)
	default:
		w.Header().Set("Allow", "GET, HEAD, PUT, DELETE")
		http.Error(w, r.Method+" is not allowed on /files/{name}: use PUT, GET or DELETE", http.StatusMethodNotAllowed)
	}
}

func (s *server) put(w http.ResponseWriter, r *http.Request, name string) {
	mode := defaultMode
	if q := r.URL.Query().Get("mode"); q != "" {
		var err error
		if mode, err = parseMode(q); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	// A template that is not defined yet is accepted: the file fails until
	// it is, and the dependency on the templates table then writes it.
	tmpl := r.URL.Query().Get("template")
	if tmpl != "" {
		if err := validateTemplateName(tmpl); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
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
		http.Error(w, err.Error(), http.StatusInternalServerError)
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
		http.Error(w, tooLarge, http.StatusRequestEntityTooLarge)
		return nil, false
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxContentLen))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, tooLarge, http.StatusRequestEntityTooLarge)
		} else {
			http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
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
			http.Error(w, fmt.Sprintf("no desired file %q", name), http.StatusNotFound)
		} else {
			http.Error(w, err.Error(), http.StatusInternalServerError)
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

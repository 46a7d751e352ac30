package main

import (
	"context"
	"encoding/json"
	"errors"
	"expvar"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/status"
)

// server is the HTTP API. Its routes:
//
//	PUT    /files/{name}   create or replace a desired file (body = content, ?mode=0644)
//	GET    /files/{name}   one desired file with its status, as JSON
//	DELETE /files/{name}   remove a desired file
//	GET    /files          every desired file with its status, as JSON
//	GET    /health         the hive's health, as JSON (503 unless OK)
//	GET    /debug/vars     expvar, including the reconciler's metrics
//	GET    /statedb/...    StateDB's own handler: /statedb/dump, /statedb/dump/files, ...
type server struct {
	log    *slog.Logger
	db     *statedb.DB
	files  statedb.RWTable[*File]
	health *health
	mux    *http.ServeMux
	http   *http.Server

	addr   string
	ln     net.Listener
	cancel context.CancelFunc // ends the contexts of requests, for long polls
	done   chan struct{}      // closed when Serve returns
}

func newServer(lc cell.Lifecycle, cfg config, log *slog.Logger, db *statedb.DB, files filesTable, h *health) *server {
	s := &server{
		log: log, db: db, files: files.RWTable, health: h,
		addr: cfg.Addr, mux: http.NewServeMux(), done: make(chan struct{}),
	}
	s.mux.HandleFunc("GET /{$}", s.index)
	s.mux.HandleFunc("GET /files", s.list)
	s.mux.HandleFunc("GET /health", s.serveHealth)
	s.mux.Handle("GET /debug/vars", expvar.Handler())
	s.mux.Handle("/statedb/", http.StripPrefix("/statedb", db.HTTPHandler()))

	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.http = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	lc.Append(cell.Hook{OnStart: s.start, OnStop: s.stop})
	return s
}

// start listens before returning, so a busy address fails the hive's start.
func (s *server) start(cell.HookContext) error {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("http: %w", err)
	}
	s.ln = ln
	s.log.Info("Serving HTTP", "address", "http://"+ln.Addr().String())
	go func() {
		defer close(s.done)
		if err := s.http.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("HTTP server failed", "error", err)
		}
	}()
	return nil
}

func (s *server) stop(ctx cell.HookContext) error {
	s.cancel() // ends streaming requests such as /statedb/changes/files
	err := s.http.Shutdown(ctx)
	if err != nil {
		s.http.Close()
	}
	<-s.done
	return err
}

// Addr returns the address listened on, once started.
func (s *server) Addr() string { return s.ln.Addr().String() }

// Done is closed when the server stops serving, by Stop or by failure.
func (s *server) Done() <-chan struct{} { return s.done }

// ServeHTTP routes /files/{name} itself rather than through the ServeMux:
// the mux cleans paths and redirects "/files/../x" to "/x", while a bad name
// deserves a 400 that says what is wrong with it.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if raw, ok := strings.CutPrefix(r.URL.EscapedPath(), "/files/"); ok {
		s.file(w, r, raw)
		return
	}
	s.mux.ServeHTTP(w, r)
}

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
	tooLarge := fmt.Sprintf("content is larger than the limit of %d bytes", maxContentLen)
	if r.ContentLength > maxContentLen {
		http.Error(w, tooLarge, http.StatusRequestEntityTooLarge)
		return
	}
	content, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxContentLen))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, tooLarge, http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	f := &File{Name: name, Content: string(content), Mode: mode, Status: status.Pending()}
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
	s.log.Info("Desired file stored", "name", name, "bytes", len(content), "mode", mode)
	writeJSON(w, code, f)
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

// serveHealth answers 200 when the overall level is OK and 503 otherwise, so
// that probes notice a degraded reconciler.
func (s *server) serveHealth(w http.ResponseWriter, _ *http.Request) {
	level, reports := s.health.Report()
	code := http.StatusOK
	if level != cell.StatusOK {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, struct {
		Level  cell.Level     `json:"level"`
		Scopes []healthReport `json:"scopes"`
	}{level, reports})
}

func (s *server) index(w http.ResponseWriter, _ *http.Request) {
	fmt.Fprint(w, `converge example: desired files reconciled into a directory
  PUT    /files/{name}   create or replace (body = content, ?mode=0644)
  GET    /files/{name}   one file and its status
  DELETE /files/{name}   remove
  GET    /files          all files and their statuses
  GET    /health         health (503 unless OK)
  GET    /debug/vars     metrics (expvar)
  GET    /statedb/dump   StateDB contents
`)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

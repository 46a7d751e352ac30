package main

import (
	"context"
	"encoding/json"
	"errors"
	"expvar"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler"
)

// server is the HTTP API. Its routes:
//
//	PUT    /files/{name}      create or replace a desired file (body = content, ?mode=0644, ?template=NAME)
//	GET    /files/{name}      one desired file with its status, as JSON
//	DELETE /files/{name}      remove a desired file
//	GET    /files             every desired file with its status, as JSON
//	PUT    /templates/{name}  create or replace a template (body = text); rewrites the files using it
//	GET    /templates/{name}  one template, as JSON
//	DELETE /templates/{name}  remove a template; the files using it fail until it is back
//	GET    /templates         every template, as JSON
//	GET    /reconcilers       the reconcilers table (reconciler.TablesCell), as JSON
//	GET    /retries           the reconciler-retries table: failing files, as JSON
//	POST   /pause             pause the reconciler: nothing is written until /resume
//	POST   /resume            resume it: what changed meanwhile converges
//	GET    /health            the hive's health, as JSON (503 unless OK)
//	GET    /metrics           the reconciler's metrics, for Prometheus
//	GET    /debug/vars        expvar: Go's runtime variables and the reconciler's metrics
//	GET    /statedb/...       StateDB's own handler: /statedb/dump, /statedb/dump/files, ...
//
// Requests from a web page the user visits are refused with 403 (see
// checkOrigin), and query parameters a route does not take with 400.
type server struct {
	log         *slog.Logger
	db          *statedb.DB
	files       statedb.RWTable[*File]
	templates   statedb.RWTable[*Template]
	reconcilers statedb.Table[*reconciler.Info]
	retries     statedb.Table[*reconciler.RetryInfo]
	health      *health
	mux         *http.ServeMux
	http        *http.Server

	// control pauses and resumes the reconciler. It is set by an invoke
	// after the server is constructed (see filesModule): taking the
	// reconciler as a constructor argument would register its jobs before
	// the server's start hook, and start them before the address is bound.
	control interface {
		Pause()
		Resume()
	}

	addr   string
	ln     net.Listener
	cancel context.CancelFunc // ends the contexts of requests, for long polls
	done   chan struct{}      // closed when Serve returns
}

type serverParams struct {
	cell.In

	Lifecycle   cell.Lifecycle
	Config      config
	Log         *slog.Logger
	DB          *statedb.DB
	Files       filesTable
	Templates   statedb.RWTable[*Template]
	Reconcilers statedb.Table[*reconciler.Info]      // from reconciler.TablesCell
	Retries     statedb.Table[*reconciler.RetryInfo] // from reconciler.TablesCell
	Health      *health
	Metrics     promMetrics
}

func newServer(p serverParams) *server {
	s := &server{
		log: p.Log, db: p.DB, files: p.Files.RWTable, templates: p.Templates,
		reconcilers: p.Reconcilers, retries: p.Retries, health: p.Health,
		addr: p.Config.Addr, mux: http.NewServeMux(), done: make(chan struct{}),
	}
	s.mux.HandleFunc("GET /{$}", s.index)
	s.mux.HandleFunc("GET /files", s.list)
	s.mux.HandleFunc("GET /templates", s.listTemplates)
	s.mux.HandleFunc("/templates/{name}", s.template)
	s.mux.HandleFunc("GET /reconcilers", s.listReconcilers)
	s.mux.HandleFunc("GET /retries", s.listRetries)
	s.mux.HandleFunc("POST /pause", s.pause)
	s.mux.HandleFunc("POST /resume", s.resume)
	s.mux.HandleFunc("GET /health", s.serveHealth)
	s.mux.Handle("GET /metrics", p.Metrics.handler)
	s.mux.Handle("GET /debug/vars", expvar.Handler())
	s.mux.Handle("/statedb/", http.StripPrefix("/statedb", p.DB.HTTPHandler()))

	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.http = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(p.Log.Handler(), slog.LevelWarn),
	}
	p.Lifecycle.Append(cell.Hook{OnStart: s.start, OnStop: s.stop})
	return s
}

// start listens before returning, so a busy or invalid address fails the
// hive's start, with a usage error (exit status 2).
func (s *server) start(cell.HookContext) error {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return refuse("addr", fmt.Errorf("--addr %s: cannot listen: %w", s.addr, err))
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

// ServeHTTP first refuses what a web page the user visits could send (see
// checkOrigin) and query parameters no route takes. It routes
// /files/{name} itself rather than through the ServeMux: the mux cleans
// paths and redirects "/files/../x" to "/x", while a bad name deserves a
// 400 that says what is wrong with it.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := s.checkOrigin(r); err != nil {
		s.log.Warn("Refused a request from outside", "method", r.Method, "path", r.URL.Path, "reason", err)
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	if raw, ok := strings.CutPrefix(r.URL.EscapedPath(), "/files/"); ok {
		var params []string
		if r.Method == http.MethodPut {
			params = []string{"mode", "template"}
		}
		if knownParams(w, r, params...) {
			s.file(w, r, raw)
		}
		return
	}
	// StateDB's handler takes its own parameters.
	if strings.HasPrefix(r.URL.Path, "/statedb/") || knownParams(w, r) {
		s.mux.ServeHTTP(w, r)
	}
}

// checkOrigin refuses the requests a web page in the user's browser could
// make: one whose Host is neither a loopback name nor the address listened
// on (a DNS-rebinding page reaches 127.0.0.1 under a name of its own), and
// a cross-site one (an Origin other than the API's own, or a browser's
// Sec-Fetch-Site: cross-site). Tools such as curl send neither header.
func (s *server) checkOrigin(r *http.Request) error {
	if !s.ownHost(r.Host) {
		return fmt.Errorf("host %q is not this API's address: use %s or localhost", r.Host, s.Addr())
	}
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return errors.New("cross-site requests are refused")
	}
	if origin := r.Header.Get("Origin"); origin != "" && origin != "http://"+r.Host {
		return fmt.Errorf("requests from origin %q are refused", origin)
	}
	return nil
}

// ownHost reports whether hostport, a request's Host, names this server:
// localhost or a loopback address, or the address listened on, with the
// port listened on if it has one.
func (s *server) ownHost(hostport string) bool {
	listenHost, listenPort, err := net.SplitHostPort(s.Addr())
	if err != nil {
		return false
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil { // no port
		host, port = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), ""
	}
	if port != "" && port != listenPort {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	listenIP := net.ParseIP(listenHost)
	return ip.IsLoopback() || ip.Equal(listenIP) || (listenIP != nil && listenIP.IsUnspecified())
}

// knownParams answers 400 and returns false if r has a query parameter
// that is not one of allowed.
func knownParams(w http.ResponseWriter, r *http.Request, allowed ...string) bool {
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		http.Error(w, "invalid query: "+err.Error(), http.StatusBadRequest)
		return false
	}
	for name := range query {
		if !slices.Contains(allowed, name) {
			msg := fmt.Sprintf("unknown query parameter %q for %s %s", name, r.Method, r.URL.Path)
			if len(allowed) > 0 {
				msg += "; it takes " + strings.Join(allowed, ", ")
			}
			http.Error(w, msg, http.StatusBadRequest)
			return false
		}
	}
	return true
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
  PUT    /files/{name}      create or replace (body = content, ?mode=0644, ?template=NAME)
  GET    /files/{name}      one file and its status
  DELETE /files/{name}      remove
  GET    /files             all files and their statuses
  PUT    /templates/{name}  create or replace a template (body = text, with {{name}} and {{content}})
  GET    /templates/{name}  one template
  DELETE /templates/{name}  remove a template; the files using it fail until it is back
  GET    /templates         all templates
  GET    /reconcilers       the reconcilers table
  GET    /retries           failing files and their next attempt
  POST   /pause             stop writing until /resume
  POST   /resume            apply what changed meanwhile
  GET    /health            health (503 unless OK)
  GET    /metrics           Prometheus metrics
  GET    /debug/vars        Go runtime variables and the reconciler's metrics (expvar)
  GET    /statedb/dump      StateDB contents
`)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

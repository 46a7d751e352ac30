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

	"github.com/converge-go/converge/tables"
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
//	GET    /reconcilers       the reconcilers table (tables.Cell), as JSON
//	GET    /retries           the reconciler-retries table: failing files, as JSON
//	POST   /pause             pause the reconciler: nothing is written until /resume
//	POST   /resume            resume it: what changed meanwhile converges
//	GET    /health            the hive's health, as JSON (503 unless OK)
//	GET    /metrics           the reconciler's metrics, for Prometheus
//	GET    /debug/vars        expvar: Go's runtime variables and the reconciler's metrics
//	GET    /statedb/...       StateDB's own handler: /statedb/dump, /statedb/dump/files, ...
//
// Every request must carry the API's token (see apiToken); requests from
// a web page the user visits are refused with 403 (see checkOrigin), and
// query parameters a route does not take with 400. Errors are JSON
// objects, {"error": "..."}. Request bodies are limited to maxContentLen
// bytes, connections that are slow or idle are closed (see httpTimeouts),
// and at most maxConns are served at once.
type server struct {
	log         *slog.Logger
	db          *statedb.DB
	files       statedb.RWTable[*File]
	templates   statedb.RWTable[*Template]
	reconcilers statedb.Table[*tables.Info]
	retries     statedb.Table[*tables.RetryInfo]
	health      *health
	token       *apiToken
	refusals    *refusalLog // requests refused for their Host or Origin
	timeouts    httpTimeouts
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

	addr     string
	maxConns int // connections served at once
	ln       net.Listener
	cancel   context.CancelFunc // ends the contexts of requests, for long polls
	done     chan struct{}      // closed when Serve returns
}

// httpTimeouts bound how long a connection may take. The zero value sets
// none: newServer uses defaultTimeouts, and tests provide shorter ones.
type httpTimeouts struct {
	ReadHeader time.Duration // to read a request's headers
	Read       time.Duration // to read a whole request, body included
	Write      time.Duration // to write a response; a stream of changes gets this much per write
	Idle       time.Duration // between requests on a kept-alive connection
}

func defaultTimeouts() httpTimeouts {
	return httpTimeouts{ReadHeader: 10 * time.Second, Read: time.Minute, Write: time.Minute, Idle: 2 * time.Minute}
}

// maxHeaderBytes bounds a request's headers.
const maxHeaderBytes = 64 << 10

type serverParams struct {
	cell.In

	Config      config
	Log         *slog.Logger
	DB          *statedb.DB
	Files       filesTable
	Templates   statedb.RWTable[*Template]
	Reconcilers statedb.Table[*tables.Info]      // from tables.Cell
	Retries     statedb.Table[*tables.RetryInfo] // from tables.Cell
	Health      *health
	Metrics     promMetrics
	Token       *apiToken
	Timeouts    *httpTimeouts `optional:"true"` // tests shorten them
	MaxConns    connLimit     `optional:"true"` // tests lower it
}

// newServer checks --addr and builds the server; registerStart adds its
// start hooks. An address that is not a loopback address gets a warning:
// the token keeps strangers out, but plain HTTP shows it, and the files,
// to the network.
func newServer(p serverParams) (*server, error) {
	if err := checkAddr(p.Log, p.Config.Addr); err != nil {
		return nil, err
	}
	s := &server{
		log: p.Log, db: p.DB, files: p.Files.RWTable, templates: p.Templates,
		reconcilers: p.Reconcilers, retries: p.Retries, health: p.Health, token: p.Token, refusals: newRefusalLog(p.Log),
		timeouts: defaultTimeouts(),
		addr:     p.Config.Addr, mux: http.NewServeMux(), done: make(chan struct{}),
	}
	if p.Timeouts != nil {
		s.timeouts = *p.Timeouts
	}
	s.maxConns = maxConns
	if p.MaxConns > 0 {
		s.maxConns = int(p.MaxConns)
	}
	get, post := []string{http.MethodGet, http.MethodHead}, []string{http.MethodPost}
	s.mux.HandleFunc("/{$}", allow(get, s.index))
	s.mux.HandleFunc("/files", allow(get, s.list))
	s.mux.HandleFunc("/templates", allow(get, s.listTemplates))
	s.mux.HandleFunc("/templates/{name}", s.template)
	s.mux.HandleFunc("/reconcilers", allow(get, s.listReconcilers))
	s.mux.HandleFunc("/retries", allow(get, s.listRetries))
	s.mux.HandleFunc("/pause", allow(post, s.pause))
	s.mux.HandleFunc("/resume", allow(post, s.resume))
	s.mux.HandleFunc("/health", allow(get, s.serveHealth))
	s.mux.HandleFunc("/metrics", allow(get, p.Metrics.handler.ServeHTTP))
	s.mux.HandleFunc("/debug/vars", allow(get, serveVars))
	s.mux.HandleFunc("/statedb/", allow(get, s.statedbHandler(p.DB.HTTPHandler())))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such path %q: GET / lists the API", r.URL.Path)
	})

	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.http = &http.Server{
		Handler: s,
		// net/http answers "OPTIONS *" itself, before the handler and so
		// before the token: 200, and the connection kept. Let the handler
		// refuse it like any other request.
		DisableGeneralOptionsHandler: true,
		ReadHeaderTimeout:            s.timeouts.ReadHeader,
		ReadTimeout:                  s.timeouts.Read,
		WriteTimeout:                 s.timeouts.Write,
		IdleTimeout:                  s.timeouts.Idle,
		MaxHeaderBytes:               maxHeaderBytes,
		BaseContext:                  func(net.Listener) context.Context { return ctx },
		ErrorLog:                     slog.NewLogLogger(p.Log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// checkAddr refuses an --addr that cannot be listened on, such as one
// with an invalid port, before anything starts, and warns about one that
// is not a loopback address. (An address in use is only found by
// listening.)
func checkAddr(log *slog.Logger, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return usageErrorf("addr", "--addr %s: %v; give host:port, such as 127.0.0.1:8080", addr, err)
	}
	if !isLoopback(host) {
		log.Warn("--addr is not a loopback address: other machines may reach the API. "+
			"It asks for the token, but over plain HTTP the token and the files can be read on the network",
			"address", addr)
	}
	return nil
}

// isLoopback reports whether host, from --addr, listens on loopback only:
// localhost or a loopback IP address. An empty host listens everywhere.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// listen binds --addr, and for a loopback address the other loopback
// address at the same port (see listenAPI), so that a busy or invalid
// address fails the hive's start, with a usage error (exit status 2),
// before the directory is touched. It serves nothing yet: see serve.
func (s *server) listen(cell.HookContext) error {
	ln, err := listenAPI(s.addr)
	if err != nil {
		return refuse("addr", fmt.Errorf("--addr %s: cannot listen: %w", s.addr, err))
	}
	s.ln = newLimitListener(ln, s.maxConns)
	return nil
}

// closeListener closes the listener if serve never took it over.
func (s *server) closeListener(cell.HookContext) error {
	select {
	case <-s.done:
	default:
		if s.ln != nil {
			s.ln.Close()
		}
	}
	return nil
}

// serve starts serving, the last thing the start does.
func (s *server) serve(cell.HookContext) error {
	s.log.Info("Serving HTTP", "address", "http://"+s.ln.Addr().String())
	go func() {
		defer close(s.done)
		if err := s.http.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
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
// checkOrigin), requests without the token, bodies over the limit and
// query parameters no route takes. It routes /files/{name} itself rather
// than through the ServeMux: the mux cleans paths and redirects
// "/files/../x" to "/x", while a bad name deserves a 400 that says what
// is wrong with it.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := s.checkOrigin(r); err != nil {
		s.refusals.refused(r.Method, r.URL.Path, err) // at a bounded rate
		releaseConnection(w)
		writeError(w, http.StatusForbidden, "%v", err)
		return
	}
	revoked, ok := s.token.allows(r)
	if !ok {
		releaseConnection(w)
		w.Header().Set("WWW-Authenticate", `Bearer realm="converge example"`)
		writeError(w, http.StatusUnauthorized, "this API needs its token: send \"Authorization: Bearer TOKEN\" "+
			"(curl --oauth2-bearer TOKEN) with the token in %s of the target directory", tokenPath)
		return
	}
	// A request under way ends when its token is replaced.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-revoked:
			cancel()
		case <-ctx.Done():
		}
	}()
	r = r.WithContext(ctx)
	if r.ContentLength > maxContentLen {
		writeError(w, http.StatusRequestEntityTooLarge, "the request body is larger than the limit of %d bytes", maxContentLen)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxContentLen)
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

// releaseConnection makes the answer to a request refused before its
// token is checked the last of its connection: the body is not read (the
// connection's read deadline is now) and the connection is closed after
// the answer ("Connection: close"). A client without the token, which may
// be another user of the machine, thus holds none of the connections the
// listener allows by keeping one alive or by sending a body slowly, nor
// holds up the stop.
func releaseConnection(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	http.NewResponseController(w).SetReadDeadline(time.Now())
}

// allow serves a route with h for the given methods, and answers others
// with 405 and an Allow header.
func allow(methods []string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(methods, r.Method) {
			methodNotAllowed(w, r, methods...)
			return
		}
		h(w, r)
	}
}

// methodNotAllowed answers 405 with the methods the route takes.
func methodNotAllowed(w http.ResponseWriter, r *http.Request, methods ...string) {
	list := strings.Join(methods, ", ")
	w.Header().Set("Allow", list)
	writeError(w, http.StatusMethodNotAllowed, "%s is not allowed on %s: it takes %s", r.Method, r.URL.Path, list)
}

// statedbHandler serves StateDB's handler under /statedb/. A path it does
// not have gets the API's 404; a stream of changes may last as long as
// its client reads it, each write within the write timeout.
func (s *server) statedbHandler(h http.Handler) http.HandlerFunc {
	stripped := http.StripPrefix("/statedb", h)
	mux, _ := h.(*http.ServeMux)
	return func(w http.ResponseWriter, r *http.Request) {
		if mux != nil {
			inner := r.Clone(r.Context())
			inner.URL.Path = strings.TrimPrefix(r.URL.Path, "/statedb")
			inner.URL.RawPath = ""
			if _, pattern := mux.Handler(inner); pattern == "" {
				writeError(w, http.StatusNotFound, "no such path %q: StateDB serves /statedb/dump, /statedb/dump/{table}, /statedb/query and /statedb/changes/{table}", r.URL.Path)
				return
			}
		}
		if strings.HasPrefix(r.URL.Path, "/statedb/changes/") {
			rc := http.NewResponseController(w)
			rc.SetReadDeadline(time.Time{}) // the request is read; the stream goes on
			w = &extendingWriter{ResponseWriter: w, rc: rc, timeout: s.timeouts.Write}
		}
		stripped.ServeHTTP(w, r)
	}
}

// extendingWriter gives each write of a stream its own write timeout: a
// client that reads keeps the stream, one that stops reading loses it.
type extendingWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (w *extendingWriter) Write(p []byte) (int, error) {
	if w.timeout > 0 {
		w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController flush the stream.
func (w *extendingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// serveVars serves expvar's variables as expvar.Handler does, less
// "cmdline": the command line may name paths or hold values that are not
// the API's to show.
func serveVars(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	fmt.Fprint(w, "{\n")
	first := true
	expvar.Do(func(kv expvar.KeyValue) {
		if kv.Key == "cmdline" {
			return
		}
		if !first {
			fmt.Fprint(w, ",\n")
		}
		first = false
		fmt.Fprintf(w, "%q: %s", kv.Key, kv.Value)
	})
	fmt.Fprint(w, "\n}\n")
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
		writeError(w, http.StatusBadRequest, "invalid query: %v", err)
		return false
	}
	for name := range query {
		if !slices.Contains(allowed, name) {
			msg := fmt.Sprintf("unknown query parameter %q for %s %s", name, r.Method, r.URL.Path)
			if len(allowed) > 0 {
				msg += "; it takes " + strings.Join(allowed, ", ")
			}
			writeError(w, http.StatusBadRequest, "%s", msg)
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
Every request needs "Authorization: Bearer TOKEN", the token in .converge-example/token
of the directory; errors are JSON objects {"error": "..."}.
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

// writeError answers with code and a JSON object {"error": message}, the
// shape of every error of the API.
func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, struct {
		Error string `json:"error"`
	}{fmt.Sprintf(format, args...)})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

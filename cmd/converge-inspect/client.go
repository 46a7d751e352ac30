package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/statedb"
)

// Bounds on what the agent sends.
const (
	maxResponse = 64 << 20 // bytes of one /query answer
	maxLine     = 1 << 20  // bytes of one row, or one change
	maxRows     = 100_000  // rows of one table
	maxIdle     = 2 * time.Minute
	maxErrBody  = 64 << 10 // bytes of an error answer read for its message
)

// Errors of the client. Each is wrapped with what went wrong where.
var (
	// errUnreachable: the agent could not be reached or did not answer in
	// time.
	errUnreachable = errors.New("cannot reach the agent")
	// errUnauthorized: the agent asked for a token, or refused the one
	// given.
	errUnauthorized = errors.New("unauthorized")
	// errNoTable: the agent has no such table.
	errNoTable = errors.New("no table")
	// errVersion: the agent answers in a form this command does not know:
	// not StateDB's handler, or rows of another converge version.
	errVersion = errors.New("unexpected answer")
	// errTooLarge: an answer passed a bound.
	errTooLarge = errors.New("answer too large")
)

// client reads tables from one agent's StateDB HTTP handler: GET /query for
// a table's rows, GET /changes/{table} for the stream of its changes. It
// sends the token, if any, on every request. Its methods are safe for
// concurrent use. statedb.RemoteTable does the same but cannot carry a
// token (its SetTransport takes an *http.Transport, which adds no
// headers) nor bound what it reads.
type client struct {
	base  *url.URL
	token string
	http  *http.Client
}

// newClient checks base and returns a client of it. Connecting, and
// waiting for an answer's headers, each take at most timeout.
func newClient(base, token string, timeout time.Duration) (*client, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--url %q: give the base URL of the agent's StateDB handler, such as %s", base, defaultURL)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("--url %s: give a URL without user, query or fragment (the token goes in --token-file)", u.Redacted())
	}
	if token != "" && u.Scheme == "http" && !isLoopback(u.Hostname()) {
		return nil, fmt.Errorf("--url %s: refusing to send the token over plain HTTP to a host that is not a loopback address; use https", u)
	}
	dialer := &net.Dialer{Timeout: timeout}
	transport := &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		// localhost is 127.0.0.1, whatever the resolver says: a client
		// that resolves it to ::1 first sends its token to whoever
		// listens on [::1] at the port, which another local user can do
		// when the agent holds 127.0.0.1 only.
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, pinLocalhost(addr))
		},
		TLSHandshakeTimeout:    timeout,
		ResponseHeaderTimeout:  timeout,
		MaxResponseHeaderBytes: 64 << 10,
		ForceAttemptHTTP2:      true,
	}
	return &client{
		base:  u,
		token: token,
		http: &http.Client{
			Transport: transport,
			// A redirect would be answered with an error: the handler
			// does not redirect, and the token stays with its host.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}, nil
}

// pinLocalhost returns addr, host:port, with the host localhost (in any
// case) replaced by 127.0.0.1. Give http://[::1]:PORT to reach an agent
// on the IPv6 loopback address.
func pinLocalhost(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err == nil && strings.EqualFold(host, "localhost") {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

// close closes the client's idle connections.
func (c *client) close() { c.http.CloseIdleConnections() }

// isLoopback reports whether host is localhost or a loopback IP address.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// row is a row of a table as StateDB's handler sends it: its revision and
// the object, still encoded.
type row struct {
	Rev     uint64          `json:"rev"`
	Obj     json.RawMessage `json:"obj"`
	Deleted bool            `json:"deleted,omitempty"` // in a change only
}

// query returns every row of table, in the order of its index (the
// primary index's name: every table has one by that name).
func (c *client) query(ctx context.Context, table, index string) ([]row, error) {
	body, err := json.Marshal(statedb.QueryRequest{
		Key:        base64.StdEncoding.EncodeToString(nil),
		Table:      table,
		Index:      index,
		LowerBound: true, // from the empty key: every row
	})
	if err != nil {
		return nil, err
	}
	resp, err := c.get(ctx, table, body, "query")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	where := c.base.JoinPath("query").String()
	lines := newLineScanner(http.MaxBytesReader(nil, resp.Body, maxResponse))
	var rows []row
	for lines.Scan() {
		if lines.Err() != nil {
			break // cut short: the line is what arrived of one, said below
		}
		r, err := decodeRow(lines.Bytes(), where, table)
		if err != nil {
			return nil, err
		}
		if len(rows) == maxRows {
			return nil, fmt.Errorf("%w: table %s has more than %d rows", errTooLarge, table, maxRows)
		}
		rows = append(rows, r)
	}
	if err := lines.Err(); err != nil {
		return nil, c.readError(ctx, where, err)
	}
	return rows, nil
}

// stream is the stream of changes of one table: first every row it has,
// then each change as it is committed, in the order of revisions. Use next
// from one goroutine, close from any.
type stream struct {
	table string
	where string
	body  io.ReadCloser
	lines *bufio.Scanner
	idle  *time.Timer // ends the stream when the agent sends nothing, not even a keep-alive
	idled atomic.Bool // idle fired
	stop  context.CancelFunc
	once  sync.Once
}

// changes opens the stream of changes of table. It returns once the agent
// answered, which it does once it follows the table's changes: every
// change committed after changes returns is in the stream.
func (c *client) changes(ctx context.Context, table string) (*stream, error) {
	ctx, stop := context.WithCancel(ctx)
	resp, err := c.get(ctx, table, nil, "changes", table)
	if err != nil {
		stop()
		return nil, err
	}
	s := &stream{
		table: table,
		where: c.base.JoinPath("changes", table).String(),
		body:  resp.Body,
		lines: newLineScanner(resp.Body),
		stop:  stop,
	}
	s.idle = time.AfterFunc(maxIdle, func() { s.idled.Store(true); stop() })
	return s, nil
}

// next returns the next change, skipping StateDB's keep-alives.
func (s *stream) next() (row, error) {
	for s.lines.Scan() {
		if s.lines.Err() != nil {
			break // cut short: the line is what arrived of one, said below
		}
		s.idle.Reset(maxIdle)
		r, err := decodeRow(s.lines.Bytes(), s.where, s.table)
		if err != nil {
			return row{}, err
		}
		if r.Rev == 0 {
			continue // a keep-alive
		}
		return r, nil
	}
	err := s.lines.Err()
	switch {
	case err == nil:
		err = fmt.Errorf("the agent ended the stream of changes of %s (did it stop?)", s.table)
	case errors.Is(err, bufio.ErrTooLong):
		err = fmt.Errorf("%w: the stream of changes of %s has a line longer than %d bytes", errTooLarge, s.table, maxLine)
	case s.idled.Load():
		err = fmt.Errorf("%w: no data on the stream of changes of %s for %s, not even StateDB's keep-alive", errUnreachable, s.table, maxIdle)
	default:
		err = fmt.Errorf("reading the stream of changes of %s: %w", s.table, err)
	}
	return row{}, err
}

// close ends the stream.
func (s *stream) close() {
	s.once.Do(func() {
		s.idle.Stop()
		s.stop()
		s.body.Close()
	})
}

// get sends GET to the path elements under the base URL, with body if not
// nil, and returns the answer if its status is 200.
func (c *client) get(ctx context.Context, table string, body []byte, path ...string) (*http.Response, error) {
	where := c.base.JoinPath(path...).String()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, where, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.readError(ctx, where, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, c.statusError(resp, where, table)
	}
	return resp, nil
}

// readError explains err, from sending a request to where or reading the
// answer.
func (c *client) readError(ctx context.Context, where string, err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err // without the method and URL, said below
	}
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return fmt.Errorf("%w: the answer of %s is larger than %d bytes", errTooLarge, where, tooLarge.Limit)
	case errors.Is(err, bufio.ErrTooLong):
		return fmt.Errorf("%w: the answer of %s has a line longer than %d bytes", errTooLarge, where, maxLine)
	case errors.Is(ctx.Err(), context.Canceled):
		return ctx.Err()
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%w at %s: no complete answer in time (--timeout)", errUnreachable, where)
	}
	// A malformed answer's error quotes what the agent sent.
	return fmt.Errorf("%w at %s: %s (is it running, and is --url the address of its StateDB handler?)", errUnreachable, where, cleanText(err.Error()))
}

// statusError explains an answer from where whose status is not 200.
// StateDB's handler sends its errors as {"err": "..."}; the example's as
// {"error": "..."}.
func (c *client) statusError(resp *http.Response, where, table string) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrBody))
	var msg struct {
		Err   string `json:"err"`
		Error string `json:"error"`
	}
	json.Unmarshal(data, &msg)
	said := cleanText(msg.Err + msg.Error)
	status := cleanText(resp.Status) // its reason phrase is the agent's text
	switch {
	case resp.StatusCode == http.StatusUnauthorized && c.token == "":
		return fmt.Errorf("%w: %s answered %s: it asks for a token; give --token-file (the example's is DIR/.converge-example/token) or set %s",
			errUnauthorized, where, status, tokenEnv)
	case resp.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("%w: %s answered %s: it refused the token (the example writes a new one at every start)", errUnauthorized, where, status)
	case resp.StatusCode == http.StatusNotFound && strings.HasPrefix(msg.Err, "Table "):
		return fmt.Errorf("%w %s: is tables.Cell in the agent's hive?", errNoTable, table)
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%w: %s answered %s: is --url the base of the agent's StateDB handler, under which it serves /query and /changes (such as %s)?",
			errVersion, where, status, defaultURL)
	case resp.StatusCode == http.StatusBadRequest && strings.HasPrefix(msg.Err, "Index "):
		return fmt.Errorf("%w: %s answered %s: %s: is the agent built with another version of converge?", errVersion, where, status, said)
	case said != "":
		return fmt.Errorf("%s answered %s: %s", where, status, said)
	}
	return fmt.Errorf("%s answered %s", where, status)
}

// newLineScanner returns a scanner of the lines of r, each at most maxLine
// bytes, its newline not counted. When reading r fails, the scanner still hands out what it read of
// the last line before Scan returns false, but Err already tells the
// error: check it before decoding a line.
func newLineScanner(r io.Reader) *bufio.Scanner {
	s := bufio.NewScanner(r)
	// The buffer holds a line and its newline: the scanner refuses a line
	// that fills it without one.
	s.Buffer(make([]byte, 0, 64<<10), maxLine+1)
	return s
}

// decodeRow decodes a line of an answer of StateDB's handler from where.
func decodeRow(line []byte, where, table string) (row, error) {
	var r row
	if err := json.Unmarshal(line, &r); err != nil {
		return row{}, fmt.Errorf("%w: the answer of %s for table %s is not StateDB's: %v", errVersion, where, table, err)
	}
	return r, nil
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// source is where the command reads the tables from: an agent's StateDB
// HTTP handler (client) or its hive shell (shellClient).
type source interface {
	// query returns every row of table, in the order of its primary
	// index, whose name is index.
	query(ctx context.Context, table, index string) ([]row, error)
	close()
}

// shellClient reads tables through an agent's hive shell
// (github.com/cilium/hive/shell's protocol) on a Unix socket, as the
// example serves it at DIR/.converge-example/shell.sock: each query is a
// connection that sends "db/show --format=json TABLE" and reads the rows
// until the protocol's end marker. It sends no token: the socket is
// reached only by the users its permissions let in, and the agent checks
// who connects. Where the system tells (Linux), it refuses an agent run
// by a user other than the one running the command or root.
type shellClient struct {
	path    string
	timeout time.Duration
}

// Markers of the shell's protocol.
const (
	shellEnd    = "<<end>>"
	shellError  = "<<error>>"
	shellStdout = "[stdout]"
	shellStderr = "[stderr]"
)

func newShellClient(path string, timeout time.Duration) (*shellClient, error) {
	if path == "" {
		return nil, errors.New("--socket: give the path of the agent's shell socket, such as DIR/.converge-example/shell.sock")
	}
	return &shellClient{path: path, timeout: timeout}, nil
}

func (s *shellClient) close() {}

func (s *shellClient) query(ctx context.Context, table, _ string) ([]row, error) {
	d := net.Dialer{Timeout: s.timeout}
	conn, err := d.DialContext(ctx, "unix", s.path)
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %v (is it running, and is --socket its shell's socket?)", errUnreachable, s.path, cleanText(err.Error()))
	}
	defer conn.Close()
	if err := checkAgentPeer(conn); err != nil {
		return nil, fmt.Errorf("--socket %s: %w", s.path, err)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	conn.SetDeadline(time.Now().Add(s.timeout))
	// A shell that refuses the connection says why, and closes it: the
	// write may fail, and the answer still tell.
	_, werr := fmt.Fprintf(conn, "db/show --format=json %s\nexit\n", table)
	out, err := s.readOutput(ctx, conn)
	if err != nil && werr != nil && errors.Is(err, errUnreachable) {
		return nil, s.readError(ctx, werr)
	}
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	var rows []row
	for {
		var obj json.RawMessage
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: the shell at %s answered db/show %s with what is not JSON rows: %v", errVersion, s.path, table, cleanText(err.Error()))
		}
		if len(obj) > maxLine {
			return nil, fmt.Errorf("%w: the shell at %s sent a row of table %s longer than %d bytes", errTooLarge, s.path, table, maxLine)
		}
		if len(rows) == maxRows {
			return nil, fmt.Errorf("%w: table %s has more than %d rows", errTooLarge, table, maxRows)
		}
		rows = append(rows, row{Obj: obj})
	}
}

// readOutput reads a command's output, at most maxResponse bytes, up to
// the end marker; an error marker ends it with the command's error.
func (s *shellClient) readOutput(ctx context.Context, conn net.Conn) ([]byte, error) {
	lines := newLineScanner(io.LimitReader(conn, maxResponse+1))
	var out bytes.Buffer
	for lines.Scan() {
		line := lines.Text()
		if out.Len() == 0 && (line == shellStdout || line == shellStderr) {
			continue
		}
		if before, ok := strings.CutSuffix(line, shellEnd); ok {
			out.WriteString(before)
			return out.Bytes(), nil
		}
		if before, ok := strings.CutSuffix(line, shellError); ok {
			said := cleanText(strings.TrimSpace(out.String() + before))
			if strings.Contains(said, "not found") {
				return nil, fmt.Errorf("%w: the shell at %s said %q: is tables.Cell in the agent's hive?", errNoTable, s.path, clip(said))
			}
			return nil, fmt.Errorf("the shell at %s said: %s", s.path, clip(said))
		}
		out.WriteString(line)
		out.WriteByte('\n')
		if out.Len() > maxResponse {
			break
		}
	}
	if err := lines.Err(); err != nil {
		return nil, s.readError(ctx, err)
	}
	if out.Len() > maxResponse {
		return nil, fmt.Errorf("%w: the answer of the shell at %s is larger than %d bytes", errTooLarge, s.path, maxResponse)
	}
	return nil, fmt.Errorf("%w at %s: the shell ended its answer without its end marker (is --socket a hive shell's socket?)", errUnreachable, s.path)
}

func (s *shellClient) readError(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, bufio.ErrTooLong):
		return fmt.Errorf("%w: the answer of the shell at %s has a line longer than %d bytes", errTooLarge, s.path, maxLine)
	case errors.Is(ctx.Err(), context.Canceled):
		return ctx.Err()
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%w at %s: no complete answer in time (--timeout)", errUnreachable, s.path)
	}
	return fmt.Errorf("%w at %s: %s", errUnreachable, s.path, cleanText(err.Error()))
}

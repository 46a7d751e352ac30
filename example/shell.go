package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/script"
)

// The example serves hive's shell (the protocol of
// github.com/cilium/hive/shell, which `example shell` and Cilium's
// cilium-dbg shell speak) on a Unix socket in its state directory: the
// user running the example reads its tables with `db/show reconcilers`,
// `db/show reconciler-retries` and the like, with no token and nothing on
// a TCP port. The socket is reached through the state directory (mode
// 0700), has mode 0600 itself, and every connection's peer credentials
// are checked: one from another user is refused.
//
// It is the example's own server of the protocol, not hive's
// shell.ServerCell, which removes whatever is at its socket's path at
// start, checks no peer, serves every script command of the hive (exec,
// hive/stop, db/insert and db/delete among them) and any path given to
// --shell-sock-path. This one serves the commands that read the tables,
// and refuses their flags that write: -o (to a file) and --delete.

// shellSocket is the shell's socket, inside the target directory.
const shellSocket = stateDir + "/shell.sock"

// shellCommands are the script commands the shell serves: those that
// read StateDB's tables, and help.
var shellCommands = []string{"db", "db/show", "db/get", "db/prefix", "db/list", "db/lowerbound", "db/watch", "db/initialized", "db/dump", "help"}

// Bounds of the shell.
const (
	maxShellConns = 16       // connections served at once; others wait in the kernel's queue
	maxShellLine  = 64 << 10 // bytes of a command line
)

// Markers of hive's shell protocol: a command's output ends with a line
// ending in endMarker, or, if the command failed, with its error and
// errorMarker.
const (
	shellEndMarker   = "<<end>>"
	shellErrorMarker = "<<error>>"
)

// errNoShell: the shell needs Linux, where the socket is bound through
// the state directory's descriptor and its peers' credentials are known.
var errNoShell = errors.New("the shell is served on Linux only")

// shellServer serves the shell. Its methods are safe for concurrent use.
type shellServer struct {
	log      *slog.Logger
	dir      *ownedDir
	engine   *script.Engine
	refusals *refusalLog

	mu      sync.Mutex
	ln      net.Listener // nil until started, and once stopped
	socket  fs.FileInfo  // the socket made, to remove only that one
	closeLn func()       // closes ln and removes the socket
	conns   map[net.Conn]struct{}
	stopped bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type shellParams struct {
	cell.In

	Log  *slog.Logger
	Dir  *ownedDir
	Cmds hive.ScriptCmds
}

func newShellServer(p shellParams) *shellServer {
	all := p.Cmds.Map()
	for name, cmd := range script.DefaultCmds() {
		if _, ok := all[name]; !ok {
			all[name] = cmd
		}
	}
	cmds := map[string]script.Cmd{}
	for _, name := range shellCommands {
		if cmd, ok := all[name]; ok {
			cmds[name] = noOutFile{cmd}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	refusals := newRefusalLog(p.Log)
	refusals.msg = "Refused a shell connection from another user"
	sh := &shellServer{log: p.Log, dir: p.Dir, engine: &script.Engine{Cmds: cmds}, refusals: refusals,
		conns: map[net.Conn]struct{}{}, ctx: ctx, cancel: cancel}
	p.Dir.onNewClaim = sh.rebind
	return sh
}

// noOutFile is a script command whose flags that write are refused:
// -o/--out (write the output to a file) and --delete (of db/get, db/list,
// db/prefix and db/lowerbound: delete the objects found). The shell
// reads, and changes nothing.
type noOutFile struct{ script.Cmd }

func (c noOutFile) Run(s *script.State, args ...string) (script.WaitFunc, error) {
	if s.Flags != nil {
		if f := s.Flags.Lookup("out"); f != nil && f.Changed {
			return nil, errors.New("-o/--out is refused: this shell writes no files; redirect its output instead")
		}
		if f := s.Flags.Lookup("delete"); f != nil && f.Changed {
			return nil, errors.New("--delete is refused: this shell changes no table; DELETE /files/{name} over HTTP removes a file")
		}
	}
	return c.Cmd.Run(s, args...)
}

// start listens on the socket in the state directory of the directory
// claimed.
func (sh *shellServer) start(cell.HookContext) error {
	c, err := sh.dir.acquire()
	if err != nil {
		return err
	}
	defer sh.dir.release(c)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	err = sh.listen(c)
	if errors.Is(err, errNoShell) {
		sh.log.Info("Not serving the shell", "reason", err)
		return nil
	}
	if err != nil {
		return refuse("dir", fmt.Errorf("%s: %w", sh.dir.label(), err))
	}
	return nil
}

// rebind moves the shell to c, a directory claimed anew (the one before
// was moved away or removed): its socket is where the user looks for
// it. Called with the directory's lock held.
func (sh *shellServer) rebind(c *claimed) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.ln == nil || sh.stopped {
		return
	}
	sh.closeLn()
	if err := sh.listen(c); err != nil {
		sh.log.Warn("Could not serve the shell in the directory claimed anew", "socket", shellPath(sh.dir), "error", err)
	}
}

// listen makes the socket in c's state directory, mode 0600, and serves
// it. sh.mu is held.
func (sh *shellServer) listen(c *claimed) error {
	ln, err := listenUnixIn(c, shellSocket)
	if err != nil {
		return err
	}
	info, err := c.root.Lstat(shellSocket)
	if err != nil {
		ln.Close()
		return err
	}
	root := c.root
	var once sync.Once
	sh.ln, sh.socket = ln, info
	sh.closeLn = func() {
		once.Do(func() {
			ln.Close()
			// The socket made, not one put at its name since.
			if now, err := root.Lstat(shellSocket); err == nil && os.SameFile(now, info) {
				root.Remove(shellSocket)
			}
		})
	}
	sh.wg.Add(1)
	go sh.accept(newLimitListener(ln, maxShellConns))
	sh.log.Info("Serving the shell", "socket", shellPath(sh.dir))
	return nil
}

// serving reports whether the shell serves its socket.
func (sh *shellServer) serving() bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.ln != nil
}

// shellPath is the socket's path, for messages.
func shellPath(d *ownedDir) string { return d.path + "/" + shellSocket }

func (sh *shellServer) accept(ln net.Listener) {
	defer sh.wg.Done()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				sh.log.Warn("The shell stopped accepting connections", "error", err)
			}
			return
		}
		if err := checkPeer(conn); err != nil {
			sh.refusals.refused("shell", shellSocket, err)
			fmt.Fprintf(conn, "refused: %v%s\n", err, shellErrorMarker)
			conn.Close()
			continue
		}
		sh.mu.Lock()
		if sh.stopped {
			sh.mu.Unlock()
			conn.Close()
			return
		}
		sh.conns[conn] = struct{}{}
		sh.wg.Add(1)
		sh.mu.Unlock()
		go sh.serve(conn)
	}
}

// serve runs the commands a client sends, one a line, until it closes
// the connection or sends exit, quit or stop.
func (sh *shellServer) serve(conn net.Conn) {
	defer sh.wg.Done()
	defer func() {
		sh.mu.Lock()
		delete(sh.conns, conn)
		sh.mu.Unlock()
		conn.Close()
	}()
	ctx, cancel := context.WithCancel(sh.ctx)
	defer cancel()
	// A write that fails (the client went away) ends a command that
	// streams, such as db/watch.
	out := &cancelOnError{w: conn, cancel: cancel}
	s, err := script.NewState(ctx, "/", nil)
	if err != nil {
		fmt.Fprintf(out, "%v%s\n", err, shellErrorMarker)
		return
	}
	lines := bufio.NewScanner(conn)
	lines.Buffer(make([]byte, 0, 4096), maxShellLine)
	for lines.Scan() {
		line := strings.TrimSpace(lines.Text())
		if slices.Contains([]string{"exit", "quit", "stop"}, line) {
			return
		}
		if err := sh.run(s, line, out); err != nil {
			fmt.Fprintf(out, "%v%s\n", oneLine(err.Error()), shellErrorMarker)
		} else {
			fmt.Fprintln(out, shellEndMarker)
		}
		if ctx.Err() != nil {
			return
		}
	}
	if errors.Is(lines.Err(), bufio.ErrTooLong) {
		fmt.Fprintf(out, "a command line is limited to %d bytes%s\n", maxShellLine, shellErrorMarker)
	}
}

// run runs one command line, and turns a panic of a command into its
// error.
func (sh *shellServer) run(s *script.State, line string, out io.Writer) (err error) {
	defer func() {
		if r := recover(); r != nil {
			sh.log.Error("A shell command panicked", "command", clipValue(line), "panic", r)
			err = fmt.Errorf("the command failed: %v", r)
		}
	}()
	return sh.engine.ExecuteLine(s, line, out)
}

// oneLine keeps an error on the line its marker ends.
func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

// cancelOnError is a writer that cancels a context when a write fails.
type cancelOnError struct {
	w      io.Writer
	cancel context.CancelFunc
}

func (c *cancelOnError) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if err != nil {
		c.cancel()
	}
	return n, err
}

// stop closes the socket, removes it, ends the commands running and
// closes every connection.
func (sh *shellServer) stop(cell.HookContext) error {
	sh.mu.Lock()
	sh.stopped = true
	if sh.closeLn != nil {
		sh.closeLn()
	}
	sh.ln = nil
	sh.cancel()
	for conn := range sh.conns {
		conn.Close()
	}
	sh.mu.Unlock()
	sh.wg.Wait()
	return nil
}

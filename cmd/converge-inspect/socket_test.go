//go:build linux

package main

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeShell serves answer(command) to every command line on a Unix
// socket, as hive's shell does, and returns its path.
func fakeShell(t *testing.T, answer func(conn net.Conn, command string)) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sh")
	require.NoError(t, err)
	path := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", path)
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		os.RemoveAll(dir)
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				lines := bufio.NewScanner(conn)
				for lines.Scan() && lines.Text() != "exit" {
					answer(conn, lines.Text())
				}
			}()
		}
	}()
	return path
}

// --socket reads the tables through a hive shell: the rows db/show
// --format=json writes, an agent without the tables, and bounds on what
// the shell sends.
func TestSocket(t *testing.T) {
	t.Run("rows", func(t *testing.T) {
		path := fakeShell(t, func(conn net.Conn, command string) {
			if strings.HasSuffix(command, " reconcilers") {
				conn.Write([]byte("[stdout]\n{\n  \"id\": \"files\",\n  \"module\": \"files\",\n  \"state\": \"degraded\",\n  \"retrying\": 1\n}\n"))
			} else {
				conn.Write([]byte("[stdout]\n{\"reconciler\": \"files\", \"key\": \"motd\", \"attempts\": 2, \"last-error\": \"in the way\"}\n"))
			}
			conn.Write([]byte(shellEnd + "\n"))
		})
		code, stdout, stderr := runBounded(t, nil, "--socket", path)
		require.Equal(t, exitDegraded, code, stderr)
		require.Regexp(t, `(?m)^files +degraded +0 +1 `, stdout)
		require.Regexp(t, `(?m)^files +motd +2 +.* +in the way$`, stdout)
	})
	t.Run("no tables", func(t *testing.T) {
		path := fakeShell(t, func(conn net.Conn, command string) {
			conn.Write([]byte("<stdin>:0: " + command + ": table \"reconcilers\" not found" + shellError + "\n"))
		})
		code, stdout, stderr := runBounded(t, nil, "--socket", path)
		requireFails(t, `no table: the shell at .* said ".*not found": is tables.Cell in the agent's hive\?`, code, stdout, stderr)
	})
	t.Run("an endless answer", func(t *testing.T) {
		line := []byte(strings.Repeat("x", 64<<10) + "\n")
		path := fakeShell(t, func(conn net.Conn, _ string) {
			for {
				if _, err := conn.Write(line); err != nil {
					return
				}
			}
		})
		code, stdout, stderr := runBounded(t, nil, "--socket", path)
		requireFails(t, `answer too large: the answer of the shell at .* is larger than 67108864 bytes`, code, stdout, stderr)
	})
	t.Run("no shell there", func(t *testing.T) {
		code, stdout, stderr := runBounded(t, nil, "--socket", filepath.Join(t.TempDir(), "none"))
		requireFails(t, `cannot reach the agent at .*none: dial unix .*: connect: no such file or directory \(is it running, and is --socket its shell.s socket\?\)`, code, stdout, stderr)
	})
	t.Run("flags", func(t *testing.T) {
		for args, msg := range map[string]string{
			"--socket s --url http://127.0.0.1:1/statedb": "give --socket or --url, not both",
			"--socket s --token-file t":                   "--socket sends no token: leave out --token-file",
		} {
			code, stdout, stderr := runBounded(t, nil, strings.Fields(args)...)
			requireFails(t, regexp.QuoteMeta(msg)+` \(see --help\)`, code, stdout, stderr)
		}
	})
}

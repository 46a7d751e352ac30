package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path"
	"syscall"

	"golang.org/x/sys/unix"
)

// listenUnixIn listens on a Unix socket at name (in the state directory)
// in the directory c, mode 0600. It binds through the state directory's
// descriptor (/proc/self/fd/N/BASE), so a directory renamed or replaced
// since it was claimed, or a path longer than a socket's address may
// be, changes nothing. A socket of the user's already there that nothing
// accepts on, left by an example that was killed, is removed first;
// anything else there fails the listen.
func listenUnixIn(c *claimed, name string) (net.Listener, error) {
	fd := int(c.stateFile.Fd())
	base := path.Base(name)
	addr := fmt.Sprintf("/proc/self/fd/%d/%s", fd, base)
	info, err := c.root.Lstat(name)
	switch {
	case err == nil && info.Mode()&fs.ModeSocket != 0 && ownedByUser(info):
		conn, err := net.Dial("unix", addr)
		if err == nil {
			conn.Close()
			return nil, fmt.Errorf("%s is served by another program: stop it", name)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if err := c.root.Remove(name); err != nil {
			return nil, err
		}
	case err == nil:
		return nil, fmt.Errorf("%s exists and is not a socket the example left there: move it away", name)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", name, err)
	}
	// Closing it must not remove what its address names by then: the
	// descriptor's number may be another's. The caller removes it.
	ln.SetUnlinkOnClose(false)
	if err := unix.Fchmodat(fd, base, 0o600, 0); err != nil {
		ln.Close()
		c.root.Remove(name)
		return nil, fmt.Errorf("making %s private: %w", name, err)
	}
	return ln, nil
}

// checkPeer refuses a connection to the shell from a user other than the
// one running the example, by the peer credentials the kernel gives.
func checkPeer(conn net.Conn) error {
	if lc, ok := conn.(*limitConn); ok {
		conn = lc.Conn
	}
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return errors.New("not a Unix socket's connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	cerr := raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err = errors.Join(cerr, err); err != nil {
		return fmt.Errorf("the peer's credentials: %w", err)
	}
	if uid := os.Geteuid(); int(cred.Uid) != uid {
		return fmt.Errorf("the shell serves only the user running the example (uid %d), not uid %d", uid, cred.Uid)
	}
	return nil
}

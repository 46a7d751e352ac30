package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
)

// checkAgentPeer refuses a shell socket served by a user other than the
// one running the command or root, by the credentials the kernel gives:
// another user could serve one to show made-up tables.
func checkAgentPeer(conn net.Conn) error {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return errors.New("not a Unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	cerr := raw.Control(func(fd uintptr) {
		cred, err = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	})
	if err = errors.Join(cerr, err); err != nil {
		return fmt.Errorf("the agent's credentials: %w", err)
	}
	if uid := os.Geteuid(); int(cred.Uid) != uid && cred.Uid != 0 {
		return fmt.Errorf("the socket is served by uid %d, neither you (uid %d) nor root: refusing to show what another user's program says", cred.Uid, uid)
	}
	return nil
}

//go:build linux

package listeners

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// Detach takes the socket out of nc, a plain TCP or unix connection from
// a Listener (or a *net.TCPConn or *net.UnixConn from elsewhere), so that
// the caller can serve it from an epoll poller of its own: it returns a
// descriptor of the caller's for the same socket and closes nc's. The
// per-connection state Go's network poller keeps (the netFD, its
// addresses and a runtime pollDesc with two deadline timers, about 900
// bytes) goes with it. The caller closes fd, and then calls release when
// it is not nil: it uncounts the connection from the listener's
// max_connections. For any other connection (TLS, WebSocket) Detach
// returns errors.ErrUnsupported and leaves nc as it was.
func Detach(nc net.Conn) (fd int, release func(), err error) {
	sock := nc
	if sc, ok := nc.(*sockConn); ok {
		sock, release = sc.Conn, sc.release
	}
	if s, ok := sock.(*socket); ok {
		fd, made := s.detach()
		switch {
		case fd >= 0:
			return fd, release, nil
		case made == nil:
			return -1, nil, net.ErrClosed
		}
		sock = made
	}
	var sc syscall.Conn
	switch c := sock.(type) {
	case *net.TCPConn:
		sc = c
	case *net.UnixConn:
		sc = c
	default:
		return -1, nil, errors.ErrUnsupported
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1, nil, err
	}
	fd = -1
	var dupErr error
	if err := raw.Control(func(s uintptr) {
		// The duplicate shares the open file and so its O_NONBLOCK.
		fd, dupErr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return -1, nil, err
	}
	if dupErr != nil {
		return -1, nil, dupErr
	}
	// The socket stays open through fd: closing nc's descriptor sends
	// nothing to the peer.
	sock.Close()
	return fd, release, nil
}

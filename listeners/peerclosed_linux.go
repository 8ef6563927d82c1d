package listeners

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// PeerClosed reports whether the peer has closed its end of the socket
// under nc (a TLS or WebSocket connection of a Listener, or a socket),
// whatever it sent before is still unread; false when nc has no socket
// under it or it cannot tell. It does not block.
func PeerClosed(nc net.Conn) bool {
	for under := nc; ; {
		var rc syscall.RawConn
		switch c := under.(type) {
		case *waitConn:
			rc = c.rc
		case *wsConn:
			under = c.ws.NetConn()
			continue
		case syscall.Conn: // *net.TCPConn, *net.UnixConn, *socket, *sockConn
			var err error
			if rc, err = c.SyscallConn(); err != nil {
				return false
			}
		case interface{ NetConn() net.Conn }: // *tls.Conn, *pendingConn
			under = c.NetConn()
			continue
		default:
			return false
		}
		closed := false
		rc.Control(func(fd uintptr) {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
			n, err := unix.Poll(fds, 0)
			closed = err == nil && n > 0 && fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
		})
		return closed
	}
}

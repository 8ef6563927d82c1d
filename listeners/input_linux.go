//go:build linux

package listeners

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// inputProbe asks the kernel how many bytes wait unread in the receive
// queue of the socket under a TLS or WebSocket connection (SIOCINQ).
type inputProbe struct {
	rc syscall.RawConn
	// ask is made once: a closure made at every call would allocate.
	ask func(fd uintptr)
	n   int
}

// newInputProbe returns the probe of the socket under nc, unwrapping TLS
// and the listener's wrappers, or nil when there is no socket to ask.
func newInputProbe(nc net.Conn) *inputProbe {
	for {
		switch c := nc.(type) {
		case syscall.Conn: // *net.TCPConn, *net.UnixConn, *socket, *sockConn
			rc, err := c.SyscallConn()
			if err != nil {
				return nil
			}
			p := &inputProbe{rc: rc}
			p.ask = func(fd uintptr) { p.n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }
			return p
		case interface{ NetConn() net.Conn }: // *tls.Conn, *pendingConn
			nc = c.NetConn()
		default:
			return nil
		}
	}
}

// waiting reports whether bytes wait in the socket's receive queue; false
// when it cannot tell.
func (p *inputProbe) waiting() bool {
	if p == nil {
		return false
	}
	p.n = 0
	if p.rc.Control(p.ask) != nil {
		return false
	}
	return p.n > 0
}

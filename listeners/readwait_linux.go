//go:build linux

package listeners

import (
	"io"
	"net"
	"os"
	"syscall"
)

// waitConn is the socket under a TLS or WebSocket connection. Once the
// engine has set a hook (onReadWait), a read that finds the socket empty
// calls it before waiting for the client: the engine writes its answers
// then, once for everything read before, however much crypto/tls or
// gorilla had buffered on top of the socket. Without a hook it reads as
// the connection it wraps.
type waitConn struct {
	net.Conn
	rc   syscall.RawConn
	hook func()
	// The read under way, for try, which is made once: a closure made
	// at every read would allocate.
	p      []byte
	n      int
	err    error
	called bool
	try    func(fd uintptr) bool
}

// newWaitConn wraps nc when a socket with a descriptor is under it, and
// otherwise returns nc as it is.
func newWaitConn(nc net.Conn) net.Conn {
	for under := nc; ; {
		switch c := under.(type) {
		case syscall.Conn: // *net.TCPConn, *net.UnixConn, *socket, *sockConn
			rc, err := c.SyscallConn()
			if err != nil {
				return nc
			}
			w := &waitConn{Conn: nc, rc: rc}
			w.try = w.tryRead
			return w
		case interface{ NetConn() net.Conn }: // *pendingConn
			under = c.NetConn()
		default:
			return nc
		}
	}
}

// NetConn returns the connection it wraps.
func (c *waitConn) NetConn() net.Conn { return c.Conn }

func (c *waitConn) Read(p []byte) (int, error) {
	if c.hook == nil || len(p) == 0 {
		return c.Conn.Read(p)
	}
	c.p, c.n, c.err, c.called = p, 0, nil, false
	err := c.rc.Read(c.try)
	c.p = nil
	switch {
	case err != nil: // deadline passed, or closed
		return 0, c.opError(err)
	case c.err != nil:
		return 0, c.opError(os.NewSyscallError("read", c.err))
	case c.n == 0:
		return 0, io.EOF
	}
	return c.n, nil
}

// tryRead reads once; when nothing waits it calls the hook, the first
// time, and has the RawConn wait for input.
func (c *waitConn) tryRead(fd uintptr) bool {
	for {
		n, err := syscall.Read(int(fd), c.p)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			if !c.called {
				c.called = true
				c.hook()
			}
			return false
		}
		c.n, c.err = max(n, 0), err
		return true
	}
}

// opError makes err what a read of a net.Conn returns.
func (c *waitConn) opError(err error) error {
	return &net.OpError{Op: "read", Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// onReadWait sets the hook of the waitConn under nc, if there is one,
// and reports whether there was. It is set by the goroutine that reads.
func onReadWait(nc net.Conn, hook func()) bool {
	for {
		switch c := nc.(type) {
		case *waitConn:
			c.hook = hook
			return true
		case interface{ NetConn() net.Conn }: // *tls.Conn, *pendingConn
			nc = c.NetConn()
		default:
			return false
		}
	}
}

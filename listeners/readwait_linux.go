//go:build linux

package listeners

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// waitConn is the socket under a TLS or WebSocket connection. Once the
// engine has set a hook (onReadWait), a read that finds the socket empty
// calls it before waiting for the client: the engine writes its answers
// then, once for everything read before, however much crypto/tls or
// gorilla had buffered on top of the socket. While input keeps coming it
// reads the socket ahead into a pooled buffer: gorilla reads through the
// engine's 512-byte buffer, and each of its reads was a system call (16
// per window of 100 QoS 1 messages, where plain TCP makes one). Without a
// hook it reads as the connection it wraps.
type waitConn struct {
	net.Conn
	rc   syscall.RawConn
	hook func()

	// mu guards ahead against Close, which returns the buffer from
	// another goroutine. Reads are the reading goroutine's alone.
	mu     sync.Mutex
	ahead  *[]byte // what was read ahead is ahead[ar:aw]; nil when none
	ar, aw int
	closed bool

	// The read under way, for try, which is made once: a closure made
	// at every read would allocate.
	p      []byte
	n      int
	err    error
	called bool
	try    func(fd uintptr) bool
}

// readAheadSize is the size of the buffers waitConns read ahead into; at
// most maxReadAheads (4 MiB) are held at once, past which reads go
// straight into the caller's buffer. One is held only while what it holds
// is being read: never while waiting for the client.
const (
	readAheadSize = 16 << 10
	maxReadAheads = 256
)

var (
	readAheads     = sync.Pool{New: func() any { b := make([]byte, readAheadSize); return &b }}
	readAheadsHeld atomic.Int64
)

// ReadAheadBytes returns the bytes of the buffers TLS and WebSocket
// connections hold while they read ahead (at most 4 MiB).
func ReadAheadBytes() int64 { return readAheadsHeld.Load() * readAheadSize }

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
	if n := c.takeAhead(p); n > 0 {
		return n, nil
	}
	c.p, c.n, c.err, c.called = p, 0, nil, false
	err := c.rc.Read(c.try)
	c.p = nil
	switch {
	case err != nil: // deadline passed, or closed
		return 0, c.opError(err)
	case c.err != nil:
		return 0, c.opError(os.NewSyscallError("read", c.err))
	case c.n > 0:
		return c.n, nil
	}
	if n := c.takeAhead(p); n > 0 {
		return n, nil
	}
	return 0, io.EOF
}

// tryRead reads once, ahead into a pooled buffer when one is free and
// the caller's is smaller; when nothing waits it calls the hook, the
// first time, and has the RawConn wait for input.
func (c *waitConn) tryRead(fd uintptr) bool {
	for {
		c.mu.Lock()
		dst, ahead := c.p, len(c.p) < readAheadSize && !c.closed && c.takeBuffer()
		if ahead {
			dst = *c.ahead
		}
		n, err := syscall.Read(int(fd), dst)
		if ahead && (n <= 0 || err != nil) {
			c.dropLocked()
		} else if ahead {
			c.ar, c.aw = 0, n
		}
		c.mu.Unlock()
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
		if !ahead {
			c.n = max(n, 0)
		}
		c.err = err
		return true
	}
}

// takeAhead copies into p what was read ahead, giving the buffer back
// once it is empty.
func (c *waitConn) takeAhead(p []byte) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ahead == nil {
		return 0
	}
	n := copy(p, (*c.ahead)[c.ar:c.aw])
	if c.ar += n; c.ar == c.aw {
		c.dropLocked()
	}
	return n
}

// takeBuffer takes a read-ahead buffer from the pool, if fewer than
// maxReadAheads are held. The caller holds mu.
func (c *waitConn) takeBuffer() bool {
	if readAheadsHeld.Add(1) > maxReadAheads {
		readAheadsHeld.Add(-1)
		return false
	}
	c.ahead = readAheads.Get().(*[]byte)
	return true
}

// dropLocked gives the read-ahead buffer back. The caller holds mu.
func (c *waitConn) dropLocked() {
	readAheads.Put(c.ahead)
	readAheadsHeld.Add(-1)
	c.ahead, c.ar, c.aw = nil, 0, 0
}

// Close closes the connection and gives back what it read ahead.
func (c *waitConn) Close() error {
	err := c.Conn.Close()
	c.mu.Lock()
	c.closed = true
	if c.ahead != nil {
		c.dropLocked()
	}
	c.mu.Unlock()
	return err
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

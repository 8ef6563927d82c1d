//go:build linux

package main

import (
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
)

// pollTries bounds the reads a polling client makes that find nothing,
// yielding to the generator's other goroutines between them, before it
// makes one that sleeps: about a millisecond here.
const pollTries = 1000

// pollConn reads its socket by polling (-poll). A client that sleeps in
// its reads is woken by the kernel and the scheduler each time the broker
// answers, and in the flows that take turns with the broker (a window of
// QoS 1 or 2 messages, then its acknowledgements) those wake-ups, not the
// broker, came to set the pace: qos1 against mqttd left the broker idle
// 7-13% of the run with the generator's core 35% idle too.
type pollConn struct {
	net.Conn
	rc syscall.RawConn
}

// canPoll says whether -poll is available.
const canPoll = true

// polling wraps a dialled TCP connection in a pollConn; any other
// connection is returned as it is.
func polling(c net.Conn) (net.Conn, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &pollConn{Conn: c, rc: rc}, nil
}

// Read polls; the read that sleeps after pollTries empty ones, or after
// a deadline or a close stops the polls, is the connection's own, which
// reports them as net.Conn does.
func (c *pollConn) Read(b []byte) (int, error) {
	for range pollTries {
		n, err := 0, error(nil)
		if rerr := c.rc.Read(func(fd uintptr) bool {
			n, err = syscall.Read(int(fd), b)
			return true
		}); rerr != nil {
			break
		}
		switch {
		case n > 0:
			return n, nil
		case err == nil:
			return 0, io.EOF
		case err != syscall.EAGAIN && err != syscall.EINTR:
			// The read took the socket's error: another would not see it.
			return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", err)}
		}
		runtime.Gosched()
	}
	return c.Conn.Read(b)
}

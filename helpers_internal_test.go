package mqttd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"mqttd/internal/testutil"
	"mqttd/packets"
)

// newTestServer returns a Server from New that is not serving, shut down
// when the test ends: what an internal test gives a conn as its srv. New
// starts no goroutine, so a test may create it inside a synctest bubble,
// and must when the bubble's goroutines use its WaitGroups.
func newTestServer(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return s
}

// startTestServer runs a Server on 127.0.0.1:0 until the test ends and
// returns it, serving (its poller open), with its address; before, if not
// nil, is called between New and Serve; wrap, if given, wraps the
// listener.
func startTestServer(t *testing.T, opts Options, before func(*Server), wrap ...func(net.Listener) net.Listener) (*Server, string) {
	t.Helper()
	s, addr, served := launchTestServer(t, opts, before, wrap...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	})
	return s, addr
}

// launchTestServer is startTestServer for a test that shuts the server
// down itself: served gets what Serve returns.
func launchTestServer(t *testing.T, opts Options, before func(*Server), wrap ...func(net.Listener) net.Listener) (s *Server, addr string, served <-chan error) {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if before != nil {
		before(s)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range wrap {
		l = w(l)
	}
	if err := s.AddListener("test", l); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	waitUntil(t, "Serve to start", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.serving
	})
	return s, l.Addr().String(), done
}

// startSys starts the $SYS goroutine of a Server that does not serve.
func startSys(t *testing.T, interval time.Duration) *Server {
	t.Helper()
	s := newTestServer(t, Options{SysInterval: interval, Version: "v0.0.0-test"})
	s.sys.start(s)
	return s
}

// waitUntil polls cond until it holds, failing the test after 10 s.
var waitUntil = testutil.WaitFor

// tcpPair returns the two ends of a loopback TCP connection, closed when
// the test ends.
var tcpPair = testutil.TCPPair

// onlyConn waits for s to hold exactly one connection and returns it.
func onlyConn(t *testing.T, s *Server) *conn {
	t.Helper()
	var c *conn
	waitUntil(t, "the server to accept the connection", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, k := range s.conns {
			c = k
		}
		return len(s.conns) == 1
	})
	return c
}

// writePacket writes p to nc in version v.
func writePacket(t *testing.T, nc net.Conn, p packets.Packet, v packets.Version) {
	t.Helper()
	b, err := p.Append(nil, v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
}

// readPacket reads the next packet from br, nc's reader, failing the test
// if none comes within 10 s.
func readPacket(t *testing.T, nc net.Conn, br *bufio.Reader, v packets.Version) packets.Packet {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	p, err := packets.ReadPacket(br, v, 0)
	if err != nil {
		t.Fatalf("read packet: %v", err)
	}
	return p
}

// readFull reads exactly n bytes from nc, failing the test if they do not
// all come within 10 s.
func readFull(t *testing.T, nc net.Conn, n int) []byte {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, n)
	if got, err := io.ReadFull(nc, b); err != nil {
		t.Fatalf("read %d of %d bytes: %v", got, n, err)
	}
	return b
}

// readToEOF reads nc until the other end is closed and returns the bytes,
// failing the test if that takes more than 10 s.
func readToEOF(t *testing.T, nc net.Conn) []byte {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(nc)
	if err != nil {
		t.Fatalf("read to EOF: %v", err)
	}
	return b
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// pipePair returns the two ends of a net.Pipe, closed when the test ends.
func pipePair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	server, client = net.Pipe()
	t.Cleanup(func() {
		server.Close()
		client.Close()
	})
	return server, client
}

// fill returns n bytes of c.
func fill(c byte, n int) []byte { return bytes.Repeat([]byte{c}, n) }

// appendBytes is an enqueue callback adding p.
func appendBytes(p []byte) func([]byte) []byte {
	return func(b []byte) []byte { return append(b, p...) }
}

// outboxSnapshot is an outbox's state, read under its lock.
type outboxSnapshot struct {
	buf, spare                *frameBuf
	buffered, inWrite         int
	writing, deferred, closed bool
	stuck                     bool
}

func snapshot(c *conn) outboxSnapshot {
	o := &c.out
	o.mu.Lock()
	defer o.mu.Unlock()
	st := outboxSnapshot{buf: o.buf, spare: o.spare, inWrite: int(o.inWrite),
		writing: o.writing, deferred: o.deferred, closed: o.closed, stuck: o.stuck}
	if o.buf != nil {
		st.buffered = len(o.buf.b)
	}
	return st
}

// hasRoom reports whether the outbox takes a delivery of any size now.
func hasRoom(c *conn) bool {
	fit, _ := c.fit()
	return fit >= 0
}

// waitTaken waits until c's writer has taken n bytes out of the outbox and
// is writing them: on a net.Pipe nobody reads, it blocks there.
func waitTaken(t *testing.T, c *conn, n int) {
	t.Helper()
	waitUntil(t, "the writer to take the frames", func() bool {
		st := snapshot(c)
		return st.writing && st.inWrite == n
	})
}

// waitClosed waits for ch to be closed, failing the test after 10 s.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

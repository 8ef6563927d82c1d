//go:build linux

package mqttd

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Tests of the event-served socket (reader_linux.go): the engine's own
// descriptor, its writes that wait for the poller's EPOLLOUT when the
// socket is full, and its close, which never lets a call use a number the
// kernel may have given to another connection.

// eventServed returns a connection served by s's poller, as startConn
// gives it, and the client's end.
func eventServed(t *testing.T, s *Server) (*conn, net.Conn) {
	t.Helper()
	srvEnd, cliEnd := tcpPair(t)
	c := newConn(s, srvEnd, "test")
	if !c.startEvent(s.poller) {
		t.Fatal("startEvent refused a TCP connection")
	}
	trackConn(t, s, c)
	return c, cliEnd
}

// bigWrite is more than the loopback socket's send and receive buffers
// hold together, so that writing it finds the socket full.
const bigWrite = 32 << 20

// writeAsync writes b to c's socket on a goroutine of its own and reports
// the outcome on the channel returned.
func writeAsync(c *conn, b []byte, timeout time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() {
		n, err := c.ev.write(b, timeout)
		if err == nil && n != len(b) {
			err = io.ErrShortWrite
		}
		done <- err
	}()
	return done
}

// waitWriteFull polls until c's writer has found the socket full.
func waitWriteFull(t *testing.T, c *conn) {
	t.Helper()
	waitUntil(t, "the write to find the socket full", func() bool { return c.ev.writable.Load() != nil })
}

// TestEventWriteWaitsForRoom: a write larger than the socket holds waits
// for the client to read and completes, every byte in order.
func TestEventWriteWaitsForRoom(t *testing.T) {
	s, _ := startTestServer(t, Options{}, nil)
	c, cli := eventServed(t, s)
	b := bytes.Repeat([]byte("0123456789abcdef"), bigWrite/16)
	done := writeAsync(c, b, time.Minute)
	waitWriteFull(t, c)
	got := readFull(t, cli, len(b))
	if err := <-done; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, b) {
		t.Error("the client read other bytes than were written")
	}
}

// TestEventWriteTimeout: a write the client does not read ends with a
// timeout, which the writer takes for a slow consumer.
func TestEventWriteTimeout(t *testing.T) {
	s, _ := startTestServer(t, Options{}, nil)
	c, _ := eventServed(t, s)
	err := <-writeAsync(c, make([]byte, bigWrite), 100*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) || !isTimeout(err) {
		t.Errorf("write nobody reads: %v, want a timeout", err)
	}
}

// TestEventCloseWakesWriter: closing the connection ends a write waiting
// for room at once, however long its timeout.
func TestEventCloseWakesWriter(t *testing.T) {
	s, _ := startTestServer(t, Options{}, nil)
	c, _ := eventServed(t, s)
	done := writeAsync(c, make([]byte, bigWrite), time.Hour)
	waitWriteFull(t, c)
	c.closeWith(errShutdown)
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("write after close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the write waiting for room did not end when the connection closed")
	}
}

// TestEventCloseWaitsForUsers: a close while a call uses the descriptor
// leaves it open until that call is done; then it is closed, and no call
// gets to use it again.
func TestEventCloseWaitsForUsers(t *testing.T) {
	srvEnd, cli := tcpPair(t)
	ev := eventConnFor(t, srvEnd)
	if !ev.acquire() {
		t.Fatal("acquire on an open connection failed")
	}
	if !ev.close() {
		t.Fatal("close of an open connection reported it closed already")
	}
	if _, err := unix.FcntlInt(uintptr(ev.fd), unix.F_GETFD, 0); err != nil {
		t.Fatalf("the descriptor in use was closed: %v", err)
	}
	if ev.acquire() {
		t.Error("acquire after close succeeded")
	}
	if ev.close() {
		t.Error("a second close reported closing")
	}
	ev.releaseFD() // the last user closes it: the client reads the end
	cli.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := cli.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("client read %d, %v after the close; want EOF", n, err)
	}
	if _, err := ev.read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("read after close: %v, want net.ErrClosed", err)
	}
}

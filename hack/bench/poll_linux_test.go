//go:build linux

package main

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// pollPair returns a polling client connection and its peer on loopback.
func pollPair(t *testing.T) (net.Conn, *net.TCPConn) {
	t.Helper()
	raw, peer := socketPair(t)
	c, err := polling(raw)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.(*pollConn); !ok {
		t.Fatalf("polling gave a %T", c)
	}
	return c, peer.(*net.TCPConn)
}

// TestPollConn: a polling connection returns what arrives whether it came
// before the read or while the read polled or slept, honours a deadline
// set from another goroutine (how a subscriber is stopped), and reports
// the end of the stream as EOF and a reset as the error it is.
func TestPollConn(t *testing.T) {
	c, peer := pollPair(t)
	buf := make([]byte, 16)
	read := func(want string) {
		t.Helper()
		n, err := c.Read(buf)
		if err != nil || string(buf[:n]) != want {
			t.Fatalf("Read = %q, %v; want %q", buf[:n], err, want)
		}
	}
	if _, err := peer.Write([]byte("before")); err != nil {
		t.Fatal(err)
	}
	read("before")
	// Written once the reader has run out of polls and sleeps.
	late := time.AfterFunc(50*time.Millisecond, func() { peer.Write([]byte("late")) })
	defer late.Stop()
	read("late")

	stopped := make(chan error, 1)
	go func() {
		_, err := c.Read(buf)
		stopped <- err
	}()
	if err := c.SetReadDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := <-stopped; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read stopped by a deadline: %v, want %v", err, os.ErrDeadlineExceeded)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	peer.Close()
	if _, err := c.Read(buf); err != io.EOF {
		t.Fatalf("Read after the peer closed: %v, want EOF", err)
	}

	c, peer = pollPair(t)
	if err := peer.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	peer.Close() // a reset
	if _, err := c.Read(buf); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Read after the peer reset: %v, want %v", err, syscall.ECONNRESET)
	}
}

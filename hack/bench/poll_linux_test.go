//go:build linux

package main

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// TestPollConn: a polling connection returns what arrives whether it came
// before the read or while the read polled or slept, honours a deadline
// (how a subscriber is stopped) and reports the end of the stream.
func TestPollConn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	c, err := polling(raw)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*pollConn); !ok {
		t.Fatalf("polling gave a %T", c)
	}
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

	if err := c.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past the deadline: %v, want %v", err, os.ErrDeadlineExceeded)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	peer.Close()
	if _, err := c.Read(buf); err != io.EOF {
		t.Fatalf("Read after the peer closed: %v, want EOF", err)
	}
}

//go:build linux

package listeners_test

import (
	"io"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"mqttd/listeners"
)

// TestDialDetach checks that the engine can take over a dialed TCP
// connection: Detach gives a descriptor for the socket, which carries
// bytes both ways, and TCP keepalive is off on it.
func TestDialDetach(t *testing.T) {
	l := listen(t, listeners.Config{Type: listeners.TCP})
	ch := acceptOne(l)
	nc := dial(t, listeners.TCP, l.Addr().String(), nil)
	sc := accepted(t, ch)
	fd, release, err := listeners.Detach(nc)
	if err != nil {
		t.Fatalf("Detach of a dialed TCP connection: %v", err)
	}
	defer unix.Close(fd)
	if release != nil {
		t.Error("Detach of a dialed connection gave a release: it is counted by no listener")
	}
	if on, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE); err != nil || on != 0 {
		t.Errorf("SO_KEEPALIVE %d, %v; want 0 (off)", on, err)
	}
	if err := unix.SetNonblock(fd, false); err != nil { // the test reads it blocking
		t.Fatal(err)
	}
	if _, err := unix.Write(fd, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	sc.SetDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 4)
	if _, err := io.ReadFull(sc, b); err != nil || string(b) != "ping" {
		t.Fatalf("listener read %q, %v; want ping", b, err)
	}
	if _, err := sc.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if n, err := unix.Read(fd, b); err != nil || string(b[:n]) != "pong" {
		t.Fatalf("read from the descriptor: %q, %v; want pong", b[:n], err)
	}
}

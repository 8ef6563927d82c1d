//go:build linux

package listeners_test

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"mqttd/listeners"
)

// TestDetach: the descriptor Detach returns is the socket (what the client
// sent is read from it, what is written to it reaches the client), the
// connection it came from is closed without the client noticing, and the
// listener counts the connection until release.
func TestDetach(t *testing.T) {
	l := listen(t, listeners.Config{Type: listeners.TCP, MaxConnections: 1})
	addr := l.Addr().String()
	ch := acceptOne(l)
	cli := dialSend(t, addr, []byte("ping"))
	nc := accepted(t, ch)
	fd, release, err := listeners.Detach(nc)
	if err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if release == nil {
		t.Fatal("Detach of a counted connection gave no release")
	}
	if _, err := nc.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write to the detached connection: %v, want net.ErrClosed", err)
	}
	if err := unix.SetNonblock(fd, false); err != nil { // the test reads it blocking
		t.Fatal(err)
	}
	b := make([]byte, 4)
	if n, err := unix.Read(fd, b); err != nil || string(b[:n]) != "ping" {
		t.Fatalf("read from the descriptor: %q, %v; want the client's ping", b[:n], err)
	}
	if _, err := unix.Write(fd, []byte("pong")); err != nil {
		t.Fatal(err)
	}
	cli.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(cli, b); err != nil || string(b) != "pong" {
		t.Fatalf("client read %q, %v; want pong", b, err)
	}
	// Still counted: a second client is refused until release.
	ch = acceptOne(l)
	closedByServer(t, dialSend(t, addr, []byte{0x10}))
	unix.Close(fd)
	release()
	dialSend(t, addr, []byte{0x10})
	accepted(t, ch)
}

func TestDetachUnsupported(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, _, err := listeners.Detach(a); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Detach of a pipe: %v, want errors.ErrUnsupported", err)
	}
}

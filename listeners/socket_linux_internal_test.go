//go:build linux

package listeners

import (
	"errors"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// acceptTest listens as cfg says and returns the listener, a dialed client
// and the connection the listener accepted for it.
func acceptTest(t *testing.T, cfg Config) (*Listener, net.Conn, net.Conn) {
	t.Helper()
	l, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	network, addr := "tcp", l.Addr().String()
	if cfg.Type == Unix {
		network = "unix"
	}
	cli, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	nc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return l, cli, nc
}

// TestAcceptBareSocket checks that a plain TCP listener hands over what
// accept4 gave: Detach returns that descriptor itself (nothing duplicated),
// the client's bytes are read from it, TCP_NODELAY is set as net sets it,
// and the peer's address is the client's.
func TestAcceptBareSocket(t *testing.T) {
	_, cli, nc := acceptTest(t, Config{Type: TCP, Address: "127.0.0.1:0"})
	s, ok := nc.(*socket)
	if !ok {
		t.Fatalf("a plain TCP listener accepted a %T, want a bare socket", nc)
	}
	want := s.fd
	if got := nc.RemoteAddr().String(); got != cli.LocalAddr().String() {
		t.Errorf("remote address %s, want the client's %s", got, cli.LocalAddr())
	}
	if ip := nc.RemoteAddr().(*net.TCPAddr).IP; len(ip) != net.IPv4len {
		t.Errorf("remote IPv4 address in %d bytes, want %d as net gives it", len(ip), net.IPv4len)
	}
	if got := nc.LocalAddr().String(); got != cli.RemoteAddr().String() {
		t.Errorf("local address %s, want the client's peer %s", got, cli.RemoteAddr())
	}
	if _, ok := nc.(*socket); !ok || s.conn != nil {
		t.Error("LocalAddr made the socket a net.Conn")
	}
	fd, release, err := Detach(nc)
	if err != nil || fd != want || release != nil {
		t.Fatalf("Detach = %d, %v, %v; want the accepted descriptor %d, no release", fd, release != nil, err, want)
	}
	defer unix.Close(fd)
	if v, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY); err != nil || v == 0 {
		t.Errorf("TCP_NODELAY = %d, %v; want it set", v, err)
	}
	if _, err := cli.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	if n, err := unix.Read(fd, b); err != nil || string(b[:n]) != "ping" {
		t.Errorf("read %q, %v from the descriptor; want ping", b[:n], err)
	}
	if _, err := nc.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write to the detached socket: %v, want net.ErrClosed", err)
	}
}

// TestBareSocketAsNetConn checks that an accepted socket used as a
// net.Conn works as one (deadlines included), and is detached afterwards
// through that net.Conn.
func TestBareSocketAsNetConn(t *testing.T) {
	_, cli, nc := acceptTest(t, Config{Type: Unix, Path: filepath.Join(t.TempDir(), "s.sock")})
	if _, ok := nc.(*socket); !ok {
		t.Fatalf("a unix listener accepted a %T, want a bare socket", nc)
	}
	if _, err := cli.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 4)
	if _, err := io.ReadFull(nc, b); err != nil || string(b) != "ping" {
		t.Fatalf("read %q, %v; want ping", b, err)
	}
	nc.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := nc.Read(b); !isTimeout(err) {
		t.Errorf("read past the deadline: %v, want a timeout", err)
	}
	fd, _, err := Detach(nc)
	if err != nil {
		t.Fatalf("Detach after use as a net.Conn: %v", err)
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte("pong")); err != nil {
		t.Fatal(err)
	}
	cli.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(cli, b); err != nil || string(b) != "pong" {
		t.Errorf("client read %q, %v; want pong", b, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestBareAcceptWakesOnClose checks that an Accept waiting for a
// connection returns net.ErrClosed when the listener closes, and that the
// closed listener's port takes no more connections (its duplicate
// descriptor was closed too).
func TestBareAcceptWakesOnClose(t *testing.T) {
	l, err := Listen(Config{Type: TCP, Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	done := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		done <- err
	}()
	l.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept still waiting after Close")
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Error("a closed listener's port still takes connections")
	}
}

// TestAcceptBareSocketIPv6 checks the peer's address over IPv6 loopback,
// where the machine has it.
func TestAcceptBareSocketIPv6(t *testing.T) {
	probe, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	probe.Close()
	_, cli, nc := acceptTest(t, Config{Type: TCP, Address: "[::1]:0"})
	if _, ok := nc.(*socket); !ok {
		t.Fatalf("a plain TCP listener accepted a %T, want a bare socket", nc)
	}
	if got, want := nc.RemoteAddr().String(), cli.LocalAddr().String(); got != want {
		t.Errorf("remote address %s, want the client's %s", got, want)
	}
}

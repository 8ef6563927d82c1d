//go:build linux

package listeners

import (
	"errors"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// socket is a connection accepted with accept4 by a plain TCP or unix
// listener, whose connections go to the engine as they are: the engine
// takes its descriptor (Detach) and serves it from its own poller, so the
// socket is never registered with Go's network poller, and no netFD, no
// runtime pollDesc and no duplicate descriptor are made for it. Accepting
// through net.Listener cost five more system calls per connection (Go's
// epoll registration and getsockname; the engine's duplicate, Go's close
// and its epoll removal) and ~200 bytes of garbage.
//
// Used as a net.Conn otherwise (by a program that does not detach it), it
// becomes one on first use: net.FileConn over its descriptor.
type socket struct {
	network string // "tcp" or "unix"
	remote  net.Addr

	mu   sync.Mutex
	fd   int      // -1 once detached, closed or made a net.Conn
	conn net.Conn // the net.Conn it was made, if it was
}

// acceptSocket accepts the next connection of the listening socket rc
// with accept4, waiting in Go's network poller while there is none. TCP
// connections get TCP_NODELAY, as net's do.
func acceptSocket(rc syscall.RawConn, network string) (net.Conn, error) {
	for {
		var fd int
		var sa syscall.Sockaddr
		var err error
		rerr := rc.Read(func(lfd uintptr) bool {
			// syscall's, not x/sys's: that one asks the listening socket
			// for its protocol with a getsockopt at every accept.
			fd, sa, err = syscall.Accept4(int(lfd), syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
			return err != syscall.EAGAIN
		})
		if rerr != nil {
			return nil, &net.OpError{Op: "accept", Net: network, Err: rerr}
		}
		switch err {
		case nil:
		case syscall.ECONNABORTED, syscall.EINTR:
			continue // the client gave up while queued; Go's Accept retries too
		default:
			return nil, &net.OpError{Op: "accept", Net: network, Err: os.NewSyscallError("accept4", err)}
		}
		if network == "tcp" {
			unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		}
		return &socket{network: network, remote: sockaddrAddr(sa, network), fd: fd}, nil
	}
}

// sockaddrAddr is the net.Addr of a socket address as net makes it: an
// IPv4 address in 4 bytes, an IPv6 zone by its interface's name (or its
// number when the interface is gone).
func sockaddrAddr(sa syscall.Sockaddr, network string) net.Addr {
	switch sa := sa.(type) {
	case *syscall.SockaddrInet4:
		return &net.TCPAddr{IP: append(net.IP(nil), sa.Addr[:]...), Port: sa.Port}
	case *syscall.SockaddrInet6:
		a := &net.TCPAddr{IP: append(net.IP(nil), sa.Addr[:]...), Port: sa.Port}
		if sa.ZoneId != 0 {
			a.Zone = strconv.Itoa(int(sa.ZoneId))
			if ifi, err := net.InterfaceByIndex(int(sa.ZoneId)); err == nil {
				a.Zone = ifi.Name
			}
		}
		return a
	case *syscall.SockaddrUnix:
		return &net.UnixAddr{Name: sa.Name, Net: "unix"}
	}
	if network == "unix" {
		return &net.UnixAddr{Net: "unix"}
	}
	return &net.TCPAddr{}
}

// detach hands over the descriptor, after which the socket is closed;
// or, when it was made a net.Conn already, returns that (fd -1); or
// neither when it is closed.
func (s *socket) detach() (fd int, made net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fd, s.fd = s.fd, -1
	return fd, s.conn
}

// netConn is the socket as a net.Conn, made on first use.
func (s *socket) netConn() (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		return s.conn, nil
	}
	if s.fd < 0 {
		return nil, net.ErrClosed
	}
	f := os.NewFile(uintptr(s.fd), s.network)
	c, err := net.FileConn(f) // a duplicate, registered with Go's poller
	f.Close()
	s.fd = -1
	if err != nil {
		return nil, err
	}
	s.conn = c
	return c, nil
}

func (s *socket) Read(b []byte) (int, error) {
	c, err := s.netConn()
	if err != nil {
		return 0, err
	}
	return c.Read(b)
}

func (s *socket) Write(b []byte) (int, error) {
	c, err := s.netConn()
	if err != nil {
		return 0, err
	}
	return c.Write(b)
}

// Close closes the socket, or the net.Conn it was made.
func (s *socket) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		return s.conn.Close()
	}
	if s.fd < 0 {
		return net.ErrClosed
	}
	err := unix.Close(s.fd)
	s.fd = -1
	return err
}

func (s *socket) RemoteAddr() net.Addr { return s.remote }

// LocalAddr is asked of the socket (getsockname), not made a net.Conn
// for: that would undo what accepting it bare saved.
func (s *socket) LocalAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		return s.conn.LocalAddr()
	}
	var sa syscall.Sockaddr
	if s.fd >= 0 {
		sa, _ = syscall.Getsockname(s.fd)
	}
	return sockaddrAddr(sa, s.network)
}

func (s *socket) SetDeadline(t time.Time) error      { return s.deadline(t, net.Conn.SetDeadline) }
func (s *socket) SetReadDeadline(t time.Time) error  { return s.deadline(t, net.Conn.SetReadDeadline) }
func (s *socket) SetWriteDeadline(t time.Time) error { return s.deadline(t, net.Conn.SetWriteDeadline) }

func (s *socket) deadline(t time.Time, set func(net.Conn, time.Time) error) error {
	c, err := s.netConn()
	if err != nil {
		return err
	}
	return set(c, t)
}

// SyscallConn is the net.Conn's: peekByte and the engine's fallback use it.
func (s *socket) SyscallConn() (syscall.RawConn, error) {
	c, err := s.netConn()
	if err != nil {
		return nil, err
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

// SetKeepAliveConfig passes TCP keepalive settings on to the socket.
func (s *socket) SetKeepAliveConfig(kc net.KeepAliveConfig) error {
	c, err := s.netConn()
	if err != nil {
		return err
	}
	return setKeepAlive(c, kc)
}

// acceptFile returns a duplicate of the listening socket's descriptor as
// a file in Go's network poller, and its RawConn, whose Read waits for a
// connection to accept (a net.Listener's RawConn cannot wait); nil when
// it cannot be made, and the listener accepts through net.Listener.
func acceptFile(base net.Listener) (*os.File, syscall.RawConn) {
	sc, ok := base.(syscall.Conn)
	if !ok {
		return nil, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, nil
	}
	dup := -1
	if err := rc.Control(func(fd uintptr) { dup, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || dup < 0 {
		return nil, nil
	}
	// The duplicate shares the listening socket's O_NONBLOCK, so the
	// file is pollable, unless the network poller could not take it (out
	// of epoll watches): then a wait would fail for good, and deadlines,
	// which only a pollable file has, tell.
	f := os.NewFile(uintptr(dup), "listener")
	raw, err := f.SyscallConn()
	if err == nil {
		err = f.SetReadDeadline(time.Time{})
	}
	if err != nil {
		f.Close()
		return nil, nil
	}
	return f, raw
}

// acceptConn accepts the next socket of l: with accept4 when l hands its
// connections over as they are (direct), through net.Listener otherwise.
func (l *Listener) acceptConn(direct bool) (net.Conn, error) {
	if !direct || l.raw == nil {
		return l.base.Accept()
	}
	network := "tcp"
	if l.cfg.Type == Unix {
		network = "unix"
	}
	nc, err := acceptSocket(l.raw, network)
	if err != nil {
		select {
		case <-l.done: // the file closed under the wait: as net.Listener says it
			return nil, &net.OpError{Op: "accept", Net: network, Err: net.ErrClosed}
		default:
		}
	}
	return nc, err
}

//go:build linux

package netpoll

import (
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// FD is a socket descriptor of the broker's own, without Go's netFD and
// pollDesc: it is read and written without blocking, and a writer that
// finds the socket full waits for its Poller's PollWritable (which calls
// WakeWriter). Its zero value is not usable: Init it with a descriptor.
type FD struct {
	fd int32
	// state counts the system calls using fd (in units of user) and has
	// closed set once the FD is closed: whoever leaves it at closed alone
	// closes fd, so that no call ever uses a number the kernel has given
	// to another connection meanwhile.
	state atomic.Int32
	// writable is signalled when the socket takes writes again (and by
	// Close); made by the first write that finds it full.
	writable atomic.Pointer[chan struct{}]
}

const (
	closed int32 = 1
	user   int32 = 2
)

// Init makes f the owner of fd, which must be non-blocking.
func (f *FD) Init(fd int) { f.fd = int32(fd) }

// Num is the descriptor's number, for the Poller; it may be closed.
func (f *FD) Num() int { return int(f.fd) }

// Acquire reports whether the descriptor is open, keeping it open until
// Release.
func (f *FD) Acquire() bool {
	for {
		s := f.state.Load()
		if s&closed != 0 {
			return false
		}
		if f.state.CompareAndSwap(s, s+user) {
			return true
		}
	}
}

// Release ends a use that Acquire began.
func (f *FD) Release() {
	if f.state.Add(-user) == closed {
		unix.Close(int(f.fd))
	}
}

// Close closes the descriptor once the calls using it return, and wakes a
// writer waiting for room. It reports false when it was closed already.
func (f *FD) Close() bool {
	if !f.Acquire() {
		return false
	}
	if f.state.Or(closed)&closed != 0 {
		f.Release()
		return false
	}
	f.WakeWriter()
	f.Release()
	return true
}

// Read is one read(2) without blocking: syscall.EAGAIN when there is
// nothing to read, net.ErrClosed after Close.
func (f *FD) Read(b []byte) (int, error) {
	if !f.Acquire() {
		return 0, net.ErrClosed
	}
	n, err := rawRead(int(f.fd), b)
	f.Release()
	return n, err
}

// Write writes all of b, waiting for WakeWriter whenever the socket is
// full, for at most timeout in all (then os.ErrDeadlineExceeded).
func (f *FD) Write(b []byte, timeout time.Duration) (int, error) {
	var timer *time.Timer
	n := 0
	for n < len(b) {
		if !f.Acquire() {
			return n, net.ErrClosed
		}
		m, err := rawWrite(int(f.fd), b[n:])
		f.Release()
		if m > 0 {
			n += m
		}
		switch {
		case err == nil || err == syscall.EINTR:
		case err == syscall.EAGAIN:
			w := f.writable.Load()
			if w == nil {
				// Made once, by the first write that finds the socket
				// full; a wakeup that came before it is not lost, as the
				// write is tried again before waiting.
				ch := make(chan struct{}, 1)
				f.writable.Store(&ch)
				continue
			}
			if timer == nil {
				timer = time.NewTimer(timeout)
				defer timer.Stop()
			}
			select {
			case <-*w:
			case <-timer.C:
				return n, os.ErrDeadlineExceeded
			}
		default:
			return n, err
		}
	}
	return n, nil
}

// WakeWriter tells a writer waiting for room to try again.
func (f *FD) WakeWriter() {
	if w := f.writable.Load(); w != nil {
		select {
		case *w <- struct{}{}:
		default:
		}
	}
}

// SetKeepAlive turns on TCP keepalive probes as kc says, as
// net.TCPConn.SetKeepAliveConfig does; on a unix socket the TCP settings
// fail, which is harmless.
func (f *FD) SetKeepAlive(kc net.KeepAliveConfig) {
	if !f.Acquire() {
		return
	}
	defer f.Release()
	fd := int(f.fd)
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1) != nil {
		return
	}
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, int(kc.Idle/time.Second))
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, int(kc.Interval/time.Second))
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPCNT, kc.Count)
}

// PeerClosed reports whether the peer has closed its side of the stream
// (or the socket failed), whatever input is still unread before the end;
// false when f is closed. It does not block.
func (f *FD) PeerClosed() bool {
	if !f.Acquire() {
		return false
	}
	defer f.Release()
	fds := []unix.PollFd{{Fd: f.fd, Events: unix.POLLRDHUP}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0 && fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
}

// ShutdownWrite ends the sending side of the stream: the peer reads what
// was written, then the end, while f can still read.
func (f *FD) ShutdownWrite() {
	if !f.Acquire() {
		return
	}
	unix.Shutdown(int(f.fd), unix.SHUT_WR)
	f.Release()
}

// WaitReadable waits, blocking the calling goroutine's thread, for at
// most d for input or the end of the stream; it reports false when d
// passed or f is closed. A Close meanwhile waits for it to return.
func (f *FD) WaitReadable(d time.Duration) bool {
	if !f.Acquire() {
		return false
	}
	defer f.Release()
	fds := []unix.PollFd{{Fd: f.fd, Events: unix.POLLIN | unix.POLLRDHUP}}
	n, err := unix.Poll(fds, int(d/time.Millisecond))
	return err == nil && n > 0
}

package main

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"syscall"
)

// relay is the least an MQTT broker can do for the latency scenario, the
// reference the brokers' latencies are read against: one thread blocked
// in epoll_wait, one read per readable socket, each PUBLISH written on to
// every client that has subscribed as it came (no topic matching, no
// sessions, no copies kept) and its PUBACK after. MQTT 3.1.1, QoS 0 and 1
// only; a write the socket refuses is dropped, so it is no reference for
// throughput. What the latency scenario measures against it is the
// generator's, the kernel's and the machine's share of every broker's
// figure; it is no lower bound (a broker's threads may wake faster than
// its one), and over runs it moves as much as the brokers do.
type relay struct {
	lfd, ep int
	stop    [2]int // a pipe: a byte written to stop[1] ends serve
	addr    net.Addr
	conns   map[int]*relayConn
	subs    []*relayConn
}

type relayConn struct {
	fd  int
	buf []byte // an incomplete frame carried to the next read
}

// newRelay listens on addr (127.0.0.1:0 picks a port).
func newRelay(addr string) (*relay, error) {
	ta, err := net.ResolveTCPAddr("tcp4", addr)
	if err != nil {
		return nil, err
	}
	r := &relay{lfd: -1, ep: -1, stop: [2]int{-1, -1}, conns: map[int]*relayConn{}}
	fail := func(op string, err error) (*relay, error) {
		r.close()
		return nil, fmt.Errorf("relay: %s: %w", op, err)
	}
	if r.lfd, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0); err != nil {
		return fail("socket", err)
	}
	if err := syscall.SetsockoptInt(r.lfd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		return fail("SO_REUSEADDR", err)
	}
	sa := &syscall.SockaddrInet4{Port: ta.Port}
	copy(sa.Addr[:], ta.IP.To4())
	if err := syscall.Bind(r.lfd, sa); err != nil {
		return fail("bind", err)
	}
	if err := syscall.Listen(r.lfd, 128); err != nil {
		return fail("listen", err)
	}
	bound, err := syscall.Getsockname(r.lfd)
	if err != nil {
		return fail("getsockname", err)
	}
	b4 := bound.(*syscall.SockaddrInet4)
	r.addr = &net.TCPAddr{IP: net.IP(b4.Addr[:]), Port: b4.Port}
	if err := syscall.Pipe2(r.stop[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return fail("pipe", err)
	}
	if r.ep, err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC); err != nil {
		return fail("epoll_create1", err)
	}
	for _, fd := range []int{r.lfd, r.stop[0]} {
		if err := syscall.EpollCtl(r.ep, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}); err != nil {
			return fail("epoll_ctl", err)
		}
	}
	return r, nil
}

// shutdown makes serve return.
func (r *relay) shutdown() { syscall.Write(r.stop[1], []byte{0}) }

func (r *relay) close() {
	for fd := range r.conns {
		syscall.Close(fd)
	}
	for _, fd := range []int{r.lfd, r.ep, r.stop[0], r.stop[1]} {
		if fd >= 0 {
			syscall.Close(fd)
		}
	}
}

// serve runs the relay on the calling goroutine's own thread until
// shutdown, then closes everything.
func (r *relay) serve() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer r.close()
	events := make([]syscall.EpollEvent, 64)
	rb := make([]byte, 64<<10)
	for {
		n, err := syscall.EpollWait(r.ep, events, -1)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("relay: epoll_wait: %w", err)
		}
		for _, ev := range events[:n] {
			switch fd := int(ev.Fd); fd {
			case r.stop[0]:
				return nil
			case r.lfd:
				r.accept()
			default:
				if c := r.conns[fd]; c != nil {
					r.read(c, rb)
				}
			}
		}
	}
}

func (r *relay) accept() {
	for {
		fd, _, err := syscall.Accept4(r.lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		if err != nil {
			return // EAGAIN, or a connection gone before it was taken
		}
		syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
		if err := syscall.EpollCtl(r.ep, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}); err != nil {
			syscall.Close(fd)
			continue
		}
		r.conns[fd] = &relayConn{fd: fd}
	}
}

// read handles what one read of c brings: level-triggered, so bytes left
// in the socket raise the next epoll_wait at once.
func (r *relay) read(c *relayConn, rb []byte) {
	n, err := syscall.Read(c.fd, rb)
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) {
		return
	}
	if n <= 0 {
		r.drop(c)
		return
	}
	b := rb[:n]
	if len(c.buf) > 0 {
		c.buf = append(c.buf, b...)
		b = c.buf
	}
	for {
		frame, body, ok := relayFrame(b)
		if !ok {
			break
		}
		if !r.handle(c, frame, body) {
			r.drop(c)
			return
		}
		b = b[len(frame):]
	}
	c.buf = append(c.buf[:0], b...)
}

// relayFrame splits the first whole frame off b.
func relayFrame(b []byte) (frame, body []byte, ok bool) {
	size, mul := 0, 1
	for i := 1; i < len(b) && i <= 4; i++ {
		size += int(b[i]&0x7f) * mul
		mul <<= 7
		if b[i]&0x80 == 0 {
			end := i + 1 + size
			if len(b) < end {
				return nil, nil, false
			}
			return b[:end], b[i+1 : end], true
		}
	}
	return nil, nil, false
}

// handle answers one frame; false closes the connection.
func (r *relay) handle(c *relayConn, frame, body []byte) bool {
	switch frame[0] >> 4 {
	case 1: // CONNECT
		syscall.Write(c.fd, []byte{0x20, 2, 0, 0})
	case 8: // SUBSCRIBE: every filter granted at the QoS asked, at most 1
		if len(body) < 2 {
			return false
		}
		ack := []byte{0x90, 2, body[0], body[1]}
		for p := body[2:]; len(p) >= 3; {
			l := int(p[0])<<8 | int(p[1])
			if len(p) < 3+l {
				return false
			}
			ack = append(ack, min(p[2+l]&3, 1))
			p = p[3+l:]
		}
		ack[1] = byte(len(ack) - 2)
		syscall.Write(c.fd, ack)
		r.subs = append(r.subs, c)
	case 3: // PUBLISH
		for _, s := range r.subs {
			syscall.Write(s.fd, frame)
		}
		if frame[0]>>1&3 > 0 {
			if len(body) < 2 {
				return false
			}
			id := 2 + (int(body[0])<<8 | int(body[1]))
			if len(body) < id+2 {
				return false
			}
			syscall.Write(c.fd, []byte{0x40, 2, body[id], body[id+1]})
		}
	case 12: // PINGREQ
		syscall.Write(c.fd, []byte{0xd0, 0})
	case 14: // DISCONNECT
		return false
	}
	return true
}

func (r *relay) drop(c *relayConn) {
	syscall.Close(c.fd)
	delete(r.conns, c.fd)
	for i, s := range r.subs {
		if s == c {
			r.subs = append(r.subs[:i], r.subs[i+1:]...)
			break
		}
	}
}

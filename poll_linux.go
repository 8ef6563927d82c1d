//go:build linux

package mqttd

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
)

// poller watches idle connections with one epoll instance so that a
// connection with nothing to read holds no goroutine, stack or read
// buffer: a reader goroutine exists only while there are bytes to handle.
// Edge-triggered, so a connection is not reported again until new bytes
// arrive; conn.wakeReader makes sure one reader drains them.
type poller struct {
	epfd   int
	wakeR  int // read end of a pipe that interrupts EpollWait on close
	wakeW  int
	mu     sync.Mutex
	conns  map[int32]*conn
	closed bool
	done   chan struct{}
}

const pollEvents = syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLHUP | syscall.EPOLLERR | -syscall.EPOLLET

func newPoller() (*poller, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		syscall.Close(epfd)
		return nil, fmt.Errorf("pipe2: %w", err)
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(p[0])}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, p[0], &ev); err != nil {
		syscall.Close(epfd)
		syscall.Close(p[0])
		syscall.Close(p[1])
		return nil, fmt.Errorf("epoll_ctl: %w", err)
	}
	pl := &poller{epfd: epfd, wakeR: p[0], wakeW: p[1], conns: make(map[int32]*conn), done: make(chan struct{})}
	go pl.run()
	return pl, nil
}

// add watches fd for c. Bytes already waiting are reported at once.
func (pl *poller) add(fd int, c *conn) error {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.closed {
		return errors.New("poller closed")
	}
	pl.conns[int32(fd)] = c
	ev := syscall.EpollEvent{Events: uint32(pollEvents), Fd: int32(fd)}
	if err := syscall.EpollCtl(pl.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		delete(pl.conns, int32(fd))
		return fmt.Errorf("epoll_ctl add: %w", err)
	}
	return nil
}

// remove stops watching fd. It must run before the descriptor is closed,
// so that a new connection given the same number is never mistaken for c.
func (pl *poller) remove(fd int, c *conn) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.conns[int32(fd)] == c {
		delete(pl.conns, int32(fd))
		syscall.EpollCtl(pl.epfd, syscall.EPOLL_CTL_DEL, fd, nil)
	}
}

func (pl *poller) run() {
	defer close(pl.done)
	events := make([]syscall.EpollEvent, 256)
	ready := make([]*conn, 0, len(events))
	for {
		n, err := syscall.EpollWait(pl.epfd, events, -1)
		if err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			return
		}
		ready = ready[:0]
		pl.mu.Lock()
		if pl.closed {
			pl.mu.Unlock()
			return
		}
		for _, ev := range events[:n] {
			if c := pl.conns[ev.Fd]; c != nil {
				ready = append(ready, c)
			}
		}
		pl.mu.Unlock()
		for _, c := range ready {
			c.wakeReader()
		}
		clear(ready)
	}
}

// close stops the poller goroutine and releases its descriptors.
func (pl *poller) close() {
	pl.mu.Lock()
	if pl.closed {
		pl.mu.Unlock()
		return
	}
	pl.closed = true
	pl.mu.Unlock()
	syscall.Write(pl.wakeW, []byte{1})
	<-pl.done
	syscall.Close(pl.epfd)
	syscall.Close(pl.wakeR)
	syscall.Close(pl.wakeW)
}

//go:build linux

package mqttd

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// poller watches idle connections with one epoll instance so that a
// connection with nothing to read holds no goroutine, stack or read
// buffer: a reader goroutine exists only while there are bytes to handle.
// Edge-triggered, so a connection is not reported again until new bytes
// arrive; conn.wakeReader makes sure one reader drains them.
//
// The poller goroutine never blocks in epoll_wait. The epoll descriptor
// is itself registered with Go's network poller (an epoll instance is
// readable while it has events), and the goroutine parks there: blocking
// in the system call instead kept the scheduler's P, so with one CPU the
// readers it had just started waited for sysmon to take the P back, which
// doubled QoS 1 latency.
type poller struct {
	epfd int
	file *os.File // epfd as Go's network poller sees it
	mu   sync.Mutex
	// conns holds each watched connection at its descriptor's number:
	// the kernel gives out the lowest free numbers, so it is dense, and a
	// slot costs 8 bytes where a map entry cost ~30.
	conns []*conn
	done  chan struct{}
}

// EPOLLET is bit 31: package syscall declares it negative on some
// architectures and positive on others, so it comes from x/sys/unix.
// EPOLLOUT is edge-triggered like the rest: the kernel reports it when a
// socket that refused a write takes writes again (and along with other
// events), so a connection whose writes go through pays nothing for it.
const (
	pollEvents uint32 = unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLHUP | unix.EPOLLERR | unix.EPOLLET
	// readEvents are those a reader must handle; writeEvents those a
	// writer waiting for room must.
	readEvents  = unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLHUP | unix.EPOLLERR
	writeEvents = unix.EPOLLOUT | unix.EPOLLHUP | unix.EPOLLERR
)

func newPoller() (*poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	// Non-blocking, so that os.NewFile hands it to the network poller.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("epoll: %w", err)
	}
	pl := &poller{epfd: epfd, file: os.NewFile(uintptr(epfd), "epoll"), done: make(chan struct{})}
	raw, err := pl.file.SyscallConn()
	if err != nil {
		pl.file.Close()
		return nil, fmt.Errorf("epoll: %w", err)
	}
	go pl.run(raw)
	return pl, nil
}

// add watches fd for c. Bytes already waiting are reported at once.
func (pl *poller) add(fd int, c *conn) error {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if fd >= len(pl.conns) {
		pl.conns = append(pl.conns, make([]*conn, max(fd+1, 2*len(pl.conns))-len(pl.conns))...)
	}
	pl.conns[fd] = c
	ev := unix.EpollEvent{Events: pollEvents, Fd: int32(fd)}
	if err := unix.EpollCtl(pl.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		pl.conns[fd] = nil
		return fmt.Errorf("epoll_ctl add: %w", err)
	}
	return nil
}

// remove stops watching fd. It must run before the descriptor is closed,
// so that a new connection given the same number is never mistaken for c;
// closing the descriptor takes it out of the epoll set, so no epoll_ctl
// call is needed (an event already fetched for it finds no connection, or
// at worst wakes a new one's reader for nothing).
func (pl *poller) remove(fd int, c *conn) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if fd < len(pl.conns) && pl.conns[fd] == c {
		pl.conns[fd] = nil
	}
}

// run fetches events without blocking and parks in the network poller
// when there are none, until the epoll descriptor is closed.
//
// It stays in one RawConn.Read: the network poller records an edge of the
// epoll descriptor that comes while its events are handled, so a fetch
// that did not fill the buffer can park at once. Returning to call Read
// again would first throw that record away (Read resets it), and would
// need a fetch that finds nothing before parking: one epoll_wait more per
// wakeup.
func (pl *poller) run(raw syscall.RawConn) {
	defer close(pl.done)
	events := make([]unix.EpollEvent, 256)
	ready := make([]*conn, 0, len(events))
	failed := false
	fetch := func(fd uintptr) bool {
		for {
			n, err := rawEpollPoll(int(fd), events)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				failed = true // closed
				return true
			}
			ready = pl.wake(events[:n], ready)
			if n < len(events) {
				return false
			}
		}
	}
	for !failed {
		if err := raw.Read(fetch); err != nil {
			return // closed
		}
	}
}

// wake hands each connection with bytes to read to a reader, and tells
// writers waiting for room that there is some.
func (pl *poller) wake(events []unix.EpollEvent, ready []*conn) []*conn {
	ready = ready[:0]
	pl.mu.Lock()
	for _, ev := range events {
		if int(ev.Fd) >= len(pl.conns) {
			continue
		}
		c := pl.conns[ev.Fd]
		if c == nil {
			continue
		}
		if ev.Events&writeEvents != 0 {
			c.ev.wakeWriter()
		}
		if ev.Events&readEvents != 0 {
			if ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				c.hup.Store(true) // the reader must read to the end
			}
			ready = append(ready, c)
		}
	}
	pl.mu.Unlock()
	for _, c := range ready {
		c.wakeReader()
	}
	clear(ready)
	return ready
}

// close stops the poller goroutine and releases the epoll descriptor; a
// nil poller (Serve never ran) has nothing to close.
func (pl *poller) close() {
	if pl == nil {
		return
	}
	pl.file.Close()
	<-pl.done
}

//go:build linux

package netpoll

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Watcher is what a Poller tells about a descriptor it watches. Both
// methods run on the poller's goroutine, must not block, and are called
// after the Poller's lock is released, so they may call Remove.
type Watcher interface {
	comparable
	// PollReadable reports bytes to read, or the end of the stream: hup
	// is set when the peer hung up or the socket failed, and the watcher
	// must then read until the end.
	PollReadable(hup bool)
	// PollWritable reports that the socket takes writes again (or
	// failed): a writer waiting for room should try again.
	PollWritable()
}

// Poller watches idle connections with one epoll instance so that a
// connection with nothing to read holds no goroutine, stack or read
// buffer: a reader goroutine exists only while there are bytes to handle.
// Edge-triggered, so a descriptor is not reported again until new bytes
// arrive; the watcher makes sure one reader drains them.
//
// The poller goroutine never blocks in epoll_wait. The epoll descriptor
// is itself registered with Go's network poller (an epoll instance is
// readable while it has events), and the goroutine parks there: blocking
// in the system call instead kept the scheduler's P, so with one CPU the
// readers it had just started waited for sysmon to take the P back, which
// doubled QoS 1 latency.
type Poller[W Watcher] struct {
	epfd int
	file *os.File // epfd as Go's network poller sees it
	mu   sync.Mutex
	// watched holds each watcher at its descriptor's number: the kernel
	// gives out the lowest free numbers, so it is dense, and a slot costs
	// a pointer where a map entry cost ~30 bytes.
	watched []W
	done    chan struct{}

	// pollMu is Poll's: its scratch, and closed, which Close sets so that
	// no Poll reads a descriptor number the process may have given again.
	pollMu     sync.Mutex
	closed     bool
	pollEvents []unix.EpollEvent
	pollWoken  []ready[W]
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
	hupEvents   = unix.EPOLLRDHUP | unix.EPOLLHUP | unix.EPOLLERR
)

// New starts a poller and its goroutine.
func New[W Watcher]() (*Poller[W], error) {
	pl, raw, err := open[W]()
	if err != nil {
		return nil, err
	}
	go pl.run(raw)
	return pl, nil
}

// open makes a poller whose goroutine is yet to start (run).
func open[W Watcher]() (*Poller[W], syscall.RawConn, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("epoll_create1: %w", err)
	}
	// Non-blocking, so that os.NewFile hands it to the network poller.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, nil, fmt.Errorf("epoll: %w", err)
	}
	pl := &Poller[W]{epfd: epfd, file: os.NewFile(uintptr(epfd), "epoll"), done: make(chan struct{})}
	raw, err := pl.file.SyscallConn()
	if err != nil {
		pl.file.Close()
		return nil, nil, fmt.Errorf("epoll: %w", err)
	}
	return pl, raw, nil
}

// Add watches fd for w. Bytes already waiting are reported at once.
func (pl *Poller[W]) Add(fd int, w W) error {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if fd >= len(pl.watched) {
		pl.watched = append(pl.watched, make([]W, max(fd+1, 2*len(pl.watched))-len(pl.watched))...)
	}
	pl.watched[fd] = w
	ev := unix.EpollEvent{Events: pollEvents, Fd: int32(fd)}
	if err := unix.EpollCtl(pl.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		var none W
		pl.watched[fd] = none
		return fmt.Errorf("epoll_ctl add: %w", err)
	}
	return nil
}

// Remove stops watching fd for w. It must run before the descriptor is
// closed, so that a new connection given the same number is never
// mistaken for w's; closing the descriptor takes it out of the epoll set,
// so no epoll_ctl call is needed (an event already fetched for it finds
// no watcher, or at worst wakes a new one's reader for nothing).
func (pl *Poller[W]) Remove(fd int, w W) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if fd < len(pl.watched) && pl.watched[fd] == w {
		var none W
		pl.watched[fd] = none
	}
}

// ready is a watcher with the events fetched for it.
type ready[W Watcher] struct {
	w      W
	events uint32
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
func (pl *Poller[W]) run(raw syscall.RawConn) {
	defer close(pl.done)
	events := make([]unix.EpollEvent, 256)
	woken := make([]ready[W], 0, len(events))
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
			woken = pl.wake(events[:n], woken)
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

// wake tells writers waiting for room that there is some, then readers
// that there are bytes: a reader's answers may be what the writer waits
// to send.
func (pl *Poller[W]) wake(events []unix.EpollEvent, woken []ready[W]) []ready[W] {
	woken = woken[:0]
	var none W
	pl.mu.Lock()
	for _, ev := range events {
		if int(ev.Fd) >= len(pl.watched) {
			continue
		}
		if w := pl.watched[ev.Fd]; w != none {
			woken = append(woken, ready[W]{w, ev.Events})
		}
	}
	pl.mu.Unlock()
	for _, r := range woken {
		if r.events&writeEvents != 0 {
			r.w.PollWritable()
		}
	}
	for _, r := range woken {
		if r.events&readEvents != 0 {
			r.w.PollReadable(r.events&hupEvents != 0)
		}
	}
	clear(woken)
	return woken
}

// Poll fetches the events waiting now, without blocking, and wakes their
// watchers, as the poller's goroutine does once the runtime polls the
// network. With one P the runtime polls it only when no goroutine is
// runnable, or every 10 ms: a long computation calls Poll between its
// pieces (before it yields) so that sockets wait for a piece, not for
// sysmon. It does nothing while another Poll runs, or after Close.
func (pl *Poller[W]) Poll() {
	if !pl.pollMu.TryLock() {
		return
	}
	defer pl.pollMu.Unlock()
	if pl.closed {
		return
	}
	if pl.pollEvents == nil {
		pl.pollEvents = make([]unix.EpollEvent, 64)
	}
	n, err := rawEpollPoll(pl.epfd, pl.pollEvents)
	if err != nil || n == 0 {
		return
	}
	pl.pollWoken = pl.wake(pl.pollEvents[:n], pl.pollWoken)
}

// Close stops the poller goroutine and releases the epoll descriptor; a
// nil Poller has nothing to close.
func (pl *Poller[W]) Close() {
	if pl == nil {
		return
	}
	pl.pollMu.Lock()
	pl.closed = true
	pl.pollMu.Unlock()
	pl.file.Close()
	<-pl.done
}

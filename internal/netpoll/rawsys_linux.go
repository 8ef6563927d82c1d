//go:build linux

package netpoll

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The engine's system calls on its own descriptors never block (the
// sockets and the epoll instance are non-blocking, the epoll wait has a
// zero timeout), so they are made without telling the scheduler
// (RawSyscall). A system call made through syscall.Syscall enters the
// scheduler's syscall state, and the first one after the process was idle
// wakes sysmon from its deep sleep, which then polls every 20 µs for a
// millisecond or more: at 1,000 small messages a second that was ~2,750
// sysmon wakeups and ~450 futex calls a second, each a context switch on
// the broker's core. The price: a call that sleeps in the kernel after all
// (a write waiting for memory reclaim) keeps its P meanwhile, and holds up
// a stop-the-world phase of the collector until it returns.

// rawRead is read(2) on a non-blocking descriptor.
func rawRead(fd int, b []byte) (int, error) {
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	raceWrittenByKernel(b[:n])
	return int(n), nil
}

// rawWrite is write(2) on a non-blocking descriptor.
func rawWrite(fd int, b []byte) (int, error) {
	raceReadByKernel(b)
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// rawEpollPoll is epoll_pwait(2) with a zero timeout: it returns the
// events ready now without waiting.
func rawEpollPoll(epfd int, events []unix.EpollEvent) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(unsafe.SliceData(events))),
		uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

//go:build linux

package netpoll

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"mqttd/internal/testutil"
)

// Tests of the engine's own descriptor: writes that wait for the poller's
// word when the socket is full, a close that never lets a call use a
// number the kernel may have given to another connection, and the
// poller's reports.

// watcher records what the poller tells about its descriptor, and wakes
// the FD's writer as the broker's connections do.
type watcher struct {
	fd       *FD
	readable chan bool // hup, per report
	writable atomic.Int32
}

func (w *watcher) PollReadable(hup bool) {
	select {
	case w.readable <- hup:
	default:
	}
}

func (w *watcher) PollWritable() {
	w.writable.Add(1)
	w.fd.WakeWriter()
}

// served returns the server end of a loopback TCP connection as an FD
// watched by a poller, its watcher, and the client end.
func served(t *testing.T) (*FD, *watcher, *Poller[*watcher], net.Conn) {
	t.Helper()
	srvEnd, cli := testutil.TCPPair(t)
	f := fdOf(t, srvEnd)
	pl, err := New[*watcher]()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pl.Close)
	w := &watcher{fd: f, readable: make(chan bool, 16)}
	if err := pl.Add(f.Num(), w); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pl.Remove(f.Num(), w) })
	return f, w, pl, cli
}

// fdOf takes nc's descriptor out of Go's hands into an FD of its own.
func fdOf(t *testing.T, nc net.Conn) *FD {
	t.Helper()
	file, err := nc.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	fd, err := unix.Dup(int(file.Fd()))
	file.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		t.Fatal(err)
	}
	f := new(FD)
	f.Init(fd)
	t.Cleanup(func() { f.Close() })
	return f
}

// bigWrite is more than the loopback socket's send and receive buffers
// hold together, so that writing it finds the socket full.
const bigWrite = 32 << 20

// writeAsync writes b on a goroutine of its own and reports the outcome
// on the channel returned.
func writeAsync(f *FD, b []byte, timeout time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() {
		n, err := f.Write(b, timeout)
		if err == nil && n != len(b) {
			err = io.ErrShortWrite
		}
		done <- err
	}()
	return done
}

// waitWriteFull polls until a write has found f's socket full.
func waitWriteFull(t *testing.T, f *FD) {
	t.Helper()
	testutil.WaitFor(t, "the write to find the socket full", func() bool { return f.writable.Load() != nil })
}

// TestWriteWaitsForRoom: a write larger than the socket holds waits for
// the client to read and completes, every byte in order, woken by the
// poller's PollWritable.
func TestWriteWaitsForRoom(t *testing.T) {
	f, w, _, cli := served(t)
	b := bytes.Repeat([]byte("0123456789abcdef"), bigWrite/16)
	done := writeAsync(f, b, time.Minute)
	waitWriteFull(t, f)
	cli.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(b))
	if n, err := io.ReadFull(cli, got); err != nil {
		t.Fatalf("client read %d of %d bytes: %v", n, len(b), err)
	}
	if err := <-done; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, b) {
		t.Error("the client read other bytes than were written")
	}
	if w.writable.Load() == 0 {
		t.Error("the poller never reported the socket writable")
	}
}

// TestWriteTimeout: a write the client does not read ends with a timeout.
func TestWriteTimeout(t *testing.T) {
	f, _, _, _ := served(t)
	err := <-writeAsync(f, make([]byte, bigWrite), 100*time.Millisecond)
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("write nobody reads: %v, want a timeout", err)
	}
}

// TestCloseWakesWriter: closing the descriptor ends a write waiting for
// room at once, however long its timeout.
func TestCloseWakesWriter(t *testing.T) {
	f, _, _, _ := served(t)
	done := writeAsync(f, make([]byte, bigWrite), time.Hour)
	waitWriteFull(t, f)
	f.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("write after close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the write waiting for room did not end when the descriptor closed")
	}
}

// TestCloseWaitsForUsers: a close while a call uses the descriptor leaves
// it open until that call is done; then it is closed, and no call gets to
// use it again.
func TestCloseWaitsForUsers(t *testing.T) {
	srvEnd, cli := testutil.TCPPair(t)
	f := fdOf(t, srvEnd)
	if !f.Acquire() {
		t.Fatal("acquire on an open descriptor failed")
	}
	if !f.Close() {
		t.Fatal("close of an open descriptor reported it closed already")
	}
	if _, err := unix.FcntlInt(uintptr(f.Num()), unix.F_GETFD, 0); err != nil {
		t.Fatalf("the descriptor in use was closed: %v", err)
	}
	if f.Acquire() {
		t.Error("acquire after close succeeded")
	}
	if f.Close() {
		t.Error("a second close reported closing")
	}
	f.Release() // the last user closes it: the client reads the end
	cli.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := cli.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("client read %d, %v after the close; want EOF", n, err)
	}
	if _, err := f.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("read after close: %v, want net.ErrClosed", err)
	}
}

// readReport waits for the poller's next PollReadable and returns its hup.
func readReport(t *testing.T, w *watcher) bool {
	t.Helper()
	select {
	case hup := <-w.readable:
		return hup
	case <-time.After(10 * time.Second):
		t.Fatal("the poller reported no bytes to read")
		return false
	}
}

// TestPollerReportsReadsAndHangUp: bytes arriving are reported readable,
// once per edge, and the peer's close is reported with hup set; the
// bytes are all there to read, then the end of the stream.
func TestPollerReportsReadsAndHangUp(t *testing.T) {
	f, w, _, cli := served(t)
	if _, err := cli.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if readReport(t, w) {
		t.Error("bytes were reported as a hang-up")
	}
	cli.Close()
	for !readReport(t, w) {
	}
	b := make([]byte, 8)
	n, err := f.Read(b)
	if err != nil || string(b[:n]) != "abc" {
		t.Fatalf("read %q, %v; want abc", b[:n], err)
	}
	if n, err := f.Read(b); n != 0 || err != nil {
		t.Errorf("read after the peer closed: %d, %v; want the end (0, nil)", n, err)
	}
}

// TestPollerRemove: Remove by a watcher that no longer owns the number
// (a closed connection whose number was given out again) changes nothing;
// Remove by the owner stops its reports. The epoll ready list is in order
// of readiness, so once a second descriptor written later is reported, a
// report for the first would have come too.
func TestPollerRemove(t *testing.T) {
	f, w, pl, cli := served(t)
	pl.Remove(f.Num(), &watcher{})
	if _, err := cli.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	readReport(t, w)

	pl.Remove(f.Num(), w)
	if _, err := cli.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	srv2, cli2 := testutil.TCPPair(t)
	f2 := fdOf(t, srv2)
	w2 := &watcher{fd: f2, readable: make(chan bool, 16)}
	if err := pl.Add(f2.Num(), w2); err != nil {
		t.Fatal(err)
	}
	if _, err := cli2.Write([]byte("z")); err != nil {
		t.Fatal(err)
	}
	readReport(t, w2)
	select {
	case <-w.readable:
		t.Error("a removed watcher was told of bytes")
	default:
	}
}

// TestPeerClosed: an open peer is not closed, one that wrote and closed
// is, though its bytes are still unread; a closed FD reports false.
func TestPeerClosed(t *testing.T) {
	srvEnd, cli := testutil.TCPPair(t)
	f := fdOf(t, srvEnd)
	if f.PeerClosed() {
		t.Fatal("PeerClosed with the peer open")
	}
	if _, err := cli.Write([]byte("last words")); err != nil {
		t.Fatal(err)
	}
	if f.PeerClosed() {
		t.Fatal("PeerClosed with the peer open and bytes unread")
	}
	cli.Close()
	testutil.WaitFor(t, "the peer's close to arrive", f.PeerClosed)
	b := make([]byte, 64)
	if n, err := f.Read(b); err != nil || string(b[:n]) != "last words" {
		t.Fatalf("read %q, %v after the peer closed", b[:n], err)
	}
	f.Close()
	if f.PeerClosed() {
		t.Error("PeerClosed on a closed FD")
	}
}

// TestShutdownWriteAndWaitReadable: after ShutdownWrite the peer reads the
// end while f still reads what it sends; WaitReadable waits for input.
func TestShutdownWriteAndWaitReadable(t *testing.T) {
	srvEnd, cli := testutil.TCPPair(t)
	f := fdOf(t, srvEnd)
	if f.WaitReadable(10 * time.Millisecond) {
		t.Fatal("WaitReadable with nothing sent")
	}
	f.ShutdownWrite()
	cli.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := cli.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("the peer read %d, %v; want the end", n, err)
	}
	if _, err := cli.Write([]byte("more")); err != nil {
		t.Fatal(err)
	}
	if !f.WaitReadable(10 * time.Second) {
		t.Fatal("WaitReadable missed the peer's bytes")
	}
	b := make([]byte, 8)
	if n, err := f.Read(b); err != nil || string(b[:n]) != "more" {
		t.Fatalf("read %q, %v", b[:n], err)
	}
}

// TestPollWakesFromTheCaller: Poll hands a watcher its event on the
// caller's goroutine, from a poller whose own goroutine never runs. After
// Close it reads nothing, not even from another poller given the same
// descriptor number.
func TestPollWakesFromTheCaller(t *testing.T) {
	pl, _, err := open[*watcher]()
	if err != nil {
		t.Fatal(err)
	}
	f, w, cli := unpolled(t, pl)
	if _, err := cli.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	waitBytes(t, f)
	pl.Poll()
	select {
	case hup := <-w.readable:
		if hup {
			t.Error("bytes were reported as a hang-up")
		}
	default:
		t.Fatal("Poll reported nothing")
	}
	close(pl.done) // as run does when it ends: Close waits for it
	pl.Close()

	// A new poller likely gets the closed one's number.
	pl2, _, err := open[*watcher]()
	if err != nil {
		t.Fatal(err)
	}
	defer pl2.file.Close()
	if pl2.epfd != pl.epfd {
		t.Skipf("the new poller has descriptor %d, not the closed one's %d", pl2.epfd, pl.epfd)
	}
	f2, w2, cli2 := unpolled(t, pl2)
	if _, err := cli2.Write([]byte("def")); err != nil {
		t.Fatal(err)
	}
	waitBytes(t, f2)
	pl.Poll() // closed: must not take pl2's event
	pl2.Poll()
	select {
	case <-w2.readable:
	default:
		t.Fatal("the closed poller's Poll took the event of the poller now at its descriptor")
	}
	select {
	case <-w.readable:
		t.Error("the closed poller reported bytes after Close")
	default:
	}
}

// unpolled watches the server end of a new loopback connection with pl,
// and returns it, its watcher and the client end.
func unpolled(t *testing.T, pl *Poller[*watcher]) (*FD, *watcher, net.Conn) {
	t.Helper()
	srvEnd, cli := testutil.TCPPair(t)
	f := fdOf(t, srvEnd)
	w := &watcher{fd: f, readable: make(chan bool, 16)}
	if err := pl.Add(f.Num(), w); err != nil {
		t.Fatal(err)
	}
	return f, w, cli
}

// waitBytes waits until f's socket has bytes to read: on a loaded machine
// loopback delivery may finish after the peer's write returned.
func waitBytes(t *testing.T, f *FD) {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(f.Num()), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 10_000)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			t.Fatalf("no bytes within 10 s (%v)", err)
		}
		return
	}
}

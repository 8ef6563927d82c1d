//go:build linux

package mqttd

import (
	"bufio"
	"errors"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"mqttd/auth"
	"mqttd/packets"
	"mqttd/session"
)

// TestLargeFrameBufferedInStep checks that a frame arriving in many reads is
// appended to, not copied whole at every read: buffering a 1 MiB frame must
// allocate a small multiple of its size, not one copy per 16 KiB read.
func TestLargeFrameBufferedInStep(t *testing.T) {
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := &conn{srv: s, ev: &eventConn{}, version: 4}
	const size = 1 << 20
	frame := make([]byte, size)
	rem := size - 4
	frame[0] = 0x30 // PUBLISH, QoS 0
	frame[1], frame[2], frame[3] = byte(rem&0x7f|0x80), byte(rem>>7&0x7f|0x80), byte(rem>>14)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for off := 0; off+eventReadBufSize < size; off += eventReadBufSize {
		if _, err := c.consume(frame[off:off+eventReadBufSize], nil); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4*size {
		t.Errorf("buffering one %d-byte frame allocated %d bytes (%.1fx)", size, alloc, float64(alloc)/size)
	}
}

// Unit tests of the poller's reader state machine (conn_read_linux.go):
// rstate, wakeReader, the reader pool, readEvents and finishEvent. State
// transitions are forced by direct calls on a conn built on a real
// loopback socket, with the reader pool replaced by a channel where the
// test sees every reader wakeReader starts. A conn that closes its socket
// needs a serving Server (Serve opens the poller it unregisters from),
// though the test's conn is not registered with it.

// queued returns the bytes waiting in the socket's receive queue.
func queued(ev *eventConn) int {
	if !ev.Acquire() {
		return -1
	}
	defer ev.Release()
	n, err := unix.IoctlGetInt(ev.Num(), unix.SIOCINQ)
	if err != nil {
		return -1
	}
	return n
}

// awaitQueued polls until at least n bytes wait in the socket's receive
// queue, for at most 10 s. It reports instead of failing the test, for
// callers that must not stop the goroutine they run on.
func awaitQueued(ev *eventConn, n int) error {
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for queued(ev) < n {
		select {
		case <-deadline:
			return errors.New("timed out waiting for the bytes to reach the socket")
		case <-tick.C:
		}
	}
	return nil
}

// testReaderPool replaces s's reader pool with one that has n parked
// readers, whose channel has room for n: a reader wakeReader starts is
// handed to the channel, where the test sees it, and no goroutine runs it.
func testReaderPool(s *Server, n int) chan *conn {
	ch := make(chan *conn, n)
	s.readers = &readerPool{srv: s, max: minReaders, parked: parked{ch: ch, maxIdle: maxParkedReaders, goroutines: n, idle: n}}
	return ch
}

// TestReaderWakeStartsOneReader checks that wakeReader, called at once by
// many goroutines (the poller, closes from elsewhere), starts exactly one
// reader for an idle connection and records the other wakes as
// readerAgain for it: two readers of one connection would race on its
// partial frame, its session's inbound state and its cleanup. It is
// repeated from idle many times, each time with the wakes released
// together, so that they contend for the idle-to-running transition.
func TestReaderWakeStartsOneReader(t *testing.T) {
	s := newTestServer(t, Options{})
	started := testReaderPool(s, 64)
	c := &conn{srv: s}
	const rounds, wakers = 2000, 8
	for round := range rounds {
		c.rstate.Store(readerIdle) // the last reader finished
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range wakers {
			wg.Go(func() {
				<-start
				c.wakeReader()
			})
		}
		close(start)
		wg.Wait()
		if n := len(started); n != 1 {
			t.Fatalf("round %d: %d concurrent wakes started %d readers, want 1", round, wakers, n)
		}
		<-started
		s.readers.mu.Lock()
		s.readers.idle++ // the test, the reader it was handed, parks again
		s.readers.mu.Unlock()
		if got := c.rstate.Load(); got != readerAgain {
			t.Fatalf("round %d: rstate = %d, want readerAgain (%d): the running reader must read again", round, got, readerAgain)
		}
	}
}

// TestReaderDoneNeverRestarts checks that a finished connection
// (readerDone) starts no reader however often it is woken: its cleanup
// has run and its descriptor may already belong to another connection.
func TestReaderDoneNeverRestarts(t *testing.T) {
	s := newTestServer(t, Options{})
	started := testReaderPool(s, 1024) // room for every wake: none may start a real reader
	c := &conn{srv: s}
	c.rstate.Store(readerDone)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				c.wakeReader()
			}
		})
	}
	wg.Wait()
	if n := len(started); n != 0 {
		t.Errorf("a finished connection started %d readers", n)
	}
	if got := c.rstate.Load(); got != readerDone {
		t.Errorf("rstate = %d, want readerDone (%d)", got, readerDone)
	}
}

// hookAuth runs hook when asked about a CONNECT: on the reader, after
// the read that brought the CONNECT and before the reader goes idle.
type hookAuth struct{ hook func() }

func (h *hookAuth) Authenticate(auth.ClientInfo, []byte) error {
	h.hook()
	return nil
}

// TestReaderWakeWhileRunningReadsAgain checks that no wakeup is lost: bytes
// that arrive while the reader runs, after its last read, raise a wake
// (the edge-triggered poller reports them once) that must make the reader
// read again before it goes idle; otherwise they would sit unread until
// the client sends more. The reader handles a CONNECT; while it checks
// the credentials the client sends a PINGREQ and the poller's wake is
// delivered.
func TestReaderWakeWhileRunningReadsAgain(t *testing.T) {
	var started chan *conn
	h := &hookAuth{}
	s, _ := startTestServer(t, Options{Authenticator: h}, func(s *Server) { started = testReaderPool(s, 8) })
	srvEnd, cliEnd := tcpPair(t)
	c := newConn(s, srvEnd, "test")
	c.ev = eventConnFor(t, srvEnd)
	trackConn(t, s, c)

	writePacket(t, cliEnd, &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311,
		CleanStart: true, ClientID: "again"}, packets.V311)
	if err := awaitQueued(c.ev, 1); err != nil {
		t.Fatal(err)
	}
	var hookErr error
	woken := false
	h.hook = func() { // on the reader, after its read of the CONNECT
		if _, hookErr = cliEnd.Write([]byte{0xC0, 0}); hookErr != nil { // PINGREQ
			return
		}
		if hookErr = awaitQueued(c.ev, 2); hookErr != nil {
			return
		}
		c.wakeReader() // what the poller does for the new bytes
		woken = true
	}
	c.rstate.Store(readerRunning) // as wakeReader does before handing c to a reader
	c.readEvents()
	if hookErr != nil || !woken {
		t.Fatalf("the PINGREQ was not sent while the reader ran: %v", hookErr)
	}
	if n := queued(c.ev); n != 0 {
		t.Errorf("the reader went idle with %d bytes unread: the wake while it ran was lost", n)
	}
	if got := c.rstate.Load(); got != readerIdle {
		t.Errorf("rstate = %d after the reader returned, want readerIdle (%d)", got, readerIdle)
	}
	if n := len(started); n != 0 {
		t.Errorf("a wake while the reader ran started %d more readers", n)
	}
	if got := readFull(t, cliEnd, 6); string(got) != "\x20\x02\x00\x00\xd0\x00" {
		t.Errorf("client got % x, want CONNACK then PINGRESP", got)
	}
}

// TestReaderFinishEventOnce checks that finishEvent ends a connection
// once, even when called repeatedly and concurrently: the socket is
// closed, one close reason is counted, the cleanup (will, untrack) runs
// once, and the connection is left readerDone with no new reader started
// by the close's own wake.
func TestReaderFinishEventOnce(t *testing.T) {
	var started chan *conn
	s, _ := startTestServer(t, Options{}, func(s *Server) { started = testReaderPool(s, 8) })
	srvEnd, cliEnd := tcpPair(t)
	c := newConn(s, srvEnd, "test")
	c.ev = eventConnFor(t, srvEnd)
	c.will = &session.Message{Topic: "will/finish", Payload: []byte("gone")}
	// A will belongs to a session: only an accepted CONNECT leaves one.
	c.cl = &client{id: "finish", sess: session.New(s.sessLim), conn: c, clean: true}
	s.mu.Lock()
	s.clients.Put(c.cl)
	s.mu.Unlock()
	trackConn(t, s, c)
	c.rstate.Store(readerRunning) // finishEvent runs on the reader
	reasons := []error{errClosedByPeer, errKeepAlive, errTakenOver, errShutdown}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			<-start
			c.finishEvent(reasons[i%len(reasons)])
		})
	}
	close(start)
	wg.Wait()
	st := s.Stats()
	if st.WillsPublished != 1 {
		t.Errorf("will published %d times, want once", st.WillsPublished)
	}
	if st.Connections != 0 {
		t.Errorf("Connections = %d, want 0: untracked %d times", st.Connections, 1-st.Connections)
	}
	total := uint64(0)
	for _, n := range st.Disconnects {
		total += n
	}
	if total != 1 {
		t.Errorf("%d close reasons counted, want 1: %v", total, st.Disconnects)
	}
	if got := c.rstate.Load(); got != readerDone {
		t.Errorf("rstate = %d, want readerDone (%d)", got, readerDone)
	}
	if n := len(started); n != 0 {
		t.Errorf("finishing the connection started %d readers", n)
	}
	if got := readToEOF(t, cliEnd); len(got) != 0 {
		t.Errorf("client got % x, want the connection closed", got)
	}
}

// TestReaderConcurrentWakes runs a serving Server's reader while other
// goroutines keep waking it and the client sends 500 PINGREQs a byte at a
// time, so that frames are split across reads and wakes come both while a
// reader runs and while none does. Every PINGREQ must be answered (a
// lost wakeup leaves the last bytes unread), and the connection must end
// up idle and alive; under -race, two readers of the connection at once
// would be reported (they share its partial frame).
func TestReaderConcurrentWakes(t *testing.T) {
	s, addr := startTestServer(t, Options{}, nil)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	writePacket(t, nc, &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311,
		CleanStart: true, ClientID: "wakes"}, packets.V311)
	if p := readPacket(t, nc, br, packets.V311); p.Type() != packets.TypeConnack {
		t.Fatalf("got %v, want CONNACK", p.Type())
	}
	c := onlyConn(t, s)

	stop := make(chan struct{})
	var wakers sync.WaitGroup
	for range 4 {
		wakers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					c.wakeReader()
				}
			}
		})
	}
	const pings = 500
	sent := make(chan error, 1)
	go func() {
		for range pings {
			for _, b := range []byte{0xC0, 0x00} {
				if _, err := nc.Write([]byte{b}); err != nil {
					sent <- err
					return
				}
			}
		}
		sent <- nil
	}()
	for i := range pings {
		if p := readPacket(t, nc, br, packets.V311); p.Type() != packets.TypePingresp {
			close(stop)
			wakers.Wait()
			t.Fatalf("answer %d: got %v, want PINGRESP", i, p.Type())
		}
	}
	close(stop)
	wakers.Wait()
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the reader to go idle", func() bool { return c.rstate.Load() == readerIdle })
	writePacket(t, nc, &packets.Pingreq{}, packets.V311)
	if p := readPacket(t, nc, br, packets.V311); p.Type() != packets.TypePingresp {
		t.Fatalf("got %v, want PINGRESP", p.Type())
	}
}

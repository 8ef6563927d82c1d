//go:build linux

package mqttd

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"mqttd/auth"
	"mqttd/packets"
)

// holdAuth keeps the reader of a client whose identifier starts with
// "hold" in Authenticate until release is closed, telling held first.
type holdAuth struct {
	held    chan string
	release chan struct{}
}

func (h *holdAuth) Authenticate(ci auth.ClientInfo, _ []byte) error {
	if strings.HasPrefix(ci.ClientID, "hold") {
		h.held <- ci.ClientID
		<-h.release
	}
	return nil
}

// holdAuthz keeps the reader of a PUBLISH to a topic under hold/ in
// Authorize, which is expected to answer from memory and so runs within
// the bound on readers, until release is closed, telling held first.
type holdAuthz struct {
	held    chan string
	release chan struct{}
}

func (h *holdAuthz) Authorize(ci auth.ClientInfo, r auth.Request) bool {
	if r.Action == auth.Publish && strings.HasPrefix(r.Topic, "hold/") {
		h.held <- ci.ClientID
		<-h.release
	}
	return true
}

// boundTestConn dials addr and sends a 3.1.1 CONNECT for id.
func boundTestConn(t *testing.T, addr, id string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	writePacket(t, nc, &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, CleanStart: true, ClientID: id}, packets.V311)
	return nc
}

// expectConnack reads a CONNACK 0 from each connection.
func expectConnack(t *testing.T, ncs ...net.Conn) {
	t.Helper()
	for _, nc := range ncs {
		if got := readFull(t, nc, 4); string(got) != "\x20\x02\x00\x00" {
			t.Errorf("client got % x, want CONNACK 0", got)
		}
	}
}

// awaitHeld waits for n readers to report that they are held.
func awaitHeld(t *testing.T, held <-chan string, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for range n {
		select {
		case <-held:
		case <-deadline:
			t.Fatalf("fewer than %d readers were held", n)
		}
	}
}

// poolState is p's reader goroutines and the connections waiting for one.
func poolState(p *readerPool) (readers, waiting int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.goroutines, len(p.waiting) - p.head
}

// holdTwoReaders connects three clients to a server whose readers are
// bounded to two, holds two readers in the Authorizer with a PUBLISH each,
// and sends a PINGREQ on the third connection, which must wait for a
// reader; it returns that connection.
func holdTwoReaders(t *testing.T, s *Server, addr string, h *holdAuthz) net.Conn {
	t.Helper()
	a, b, free := boundTestConn(t, addr, "a"), boundTestConn(t, addr, "b"), boundTestConn(t, addr, "free")
	expectConnack(t, a, b, free)
	for _, nc := range []net.Conn{a, b} {
		writePacket(t, nc, &packets.Publish{Topic: "hold/x", Payload: []byte("p")}, packets.V311)
	}
	awaitHeld(t, h.held, 2)
	// A CONNECT may have waited already, and a reader that took one over
	// the bound while another authenticated may not have ended yet.
	waits := s.Stats().ReaderWaits
	if _, err := free.Write([]byte{0xC0, 0}); err != nil { // PINGREQ
		t.Fatal(err)
	}
	waitUntil(t, "the third connection to wait for one of two readers", func() bool {
		readers, waiting := poolState(s.readers)
		return s.Stats().ReaderWaits == waits+1 && readers == 2 && waiting == 1
	})
	return free
}

// TestReaderPoolBound checks that no more than the pool's bound of reader
// goroutines run at once: with both readers of a bound of two busy (held
// in the Authorizer), a third connection's PINGREQ waits, is counted in
// ReaderWaits, and is answered by the first reader that is let go.
func TestReaderPoolBound(t *testing.T) {
	h := &holdAuthz{held: make(chan string, 2), release: make(chan struct{})}
	s, addr := startTestServer(t, Options{Authorizer: h}, func(s *Server) { s.readers.max = 2 })
	released := false
	defer func() {
		if !released {
			close(h.release)
		}
	}()
	free := holdTwoReaders(t, s, addr, h)
	close(h.release)
	released = true
	if got := readFull(t, free, 2); string(got) != "\xd0\x00" {
		t.Errorf("client got % x, want PINGRESP", got)
	}
	if readers, waiting := poolState(s.readers); readers > 2 || waiting != 0 {
		t.Errorf("%d readers with %d connections waiting after all were answered, want at most 2 and none", readers, waiting)
	}
}

// TestReaderPoolAuthOutsideBound checks that a reader held in an
// Authenticator, which may block as long as it likes (a lookup, the
// password file's delay after a failure), does not count against the
// bound: with the bound at one and two CONNECTs held, a connected
// client's PINGREQ is still answered, and the readers are back within
// the bound once the CONNECTs are.
func TestReaderPoolAuthOutsideBound(t *testing.T) {
	h := &holdAuth{held: make(chan string, 2), release: make(chan struct{})}
	s, addr := startTestServer(t, Options{Authenticator: h}, func(s *Server) { s.readers.max = 1 })
	released := false
	defer func() {
		if !released {
			close(h.release)
		}
	}()
	free := boundTestConn(t, addr, "free")
	expectConnack(t, free)
	held := []net.Conn{boundTestConn(t, addr, "hold1"), boundTestConn(t, addr, "hold2")}
	awaitHeld(t, h.held, 2)
	if _, err := free.Write([]byte{0xC0, 0}); err != nil { // PINGREQ
		t.Fatal(err)
	}
	if got := readFull(t, free, 2); string(got) != "\xd0\x00" {
		t.Errorf("client got % x while two CONNECTs were held, want PINGRESP", got)
	}
	close(h.release)
	released = true
	expectConnack(t, held...)
	waitUntil(t, "the readers to be back within the bound", func() bool {
		readers, waiting := poolState(s.readers)
		return readers <= 1 && waiting == 0
	})
}

// TestReaderPoolShutdownServesWaiting checks that Shutdown finishes while
// connections wait for a reader: the readers serve them before they end.
func TestReaderPoolShutdownServesWaiting(t *testing.T) {
	h := &holdAuthz{held: make(chan string, 2), release: make(chan struct{})}
	s, addr, served := launchTestServer(t, Options{Authorizer: h}, func(s *Server) { s.readers.max = 2 })
	released := false
	defer func() {
		if !released {
			close(h.release)
		}
	}()
	free := holdTwoReaders(t, s, addr, h)
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	close(h.release)
	released = true
	select {
	case err := <-shut:
		if err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Shutdown did not return with a connection waiting for a reader")
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve returned %v", err)
	}
	// Shutdown closes every connection while the released readers serve
	// the one waiting, so the close may come before its PINGREQ is read:
	// the kernel then answers with a reset instead of an EOF. Either ends
	// it; a PINGRESP, when one came first, must be whole.
	free.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(free)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reading until the broker closed: %v", err)
	}
	if len(got) != 0 && string(got) != "\xd0\x00" {
		t.Errorf("client got % x before the close, want nothing or a PINGRESP", got)
	}
}

// TestReaderPoolWaitingOrder checks that connections past the bound are
// served in the order they became readable, through pops and pushes that
// move the queue down in its slice, and that ReaderWaits counts each.
func TestReaderPoolWaitingOrder(t *testing.T) {
	s := newTestServer(t, Options{})
	p := &readerPool{srv: s, parked: parked{ch: make(chan *conn, maxParkedReaders), maxIdle: maxParkedReaders}} // max 0: every run waits
	var want []*conn
	pushed := 0
	for round := range 50 {
		for range 1 + round%7 {
			c := &conn{}
			p.run(c)
			want = append(want, c)
			pushed++
		}
		for range round % 5 {
			if len(want) == 0 {
				break
			}
			p.mu.Lock()
			got := p.popLocked()
			p.mu.Unlock()
			if got != want[0] {
				t.Fatalf("round %d: popped %p, want %p, the oldest waiting", round, got, want[0])
			}
			want = want[1:]
		}
	}
	for _, w := range want {
		p.mu.Lock()
		got := p.popLocked()
		p.mu.Unlock()
		if got != w {
			t.Fatalf("popped %p, want %p", got, w)
		}
	}
	p.mu.Lock()
	rest := p.popLocked()
	p.mu.Unlock()
	if rest != nil {
		t.Errorf("popped %p from an empty queue", rest)
	}
	if got := s.Stats().ReaderWaits; got != uint64(pushed) {
		t.Errorf("ReaderWaits = %d, want %d", got, pushed)
	}
}

// TestReaderPoolWakeAfterClose checks that a wakeup after the pool is
// closed (a connection's last close during Shutdown) gets a reader when
// the readers parked at the close still fill the bound: they end soon
// after, and none of them would serve a connection queued meanwhile.
func TestReaderPoolWakeAfterClose(t *testing.T) {
	s, _ := startTestServer(t, Options{}, nil)
	srvEnd, _ := tcpPair(t)
	c := newConn(s, srvEnd, "test")
	c.ev = eventConnFor(t, srvEnd)
	trackConn(t, s, c)
	// One reader, parked, is the whole bound; after close it is counted
	// until its goroutine (here none) takes the nil close sent it.
	p := &readerPool{srv: s, max: 1, parked: parked{ch: make(chan *conn, 1), maxIdle: maxParkedReaders, goroutines: 1, idle: 1}}
	s.readers = p
	p.close()
	c.wakeReader()
	waitUntil(t, "a reader to serve the connection woken after the close", func() bool {
		readers, waiting := poolState(p)
		return c.rstate.Load() == readerIdle && readers == 1 && waiting == 0
	})
}

// idleReaders is p's parked readers not yet handed a connection.
func idleReaders(p *readerPool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.idle
}

// TestReaderPoolHandsToParkedReader checks that a reader parked in the
// pool is given the next connection to read instead of a new goroutine
// being started, which would grow its stack through the handlers again,
// and that a parked reader ends when the server closes.
func TestReaderPoolHandsToParkedReader(t *testing.T) {
	srvEnd, _ := tcpPair(t)
	ev := eventConnFor(t, srvEnd) // harmless to read if run starts a goroutine after all
	synctest.Test(t, func(t *testing.T) {
		p := &readerPool{max: minReaders, parked: parked{ch: make(chan *conn), maxIdle: maxParkedReaders, goroutines: 1}} // as if run had started this goroutine
		got := make(chan *conn, 2)
		go func() { got <- p.next() }()
		synctest.Wait() // parked in next
		if n := idleReaders(p); n != 1 {
			t.Errorf("%d readers parked, want 1", n)
		}
		c := &conn{ev: ev}
		c.rstate.Store(readerRunning)
		p.run(c)
		synctest.Wait()
		select {
		case g := <-got:
			if g != c {
				t.Errorf("the parked reader got %p, want %p", g, c)
			}
		default:
			t.Error("run started a goroutine instead of handing the connection to the parked reader")
		}
		if p.goroutines != 1 {
			t.Errorf("%d reader goroutines counted, want 1", p.goroutines)
		}
		go func() { got <- p.next() }()
		synctest.Wait()
		p.close()
		synctest.Wait()
		if g := <-got; g != nil {
			t.Errorf("the parked reader got %p when the server closed, want nil", g)
		}
		if p.goroutines != 0 || idleReaders(p) != 0 {
			t.Errorf("%d readers (%d parked) after the server closed, want none", p.goroutines, idleReaders(p))
		}
	})
}

// TestReaderPoolParkLimit checks that at most maxParkedReaders goroutines
// stay parked between wakeups (each holds a grown stack): a reader done
// with its connection when that many are parked ends instead, and the
// parked ones end when the server closes.
func TestReaderPoolParkLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &readerPool{max: minReaders, parked: parked{ch: make(chan *conn), maxIdle: maxParkedReaders, goroutines: maxParkedReaders + 1}}
		results := make(chan *conn, maxParkedReaders)
		var wg sync.WaitGroup
		for range maxParkedReaders {
			wg.Go(func() { results <- p.next() })
		}
		synctest.Wait()
		if n := idleReaders(p); n != maxParkedReaders {
			t.Fatalf("%d readers parked, want %d", n, maxParkedReaders)
		}
		if c := p.next(); c != nil { // would block forever (a deadlock here) if it parked
			t.Errorf("next with %d parked returned %p, want nil", maxParkedReaders, c)
		}
		if n := idleReaders(p); n != maxParkedReaders {
			t.Errorf("%d readers parked after one was turned away, want %d", n, maxParkedReaders)
		}
		p.close()
		wg.Wait()
		close(results)
		for c := range results {
			if c != nil {
				t.Errorf("a parked reader got %p after the server closed", c)
			}
		}
		if p.goroutines != 0 || idleReaders(p) != 0 {
			t.Errorf("%d readers (%d parked) after the server closed, want none", p.goroutines, idleReaders(p))
		}
	})
}

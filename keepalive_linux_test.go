//go:build linux

package mqttd

import (
	"bufio"
	"context"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/sys/unix"

	"mqttd/packets"
)

// TestDeadPeerProbe checks that a client asking for no keepalive gets TCP
// keepalive probes on its socket, so that one that loses power without a
// FIN is eventually closed, and that a client with a keepalive gets none
// (the idle wheel closes it instead, without the setsockopt calls).
func TestDeadPeerProbe(t *testing.T) {
	s := newTestServer(t, Options{})
	// As Server.Listen opens it: Go's default turns TCP keepalive on for
	// every accepted connection.
	l, err := (&net.ListenConfig{KeepAlive: -1}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddListener("test", l); err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	for _, keepAlive := range []uint16{0, 60} {
		nc, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		b, _ := (&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, CleanStart: true,
			ClientID: "probe", KeepAlive: keepAlive}).Append(nil, packets.V311)
		nc.Write(b)
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Read(make([]byte, 4)); err != nil {
			t.Fatal(err)
		}
		var server *conn
		s.mu.Lock()
		for _, c := range s.conns {
			if c.info.Remote.String() == nc.LocalAddr().String() {
				server = c
			}
		}
		s.mu.Unlock()
		if server == nil {
			t.Fatal("the server side of the connection not found")
		}
		if server.ev == nil || !server.ev.Acquire() {
			t.Fatal("the server side of the connection is not served by the poller")
		}
		fd := server.ev.Num()
		on, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE)
		idle, _ := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
		server.ev.Release()
		switch {
		case keepAlive == 0 && (on != 1 || idle != int(deadPeerProbe.Idle/time.Second)):
			t.Errorf("keepalive 0: SO_KEEPALIVE %d, TCP_KEEPIDLE %d s; want 1, %d", on, idle, deadPeerProbe.Idle/time.Second)
		case keepAlive != 0 && on != 0:
			t.Errorf("keepalive %d: SO_KEEPALIVE is on", keepAlive)
		}
	}
}

// Unit tests of the idle wheel (keepalive_linux.go). Most drive a wheel that
// was never started, sweeping it with advance at times the test chooses,
// and record timeouts instead of closing connections; the last ones run
// the wheel's own goroutine in a synctest bubble, and the real timeout on
// a real connection.

// idleBase is an arbitrary time, 37 ms into a tick, that the tests count
// from.
const idleBase = int64(1_900_000_000)*int64(time.Second) + int64(37*time.Millisecond)

// testWheel is a wheel swept only by the test, whose timeouts are recorded
// instead of closing the connection.
type testWheel struct {
	*idleWheel
	s       *Server
	expired chan *conn
}

// advanceTo sweeps the wheel up to now and returns the connections whose
// timeout it started, once those have run.
func (w *testWheel) advanceTo(now int64) []*conn {
	w.advance(now)
	w.s.writers.Wait()
	var got []*conn
	for {
		select {
		case c := <-w.expired:
			got = append(got, c)
		default:
			return got
		}
	}
}

// filed counts the entries the wheel holds for c.
func (w *testWheel) filed(c *conn) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, slot := range w.slots {
		for _, e := range slot {
			if e.c == c {
				n++
			}
		}
	}
	return n
}

// newTestWheel returns a wheel that has swept every tick up to start.
// Timeouts run, as in production, on goroutines counted in s.writers.
func newTestWheel(t *testing.T, s *Server, start int64) *testWheel {
	t.Helper()
	w := &testWheel{
		idleWheel: makeIdleWheel(func() int64 { return start }),
		s:         s,
		expired:   make(chan *conn, 64),
	}
	w.expire = func(c *conn) { w.expired <- c }
	return w
}

// idleConn returns a connection that last read at lastRead and may stay
// silent for limit.
func idleConn(s *Server, lastRead int64, limit time.Duration) *conn {
	c := &conn{srv: s}
	c.lastRead.Store(lastRead)
	c.setIdleLimit(limit)
	return c
}

// TestIdleWheelExpiresAtDeadline checks that a connection times out once
// its deadline (lastRead + idle limit) has passed, never before, and at
// the latest one tick after it; and that it is timed out once. The wheel
// is swept every 10 ms of the test's clock, from the last read to well
// past the deadline.
func TestIdleWheelExpiresAtDeadline(t *testing.T) {
	s := newTestServer(t, Options{})
	const step = 10 * time.Millisecond
	for _, limit := range []time.Duration{time.Nanosecond, 100 * time.Millisecond, idleTick,
		time.Second, 10*time.Second + 7*time.Millisecond, 90 * time.Second} {
		w := newTestWheel(t, s, idleBase)
		c := idleConn(s, idleBase, limit)
		w.watch(c)
		deadline := idleBase + int64(limit)
		fired := int64(0)
		for now := idleBase; now < deadline+int64(3*idleTick); now += int64(step) {
			got := w.advanceTo(now)
			if len(got) == 0 {
				continue
			}
			if len(got) > 1 || got[0] != c || fired != 0 {
				t.Fatalf("limit %v: timed out %d connections at %v, again after %v", limit, len(got), time.Duration(now-idleBase), time.Duration(fired-idleBase))
			}
			fired = now
		}
		switch {
		case fired == 0:
			t.Errorf("limit %v: no timeout within %v of the deadline", limit, 3*idleTick)
		case fired < deadline:
			t.Errorf("limit %v: timed out %v before the deadline", limit, time.Duration(deadline-fired))
		case fired >= deadline+int64(idleTick+step):
			t.Errorf("limit %v: timed out %v after the deadline, more than a tick", limit, time.Duration(fired-deadline))
		}
		if n := w.filed(c); n != 0 {
			t.Errorf("limit %v: %d entries left after the timeout", limit, n)
		}
	}
}

// TestIdleWheelTrafficMovesDeadline checks that bytes read (a later
// lastRead, which is all traffic costs) move the deadline: at the old
// deadline the connection is filed again for the new one instead of being
// timed out, and it times out after the new one.
func TestIdleWheelTrafficMovesDeadline(t *testing.T) {
	s := newTestServer(t, Options{})
	w := newTestWheel(t, s, idleBase)
	const limit = time.Second
	c := idleConn(s, idleBase, limit)
	w.watch(c)
	if got := w.advanceTo(idleBase + int64(900*time.Millisecond)); len(got) != 0 {
		t.Fatal("timed out before the deadline")
	}
	traffic := idleBase + int64(900*time.Millisecond)
	c.lastRead.Store(traffic)
	if got := w.advanceTo(idleBase + int64(limit+2*idleTick)); len(got) != 0 {
		t.Fatal("timed out at the old deadline despite traffic")
	}
	if want := tickOf(traffic+int64(limit)) + 1; c.filedTick.Load() != want || w.filed(c) != 1 {
		t.Errorf("filed under tick %d (%d entries); want one entry under %d", c.filedTick.Load(), w.filed(c), want)
	}
	newDeadline := traffic + int64(limit)
	if got := w.advanceTo(newDeadline - 1); len(got) != 0 {
		t.Fatal("timed out before the new deadline")
	}
	if got := w.advanceTo(newDeadline + int64(idleTick)); len(got) != 1 || got[0] != c {
		t.Fatalf("%d timeouts a tick after the new deadline, want 1", len(got))
	}
}

// TestIdleWheelZeroLimit checks that a limit of 0 (keepalive 0) never
// times out: such a connection is not filed, and one filed under an
// earlier limit (the connect timeout) has that entry dropped, not fired,
// once it is watched again with 0.
func TestIdleWheelZeroLimit(t *testing.T) {
	s := newTestServer(t, Options{})
	w := newTestWheel(t, s, idleBase)
	never := idleConn(s, idleBase, 0)
	w.watch(never)
	if n := w.filed(never); n != 0 || never.filedTick.Load() != 0 {
		t.Errorf("a connection with no limit is filed (%d entries, tick %d)", n, never.filedTick.Load())
	}
	c := idleConn(s, idleBase, time.Second)
	w.watch(c)
	c.setIdleLimit(0) // as watchIdle(0) after a CONNECT with keepalive 0
	w.watch(c)
	for now := idleBase; now < idleBase+2*idleSlots*int64(idleTick); now += int64(idleTick) {
		if got := w.advanceTo(now); len(got) != 0 {
			t.Fatalf("a connection with no limit timed out after %v", time.Duration(now-idleBase))
		}
	}
	if n := w.filed(c); n != 0 {
		t.Errorf("the entry for the old limit was kept: %d entries", n)
	}
}

// TestIdleWheelLapAhead checks deadlines a lap (512 ticks, 128 s) or more
// ahead: their slot comes round before the deadline, and the entry must
// be kept there, not fired early nor lost, until the lap of its deadline.
func TestIdleWheelLapAhead(t *testing.T) {
	s := newTestServer(t, Options{})
	for _, ticks := range []int64{idleSlots - 1, idleSlots, idleSlots + 1, 2*idleSlots + 76} {
		limit := time.Duration(ticks)*idleTick + 100*time.Millisecond
		w := newTestWheel(t, s, idleBase)
		c := idleConn(s, idleBase, limit)
		w.watch(c)
		deadline := idleBase + int64(limit)
		fired := false
		for now := idleBase + int64(idleTick); now < deadline+int64(2*idleTick); now += int64(idleTick) {
			got := w.advanceTo(now)
			if now < deadline {
				if len(got) != 0 {
					t.Fatalf("limit %v: timed out %v early", limit, time.Duration(deadline-now))
				}
				if n := w.filed(c); n != 1 {
					t.Fatalf("limit %v: %d entries after %v, want the one kept", limit, n, time.Duration(now-idleBase))
				}
				continue
			}
			if len(got) > 0 {
				if fired || len(got) != 1 {
					t.Fatalf("limit %v: timed out more than once", limit)
				}
				fired = true
			}
		}
		if !fired {
			t.Errorf("limit %v: no timeout within two ticks of the deadline", limit)
		}
	}
}

// TestIdleWheelDropsDeadEntries checks that the sweep drops, without a
// timeout, the entry of a finished connection, that forget takes it out
// at once (so the wheel does not keep a closed connection, and what it
// points to, alive for up to a lap), and that a later watch replaces the
// entry rather than adding one (which would time the connection out
// twice, or at its old deadline).
func TestIdleWheelDropsDeadEntries(t *testing.T) {
	s := newTestServer(t, Options{})

	t.Run("finished", func(t *testing.T) {
		w := newTestWheel(t, s, idleBase)
		c := idleConn(s, idleBase, time.Second)
		w.watch(c)
		c.rstate.Store(readerDone)
		if got := w.advanceTo(idleBase + int64(2*time.Second)); len(got) != 0 {
			t.Error("a finished connection was timed out")
		}
		if n := w.filed(c); n != 0 {
			t.Errorf("a finished connection kept %d entries", n)
		}
	})

	t.Run("forgotten", func(t *testing.T) {
		w := newTestWheel(t, s, idleBase)
		conns := make([]*conn, 5)
		for i := range conns {
			conns[i] = idleConn(s, idleBase, time.Second) // all in one slot
			w.watch(conns[i])
		}
		w.forget(conns[1])
		w.forget(conns[1])
		for i, c := range conns {
			want := 1
			if i == 1 {
				want = 0
			}
			if n := w.filed(c); n != want {
				t.Errorf("connection %d: %d entries after forgetting connection 1, want %d", i, n, want)
			}
		}
		w.forget(conns[4]) // moved into connection 1's place: its place was kept
		if n := w.filed(conns[4]); n != 0 {
			t.Errorf("a moved entry was not forgotten: %d left", n)
		}
		if got := w.advanceTo(idleBase + int64(2*time.Second)); len(got) != 3 {
			t.Errorf("%d timeouts, want the 3 not forgotten", len(got))
		}
	})

	t.Run("superseded", func(t *testing.T) {
		w := newTestWheel(t, s, idleBase)
		c := idleConn(s, idleBase, time.Second)
		w.watch(c)
		c.lastRead.Store(idleBase + int64(5*time.Second))
		w.watch(c) // a new limit counted from later replaces the entry
		if n := w.filed(c); n != 1 {
			t.Fatalf("%d entries, want 1", n)
		}
		if got := w.advanceTo(idleBase + int64(2*time.Second)); len(got) != 0 {
			t.Error("timed out at the old deadline")
		}
		if n := w.filed(c); n != 1 {
			t.Errorf("%d entries after the old deadline's tick, want 1", n)
		}
		if got := w.advanceTo(idleBase + int64(7*time.Second)); len(got) != 1 {
			t.Errorf("%d timeouts at the current deadline, want 1", len(got))
		}
	})
}

// TestIdleWheelTimeoutOffSweep checks that a timeout runs on a goroutine
// of its own, counted in Server.writers (Shutdown waits for it): telling a
// 5.0 client why may wait up to a second for its outbox, which must hold
// up neither the sweep nor the other connections timing out in the same
// tick.
func TestIdleWheelTimeoutOffSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, Options{})
		w := makeIdleWheel(func() int64 { return idleBase })
		entered := make(chan *conn, 2)
		release := make(chan struct{})
		defer closeOnce(release) // a failed test must not leave them blocked
		w.expire = func(c *conn) {
			entered <- c
			<-release
		}
		a, b := idleConn(s, idleBase, time.Second), idleConn(s, idleBase, time.Second)
		w.watch(a)
		w.watch(b)
		w.advance(idleBase + int64(2*time.Second)) // returns with both timeouts blocked
		synctest.Wait()
		if n := len(entered); n != 2 {
			t.Fatalf("%d timeouts started, want both: one blocked timeout held up the other", n)
		}
		waited := make(chan struct{})
		go func() {
			s.writers.Wait()
			close(waited)
		}()
		synctest.Wait()
		if isClosed(waited) {
			t.Error("Server.writers does not count the timeouts in progress")
		}
		closeOnce(release)
		<-waited
	})
}

// TestIdleWheelStart checks the wheel's own goroutine, in a synctest bubble
// whose clock moves only when everything waits: the server's wheel
// (newIdleWheel) starts none until start, which Serve calls, not even on a
// watch, so that New starts nothing; once started it sweeps every tick on
// its clock, the wall clock, so a connection times out after its deadline
// and not before; and close stops the goroutine, or, never started, returns at once and keeps
// it from starting.
func TestIdleWheelStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, Options{})
		expired := make(chan *conn, 4)
		record := func(c *conn) { expired <- c }

		w := newIdleWheel()
		w.expire = record
		if w.running() {
			t.Fatal("newIdleWheel started a goroutine")
		}
		w.close() // never started: returns at once
		w.start() // closed: starts nothing
		c := idleConn(s, time.Now().UnixNano(), time.Second)
		w.watch(c)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if w.running() || len(expired) != 0 {
			t.Fatal("a closed wheel was started")
		}

		w = newIdleWheel()
		defer w.close()
		w.expire = record
		c = idleConn(s, time.Now().UnixNano(), time.Second)
		w.watch(c)
		if w.running() {
			t.Fatal("watch started the wheel, which only start (Serve) may")
		}
		w.start()
		if !w.running() {
			t.Fatal("start did not start the wheel")
		}
		time.Sleep(time.Second - 1)
		synctest.Wait()
		s.writers.Wait()
		if len(expired) != 0 {
			t.Fatal("timed out before the deadline")
		}
		time.Sleep(idleTick + 1)
		synctest.Wait()
		s.writers.Wait()
		if len(expired) != 1 {
			t.Fatalf("%d timeouts a tick after the deadline, want 1", len(expired))
		}
		w.start() // already running: no second goroutine
		w.close()
		w.close()
		// Every goroutine of the bubble must have ended for Test to return.
	})
}

// TestIdleWheelClosesConnection checks what a timeout does to a real
// connection of a serving Server, whose wheel the test sweeps: nothing
// before the deadline; after it, a client that sent no CONNECT is closed
// (connect_timeout), and a 5.0 client past 1.5 x keepalive is told
// DISCONNECT 0x8D, then closed (keepalive); either way the connection is
// cleaned up.
func TestIdleWheelClosesConnection(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason CloseReason
		limit  time.Duration
		v5     bool
	}{
		{"connect timeout", CloseConnectTimeout, DefaultConnectTimeout, false},
		{"keepalive", CloseKeepAlive, 15 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := makeIdleWheel(wallClock)
			s, addr := startTestServer(t, Options{}, func(s *Server) {
				s.idle.close()
				s.idle = w
			})
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			br := bufio.NewReader(nc)
			if tc.v5 {
				cp := &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V5,
					CleanStart: true, KeepAlive: 10, ClientID: "idle"}
				writePacket(t, nc, cp, packets.V5)
				if p := readPacket(t, nc, br, packets.V5); p.Type() != packets.TypeConnack {
					t.Fatalf("got %v, want CONNACK", p.Type())
				}
			}
			c := onlyConn(t, s)
			waitUntil(t, "the connection filed for its limit", func() bool {
				return c.idleLimit.Load() == int64(tc.limit) && c.filedTick.Load() != 0
			})
			deadline := c.lastRead.Load() + int64(tc.limit)
			w.advance(deadline - 1)
			s.writers.Wait()
			if n := s.Stats().Disconnects[tc.reason.String()]; n != 0 || c.rstate.Load() == readerDone {
				t.Fatal("closed before the deadline")
			}
			w.advance(deadline + int64(idleTick))
			if tc.v5 {
				p := readPacket(t, nc, br, packets.V5)
				if d, ok := p.(*packets.Disconnect); !ok || d.ReasonCode != packets.KeepAliveTimeout {
					t.Errorf("got %+v, want DISCONNECT 0x8D", p)
				}
			}
			nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			if n, err := br.Read(make([]byte, 1)); n != 0 || err == nil {
				t.Fatalf("read %d bytes, %v; want the connection closed", n, err)
			}
			waitUntil(t, "the connection cleaned up", func() bool { return s.Stats().Connections == 0 })
			if n := s.Stats().Disconnects[tc.reason.String()]; n != 1 {
				t.Errorf("%s disconnects = %d, want 1", tc.reason, n)
			}
		})
	}
}

// closeOnce closes ch unless it is closed already; one goroutine at a time.
func closeOnce(ch chan struct{}) {
	if !isClosed(ch) {
		close(ch)
	}
}

// running reports whether w's goroutine was started.
func (w *idleWheel) running() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.started
}

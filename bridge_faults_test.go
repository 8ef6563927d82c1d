package mqttd_test

import (
	"bufio"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"mqttd"
	"mqttd/bridge"
	"mqttd/packets"
)

// Bad remotes: small fake brokers on loopback that log a bridge in and
// then misbehave. Whatever they do, the gateway's queue stays within its
// bound, its local clients keep being served, and nothing it acknowledged
// is lost within the bound.

// fakeRemote accepts connections, reads each one's CONNECT and hands it
// to serve, which answers it (or not) and returns to close it.
type fakeRemote struct {
	addr     string
	connects atomic.Int32 // CONNECTs read
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

// fakeConn is one connection to a fakeRemote.
type fakeConn struct {
	nc net.Conn
	br *bufio.Reader
	v  packets.Version
	n  int // 1 for the first connection
	// done is closed when the test ends.
	done <-chan struct{}
}

func (fc *fakeConn) send(p packets.Packet) error {
	b, err := p.Append(nil, fc.v)
	if err != nil {
		return err
	}
	_, err = fc.nc.Write(b)
	return err
}

// connack accepts the connection; the session is present after the
// first, as a remote keeping the bridge's session says.
func (fc *fakeConn) connack() error {
	return fc.send(&packets.Connack{SessionPresent: fc.n > 1})
}

func (fc *fakeConn) read() (packets.Packet, error) {
	return packets.ReadPacket(fc.br, fc.v, 0)
}

// startFake runs a fakeRemote until the test ends; readSize is the
// connections' read buffer.
func startFake(t *testing.T, readSize int, serve func(fc *fakeConn)) *fakeRemote {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRemote{addr: l.Addr().String()}
	done := make(chan struct{})
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, nc)
			f.mu.Unlock()
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				defer nc.Close()
				fc := &fakeConn{nc: nc, br: bufio.NewReaderSize(nc, readSize), done: done}
				nc.SetReadDeadline(time.Now().Add(10 * time.Second))
				p, err := packets.ReadPacket(fc.br, 0, 0)
				cp, ok := p.(*packets.Connect)
				if err != nil || !ok {
					return
				}
				nc.SetReadDeadline(time.Time{})
				fc.v, fc.n = cp.ProtocolVersion, int(f.connects.Add(1))
				serve(fc)
			}()
		}
	}()
	t.Cleanup(func() {
		close(done)
		l.Close()
		f.mu.Lock()
		for _, nc := range f.conns {
			nc.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

// received is a PUBLISH a fake remote read.
type received struct {
	topic, payload string
	dup            bool
	conn           int
}

// receivedLog is what a fake remote read, in order.
type receivedLog struct {
	mu   sync.Mutex
	msgs []received
}

func (r *receivedLog) add(fc *fakeConn, p *packets.Publish) {
	r.mu.Lock()
	r.msgs = append(r.msgs, received{p.Topic, string(p.Payload), p.Dup, fc.n})
	r.mu.Unlock()
}

func (r *receivedLog) all() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

// distinct counts the different messages read.
func (r *receivedLog) distinct() int {
	seen := map[received]bool{}
	for _, m := range r.all() {
		seen[received{topic: m.topic, payload: m.payload}] = true
	}
	return len(seen)
}

// checkInOrder checks that every message of want (payloads by topic)
// arrived, in order per topic, and that one arriving again carried DUP.
func checkInOrder(t *testing.T, got []received, want map[string][]string) {
	t.Helper()
	next := map[string]int{}
	for _, m := range got {
		w := want[m.topic]
		i := slices.Index(w, m.payload)
		switch {
		case i < 0:
			t.Fatalf("%s %q: not published", m.topic, m.payload)
		case i < next[m.topic] && !m.dup:
			t.Errorf("%s %q again (connection %d) without DUP", m.topic, m.payload, m.conn)
		case i > next[m.topic]:
			t.Fatalf("%s %q (connection %d) before %q", m.topic, m.payload, m.conn, w[next[m.topic]])
		case i == next[m.topic]:
			next[m.topic]++
		}
	}
	for topic, w := range want {
		if next[topic] != len(w) {
			t.Errorf("%s: %d of %d messages arrived", topic, next[topic], len(w))
		}
	}
}

// roundTrip checks that the gateway still serves its local clients: a
// QoS 1 message goes from a publisher to a subscriber there.
func roundTrip(t *testing.T, gaddr, topic string) {
	t.Helper()
	sub := collect(t, gaddr, "local-sub-"+topic, 1, topic)
	wait(t, pahoConnect(t, gaddr, "local-pub-"+topic, nil).Publish(topic, 1, false, "ping"))
	expectMsg(t, sub, topic, "ping")
}

// TestBridgeRemoteNeverAcks: a remote that takes the connection and the
// PUBLISHes but never acknowledges one. The bridge holds a window in
// flight and at most max_queued_messages queued, dropping the oldest and
// counting each drop, and the gateway goes on serving its clients.
func TestBridgeRemoteNeverAcks(t *testing.T) {
	const n, bound, window = 300, 50, 10
	var got receivedLog
	fake := startFake(t, 4096, func(fc *fakeConn) {
		if fc.connack() != nil {
			return
		}
		for {
			p, err := fc.read()
			if err != nil {
				return
			}
			switch p := p.(type) {
			case *packets.Publish:
				got.add(fc, p)
			case *packets.Pingreq:
				fc.send(&packets.Pingresp{})
			}
		}
	})
	cfg := bridgeTo(fake.addr, "5", rule("s/#", bridge.Out, 1, "", ""))
	cfg.MaxQueuedMessages = bound
	gw, gaddr := startServer(t, mqttd.Options{DataDir: t.TempDir(), Limits: mqttd.Limits{MaxInflight: window},
		Bridges: []bridge.Config{cfg}})
	waitBridge(t, gw, true)
	local := collect(t, gaddr, "local-s", 1, "s/#")
	pub := pahoConnect(t, gaddr, "sensor", nil)
	for i := range n {
		wait(t, pub.Publish("s/t", 1, false, fmt.Sprint(i)))
	}
	for i := range n {
		expectMsg(t, local, "s/t", fmt.Sprint(i))
	}
	roundTrip(t, gaddr, "other/x")
	waitFor(t, "the window sent", func() bool { return len(got.all()) == window })

	st := gw.Bridges()[0]
	dropped := st.Dropped["queue_full_oldest"]
	if !st.Connected || st.Inflight != window || st.Queued != bound || dropped != n-bound-window {
		t.Errorf("connected %v, %d in flight, %d queued, %d dropped; want connected, %d, %d, %d",
			st.Connected, st.Inflight, st.Queued, dropped, window, bound, n-bound-window)
	}
	// The window is the oldest messages, sent once each; the queue kept
	// the newest.
	for i, m := range got.all() {
		if m.payload != fmt.Sprint(i) || m.dup || m.conn != 1 {
			t.Errorf("PUBLISH %d read: %+v", i, m)
		}
	}
}

// TestBridgeRemoteDisconnects: a 3.1.1 remote that drops the connection
// at every third PUBLISH, without acknowledging it. Every message arrives
// at least once, in order per topic, those sent again marked DUP.
func TestBridgeRemoteDisconnects(t *testing.T) {
	var got receivedLog
	fake := startFake(t, 4096, func(fc *fakeConn) {
		if fc.connack() != nil {
			return
		}
		for k := 1; ; {
			p, err := fc.read()
			if err != nil {
				return
			}
			pub, ok := p.(*packets.Publish)
			if !ok {
				continue
			}
			got.add(fc, pub)
			if k == 3 {
				return
			}
			k++
			if fc.send(&packets.Puback{PacketID: pub.PacketID}) != nil {
				return
			}
		}
	})
	gw, gaddr := startServer(t, mqttd.Options{DataDir: t.TempDir(), Bridges: []bridge.Config{
		bridgeTo(fake.addr, "3.1.1", rule("s/#", bridge.Out, 1, "", ""))}})
	pub := pahoConnect(t, gaddr, "sensor", nil)
	want := map[string][]string{}
	for i := range 30 {
		topic := fmt.Sprintf("s/t%d", i%3)
		want[topic] = append(want[topic], fmt.Sprint(i))
		wait(t, pub.Publish(topic, 1, false, fmt.Sprint(i)))
	}
	waitFor(t, "every message delivered and acknowledged", func() bool {
		st := gw.Bridges()[0]
		return got.distinct() == 30 && st.Queued == 0 && st.Inflight == 0
	})
	checkInOrder(t, got.all(), want)
	if c := fake.connects.Load(); c < 10 {
		t.Errorf("%d connections, want at least 10 (two messages acknowledged in each)", c)
	}
	if st := gw.Bridges()[0]; st.ForwardedOut < 30 {
		t.Errorf("%d forwarded, want at least 30", st.ForwardedOut)
	}
}

// TestBridgeRemoteRefuses: a remote that refuses the CONNECT (5.0 reason
// code 0x87, 3.1.1 return code 5). The bridge stays disconnected, says
// why, counts the failures, and waits longer after each: twice as long,
// up to reconnect_max.
func TestBridgeRemoteRefuses(t *testing.T) {
	for _, tc := range []struct{ protocol, reason string }{{"5", "0x87"}, {"3.1.1", "not authorized (5)"}} {
		t.Run(tc.protocol, func(t *testing.T) {
			fake := startFake(t, 4096, func(fc *fakeConn) {
				code := packets.ReasonCode(5)
				if fc.v == packets.V5 {
					code = packets.NotAuthorized
				}
				fc.send(&packets.Connack{ReasonCode: code})
			})
			logs := &logLines{}
			gw, _ := startServer(t, mqttd.Options{Logger: zerolog.New(logs).Level(zerolog.WarnLevel),
				Bridges: []bridge.Config{bridgeTo(fake.addr, tc.protocol, rule("s/#", bridge.Out, 1, "", ""))}})
			const attempts = 6
			const line = "bridge cannot connect to the remote broker"
			// The log line comes after the failure is counted: wait for both.
			waitFor(t, "refused attempts", func() bool {
				return fake.connects.Load() >= attempts && gw.Bridges()[0].Failures >= attempts && len(logs.find(line)) >= attempts
			})
			st := gw.Bridges()[0]
			if st.Connected || st.Connects != 0 || !strings.Contains(st.LastError, "refused") || !strings.Contains(st.LastError, tc.reason) {
				t.Errorf("connected %v after %d connects, last error %q; want never connected, refused with %s",
					st.Connected, st.Connects, st.LastError, tc.reason)
			}
			// The waits the link chose, before jitter: 20ms doubling to
			// reconnect_max, 100ms.
			var waits []float64
			for _, l := range logs.find(line)[:attempts] {
				waits = append(waits, l["retry_in"].(float64))
			}
			if want := []float64{20, 40, 80, 100, 100, 100}; !slices.Equal(waits, want) {
				t.Errorf("waits %v ms, want %v", waits, want)
			}
		})
	}
}

// TestBridgeRemoteSlow: a remote that reads nothing for a while, then
// reads slowly through a small buffer. Meanwhile the gateway's clients
// are served, and every message arrives, in order, once.
func TestBridgeRemoteSlow(t *testing.T) {
	const n = 120
	payload := strings.Repeat("x", 48<<10)
	release := make(chan struct{})
	var got receivedLog
	fake := startFake(t, 16<<10, func(fc *fakeConn) {
		fc.nc.(*net.TCPConn).SetReadBuffer(32 << 10)
		if fc.connack() != nil {
			return
		}
		select {
		case <-release:
		case <-fc.done:
			return
		}
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for range tick.C {
			p, err := fc.read()
			if err != nil {
				return
			}
			if pub, ok := p.(*packets.Publish); ok {
				got.add(fc, &packets.Publish{Topic: pub.Topic, Payload: pub.Payload[:len(pub.Payload)-len(payload)], Dup: pub.Dup})
				if fc.send(&packets.Puback{PacketID: pub.PacketID}) != nil {
					return
				}
			}
		}
	})
	gw, gaddr := startServer(t, mqttd.Options{DataDir: t.TempDir(), Bridges: []bridge.Config{
		bridgeTo(fake.addr, "5", rule("s/#", bridge.Out, 1, "", ""))}})
	waitBridge(t, gw, true)
	local := collect(t, gaddr, "local-s", 1, "s/#")
	pub := pahoConnect(t, gaddr, "sensor", nil)
	want := map[string][]string{}
	for i := range n {
		topic := fmt.Sprintf("s/t%d", i%3)
		want[topic] = append(want[topic], fmt.Sprint(i))
		wait(t, pub.Publish(topic, 1, false, fmt.Sprint(i)+payload))
	}
	for range n {
		nextMsg(t, local)
	}
	roundTrip(t, gaddr, "other/x")
	// Logged, not asserted: it depends on the kernel's socket buffers.
	t.Logf("%d bytes wait in the outboxes for the remote to read", gw.Stats().OutboxBytes)
	if st := gw.Bridges()[0]; !st.Connected || st.Queued+st.Inflight != n || len(got.all()) != 0 {
		t.Fatalf("with the remote not reading: %+v, %d read; want all %d held", st, len(got.all()), n)
	}
	close(release)
	waitFor(t, "every message delivered and acknowledged", func() bool {
		st := gw.Bridges()[0]
		return len(got.all()) >= n && st.Queued == 0 && st.Inflight == 0
	})
	checkInOrder(t, got.all(), want)
	if all := got.all(); len(all) != n || fake.connects.Load() != 1 {
		t.Errorf("%d PUBLISHes over %d connections, want %d over one", len(all), fake.connects.Load(), n)
	}
}

// TestBridgeRemoteStopsReading: a remote that stops reading while the
// bridge has more to send than the sockets hold is dropped after
// limits.write_timeout; the bridge connects again and sends everything,
// in order, those in flight marked DUP.
func TestBridgeRemoteStopsReading(t *testing.T) {
	const n = 120
	payload := strings.Repeat("x", 48<<10)
	var got receivedLog
	fake := startFake(t, 16<<10, func(fc *fakeConn) {
		if fc.connack() != nil || fc.n == 1 {
			<-fc.done // the first connection reads nothing more
			return
		}
		for {
			p, err := fc.read()
			if err != nil {
				return
			}
			if pub, ok := p.(*packets.Publish); ok {
				got.add(fc, &packets.Publish{Topic: pub.Topic, Payload: pub.Payload[:len(pub.Payload)-len(payload)], Dup: pub.Dup})
				if fc.send(&packets.Puback{PacketID: pub.PacketID}) != nil {
					return
				}
			}
		}
	})
	gw, gaddr := startServer(t, mqttd.Options{DataDir: t.TempDir(), Limits: mqttd.Limits{WriteTimeout: 300 * time.Millisecond},
		Bridges: []bridge.Config{bridgeTo(fake.addr, "5", rule("s/#", bridge.Out, 1, "", ""))}})
	waitBridge(t, gw, true)
	pub := pahoConnect(t, gaddr, "sensor", nil)
	want := map[string][]string{}
	for i := range n {
		topic := fmt.Sprintf("s/t%d", i%3)
		want[topic] = append(want[topic], fmt.Sprint(i))
		wait(t, pub.Publish(topic, 1, false, fmt.Sprint(i)+payload))
	}
	waitFor(t, "every message delivered and acknowledged", func() bool {
		st := gw.Bridges()[0]
		return got.distinct() >= n && st.Queued == 0 && st.Inflight == 0
	})
	checkInOrder(t, got.all(), want)
	st := gw.Bridges()[0]
	if st.Connects < 2 || !strings.Contains(st.LastError, "write timeout") {
		t.Errorf("%d connects, last error %q; want the first dropped for the write timeout", st.Connects, st.LastError)
	}
}

// TestBridgeRemoteResetsAfterConnack: a remote that resets every
// connection right after its CONNACK, while the bridge resends a window.
// The link's socket may then be closed before the poller watches it; the
// gateway survives every round, keeps what it queued, and serves its
// clients.
func TestBridgeRemoteResetsAfterConnack(t *testing.T) {
	fake := startFake(t, 4096, func(fc *fakeConn) {
		fc.connack()
		fc.nc.(*net.TCPConn).SetLinger(0) // close sends RST
	})
	cfg := bridgeTo(fake.addr, "5", rule("s/#", bridge.Out, 1, "", ""))
	cfg.ReconnectMin, cfg.ReconnectMax = time.Millisecond, 2*time.Millisecond
	gw, gaddr := startServer(t, mqttd.Options{DataDir: t.TempDir(), Bridges: []bridge.Config{cfg}})
	pub := pahoConnect(t, gaddr, "sensor", nil)
	const n = 200
	for i := range n {
		wait(t, pub.Publish("s/t", 1, false, fmt.Sprint(i)))
	}
	waitFor(t, "many connections", func() bool { return gw.Bridges()[0].Connects >= 200 })
	roundTrip(t, gaddr, "other/x")
	if st := gw.Bridges()[0]; st.Queued+st.Inflight != n {
		t.Errorf("%d queued and %d in flight, want all %d kept", st.Queued, st.Inflight, n)
	}
}

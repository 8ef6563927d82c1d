package mqttd_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"mqttd"
	"mqttd/packets"
)

// idleConns is how many connections the memory benchmark holds open.
const idleConns = 5000

// BenchmarkIdleConnection reports the broker's live heap and stack per
// idle connection holding one subscription ("broker-B/conn"). The
// client ends are in the same process, so the cost of a plain accepted
// TCP connection pair is measured first and the client half subtracted.
func BenchmarkIdleConnection(b *testing.B) {
	for range b.N {
		plain := plainPairCost(b)
		srv, err := mqttd.New(mqttd.Options{})
		if err != nil {
			b.Fatal(err)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv.AddListener("bench", l)
		go srv.Serve()
		before := heapInUse()
		conns := make([]net.Conn, idleConns)
		for i := range conns {
			conns[i] = dialIdle(b, l.Addr().String(), i)
		}
		after := heapInUse()
		total := float64(after-before) / idleConns
		b.ReportMetric(total-plain/2, "broker-B/conn")
		for _, c := range conns {
			c.Close()
		}
		shutdown(b, srv)
	}
}

// plainPairCost is the heap per TCP connection pair, both ends in this
// process and no broker involved.
func plainPairCost(b *testing.B) float64 {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, idleConns)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	before := heapInUse()
	pairs := make([]net.Conn, 0, 2*idleConns)
	for range idleConns {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		pairs = append(pairs, c, <-accepted)
	}
	cost := float64(heapInUse()-before) / idleConns
	for _, c := range pairs {
		c.Close()
	}
	return cost
}

func shutdown(b *testing.B, srv *mqttd.Server) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		b.Fatal(err)
	}
}

// bulkyProps are 5.0 properties of about 240 KB: four user properties at
// the string length limit.
func bulkyProps() packets.Properties {
	var p packets.Properties
	for i := range 4 {
		p.User = append(p.User, packets.UserProperty{Key: fmt.Sprint(i), Value: strings.Repeat("v", 60000)})
	}
	p.Set(packets.PropUserProperty)
	return p
}

// TestKeptValuesDoNotPinFrames checks that what the broker keeps past a
// packet is copied out of its frame, so that a small kept value never
// holds a large frame alive: a short filter from a SUBSCRIBE with bulky
// properties, the client id and user name from a bulky CONNECT kept for
// the connection's life, and the topic levels of a retained message
// later replaced by a small one. Pinned, the 60 frames here would hold
// about 14 MB; copied, the broker keeps a few KB per client.
func TestKeptValuesDoNotPinFrames(t *testing.T) {
	_, addr := startServer(t, mqttd.Options{})
	const n = 20
	before := heapInUse()
	var keep []*rawConn
	for i := range n {
		cp := &packets.Connect{ClientID: fmt.Sprintf("pin-%d", i), Username: "user", CleanStart: true,
			Properties: bulkyProps()}
		rc := connectAs(t, addr, packets.V5, cp)
		sub := &packets.Subscribe{PacketID: 1, Properties: bulkyProps(),
			Subscriptions: []packets.Subscription{{Filter: fmt.Sprintf("f/%d", i)}}}
		rc.send(sub)
		rc.read()
		topic := fmt.Sprintf("r/%d", i)
		rc.send(&packets.Publish{Topic: topic, Retain: true, Payload: bytes.Repeat([]byte("p"), 240000)})
		rc.send(&packets.Publish{Topic: topic, Retain: true, Payload: []byte("small")})
		rc.ping()
		keep = append(keep, rc)
	}
	growth := int64(heapInUse()) - int64(before)
	t.Logf("heap growth for %d clients: %d bytes", n, growth)
	if limit := int64(n * 40 << 10); growth > limit {
		t.Errorf("heap grew by %d bytes for %d clients, over %d: kept values pin their frames", growth, n, limit)
	}
	for _, rc := range keep {
		rc.ping() // every client still served
	}
}

// liveHeap is what the broker's memory watch reads.
func liveHeap() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// TestMemoryPressure checks what the broker does when the live heap
// passes 7/8 of limits.max_memory, with real memory: the test holds a
// large allocation. New connections are closed at accept, a new retained
// message is refused (5.0 PUBACK 0x97), a QoS 0 message for a client that
// already has a backlog is dropped rather than stalled for, while
// clients already connected go on; once the allocation is freed and the
// heap is below 3/4 of the budget, new connections are accepted again.
func TestMemoryPressure(t *testing.T) {
	const hogSize = 96 << 20
	runtime.GC()
	srv, l := startPipeServer(t, mqttd.Options{Limits: mqttd.Limits{MaxMemory: liveHeap() + 64<<20}})
	connect := func(id string, v packets.Version) *rawConn {
		rc := l.dial(t)
		rc.v = v
		rc.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: v, ClientID: id, CleanStart: true})
		if ack, ok := rc.read().(*packets.Connack); !ok || ack.ReasonCode != 0 {
			t.Fatalf("%s: CONNACK %+v", id, ack)
		}
		return rc
	}
	pub := connect("pub", packets.V5)
	slow := connect("slow", packets.V311)
	subscribe(slow, packets.Subscription{Filter: "q0"})
	fast := connect("fast", packets.V311)
	subscribe(fast, packets.Subscription{Filter: "fast"})

	hog := make([]byte, hogSize)
	waitFor(t, "memory pressure", func() bool {
		runtime.GC()
		return srv.Stats().MemoryPressure
	})

	refused := l.dial(t)
	if _, err := refused.tryRead(); err == nil {
		t.Error("a new connection was served under memory pressure")
	}
	if got := srv.Stats().Rejected["memory_pressure"]; got != 1 {
		t.Errorf("rejected[memory_pressure] = %d, want 1", got)
	}

	pub.send(&packets.Publish{Topic: "r", QoS: 1, PacketID: 1, Retain: true, Payload: []byte("kept?")})
	if ack, ok := pub.read().(*packets.Puback); !ok || ack.ReasonCode != packets.QuotaExceeded {
		t.Errorf("retained PUBLISH under memory pressure: %+v, want PUBACK 0x97", ack)
	}
	if st := srv.Stats(); st.Retained != 0 || st.RetainedRefused != 1 {
		t.Errorf("retained %d, refused %d; want 0, 1", st.Retained, st.RetainedRefused)
	}

	if codes := subscribe(pub, packets.Subscription{Filter: "new/+"}, packets.Subscription{Filter: "fast"}); codes[0] != packets.QuotaExceeded {
		t.Errorf("SUBSCRIBE under memory pressure: %#x, want 0x97", codes)
	}
	if codes := subscribe(fast, packets.Subscription{Filter: "more"}, packets.Subscription{Filter: "fast", Options: packets.SubOptions{QoS: 1}}); codes[0] != packets.SubackFailure || codes[1] != 1 {
		t.Errorf("3.1.1 SUBSCRIBE under memory pressure: %#x, want 0x80 for a new filter, QoS 1 for the one held", codes)
	}

	// slow reads nothing: the first message waits in its outbox, the
	// second finds a backlog and is dropped at once.
	pub.send(&packets.Publish{Topic: "q0", Payload: []byte("first")})
	pub.send(&packets.Publish{Topic: "q0", Payload: []byte("second")})
	pub.send(&packets.Publish{Topic: "fast", Payload: []byte("on")})
	if p := expectPublish(fast, "fast"); string(p.Payload) != "on" {
		t.Errorf("fast got %q", p.Payload)
	}
	waitFor(t, "the QoS 0 drop", func() bool { return srv.Stats().Dropped["memory_pressure"] == 1 })
	if p := expectPublish(slow, "q0"); string(p.Payload) != "first" {
		t.Errorf("slow got %q, want first", p.Payload)
	}

	runtime.KeepAlive(hog)
	waitFor(t, "the pressure to end", func() bool {
		runtime.GC()
		return !srv.Stats().MemoryPressure
	})
	connect("after", packets.V311)
	if got := srv.Stats().MemoryPressureEvents; got != 1 {
		t.Errorf("memory pressure events = %d, want 1", got)
	}
}

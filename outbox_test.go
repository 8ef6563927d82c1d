package mqttd_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mqttd"
	"mqttd/packets"
)

// pumpPackets reads rc in a goroutine of its own, handing each packet to
// the channel returned, so the server's writes to rc never wait for the
// test (a net.Pipe write blocks until the other end reads).
func pumpPackets(rc *rawConn) <-chan packets.Packet {
	ch := make(chan packets.Packet, 64)
	go func() {
		defer close(ch)
		for {
			rc.nc.SetReadDeadline(time.Time{})
			p, err := packets.ReadPacket(rc.br, rc.v, 0)
			if err != nil {
				return
			}
			ch <- p
		}
	}()
	return ch
}

func nextPublish(t *testing.T, ch <-chan packets.Packet) *packets.Publish {
	t.Helper()
	select {
	case p, ok := <-ch:
		pub, isPub := p.(*packets.Publish)
		if !ok || !isPub {
			t.Fatalf("got %T %+v, want a PUBLISH", p, p)
		}
		return pub
	case <-time.After(10 * time.Second):
		t.Fatal("no PUBLISH")
	}
	return nil
}

// TestOutboxTotalBound checks limits.max_outbox_bytes_total: a subscriber
// that reads nothing holds at most that much (and one message more) of
// the bytes waiting to be written, past it large messages wait in the
// session queues, every client is held back for them but small QoS 0
// messages still flow, a large QoS 0 message is dropped and counted, and
// once the stuck client is gone the waiting messages are delivered.
func TestOutboxTotalBound(t *testing.T) {
	t.Parallel()
	const total, size, n = 300_000, 100_000, 10
	srv, l := startPipeServer(t, mqttd.Options{Limits: mqttd.Limits{MaxOutboxBytesTotal: total}})
	connect := func(id string) *rawConn {
		rc := l.dial(t)
		rc.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, ClientID: id, CleanStart: true})
		if ack, ok := rc.read().(*packets.Connack); !ok || ack.ReasonCode != 0 {
			t.Fatalf("%s: CONNACK %+v", id, ack)
		}
		return rc
	}
	stuck := connect("stuck")
	subscribe(stuck, packets.Subscription{Filter: "big/#", Options: packets.SubOptions{QoS: 1}})
	fast := connect("fast")
	subscribe(fast, packets.Subscription{Filter: "big/#", Options: packets.SubOptions{QoS: 1}})
	fastIn := pumpPackets(fast)
	light := connect("light")
	subscribe(light, packets.Subscription{Filter: "q0/#"})
	lightIn := pumpPackets(light)
	pub := connect("pub")

	payload := bytes.Repeat([]byte("x"), size)
	for i := range n {
		pub.send(&packets.Publish{Topic: "big/x", QoS: 1, PacketID: uint16(i + 1), Payload: append([]byte{byte(i)}, payload...)})
		if ack, ok := pub.read().(*packets.Puback); !ok || ack.PacketID != uint16(i+1) {
			t.Fatalf("PUBACK %+v", ack)
		}
	}
	st := srv.Stats()
	if st.OutboxBytes > total+size+100 {
		t.Errorf("outboxes hold %d bytes; want at most %d and one message", st.OutboxBytes, total)
	}
	if st.Queued == 0 {
		t.Error("nothing waits in a session queue")
	}
	t.Logf("outboxes %d bytes, %d messages queued", st.OutboxBytes, st.Queued)

	pub.send(&packets.Publish{Topic: "q0/small", Payload: []byte("small")})
	if p := nextPublish(t, lightIn); string(p.Payload) != "small" {
		t.Errorf("got %q, want the small QoS 0 message", p.Payload)
	}
	pub.send(&packets.Publish{Topic: "q0/big", Payload: payload})
	pub.send(&packets.Publish{Topic: "q0/after", Payload: []byte("after")})
	if p := nextPublish(t, lightIn); p.Topic != "q0/after" {
		t.Errorf("got %s, want q0/after: the large QoS 0 message should have been dropped", p.Topic)
	}
	if got := srv.Stats().Dropped["outbox_total"]; got != 1 {
		t.Errorf("dropped[outbox_total] = %d, want 1", got)
	}

	stuck.nc.Close()
	for i := range n {
		p := nextPublish(t, fastIn)
		if p.Topic != "big/x" || len(p.Payload) != size+1 || p.Payload[0] != byte(i) {
			t.Fatalf("message %d: %s, %d bytes, first %d", i, p.Topic, len(p.Payload), p.Payload[0])
		}
		fast.send(&packets.Puback{PacketID: p.PacketID})
	}
	waitFor(t, "the outboxes to drain", func() bool { return srv.Stats().OutboxBytes == 0 })
}

// TestResendThroughOutboxBound checks the window sent again after a
// reconnect goes through the outbox bound, as the client reads, rather
// than into the outbox at once: with an outbox of 16 KiB, 40 unacknowledged
// messages of 4 KiB all arrive again, in order, with DUP, and a message
// published meanwhile comes after them.
func TestResendThroughOutboxBound(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxOutboxBytes: 16 << 10}})
	sub := connectRawSession(t, addr, "window", false, false)
	subscribe(sub, packets.Subscription{Filter: "w", Options: packets.SubOptions{QoS: 1}})
	pub := connectRawSession(t, addr, "pub", true, false)
	payload := bytes.Repeat([]byte("x"), 4<<10)
	for i := range 40 {
		pub.send(&packets.Publish{Topic: "w", QoS: 1, PacketID: uint16(i + 1), Payload: payload})
		pub.read()
	}
	var ids []uint16
	for range 40 {
		ids = append(ids, expectPublish(sub, "w").PacketID) // read, never acknowledged
	}
	sub.nc.Close()
	back := connectRawSession(t, addr, "window", false, true)
	pub.send(&packets.Publish{Topic: "w", QoS: 1, PacketID: 41, Payload: []byte("new")})
	pub.read()
	for i, id := range ids {
		p := expectPublish(back, "w")
		if p.PacketID != id || !p.Dup {
			t.Fatalf("resend %d: id %d, DUP %v; want id %d with DUP", i, p.PacketID, p.Dup, id)
		}
		back.send(&packets.Puback{PacketID: p.PacketID})
	}
	if p := expectPublish(back, "w"); string(p.Payload) != "new" || p.Dup {
		t.Errorf("after the resends: %q (DUP %v), want the new message", p.Payload, p.Dup)
	}
}

// TestSlowConsumer checks a subscriber that stops reading holds its
// publisher back at most once for the stall bound, then gets QoS 0
// dropped (counted) and is disconnected after the write timeout. The write
// timeout is longer than the stall, so the drops come first.
func TestSlowConsumer(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, addr := startServer(t, mqttd.Options{Registerer: reg, Limits: mqttd.Limits{
		MaxOutboxBytes: 64 << 10, WriteTimeout: 2500 * time.Millisecond}})
	stuck := connectRawSession(t, addr, "stuck", true, false)
	stuck.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "flood", Options: packets.SubOptions{QoS: 1}}}})
	stuck.read()
	// From here on the stuck client reads nothing.

	// QoS 0 only: QoS 1/2 would stop at the full in-flight window and wait
	// in the session queue without ever blocking a write.
	pub := connectRawSession(t, addr, "flooder", true, false)
	payload := make([]byte, 8<<10)
	// Flood until copies for the stuck client are dropped: how much the
	// socket buffers absorb first depends on the kernel. Bounded at 400 MB.
	// Its writer is then blocked on a full socket, and the write timeout
	// cuts it off whether or not more is published.
	for batch := 0; metricValue(t, reg, "mqttd_messages_dropped_total") == 0; batch++ {
		if batch == 500 {
			t.Fatal("no QoS 0 drop was counted for the stuck subscriber")
		}
		for range 100 {
			pub.send(&packets.Publish{Topic: "flood", Payload: payload})
		}
		pub.ping() // the publisher is served throughout
	}
	waitFor(t, "the stuck subscriber to be disconnected", func() bool {
		return metricValue(t, reg, "mqttd_connections") == 1
	})
	pub.ping()
}

// TestWriterGoroutinesParkAndEnd checks that a delivery's writer parks
// once it has written and the next delivery takes it up again, instead of
// starting a goroutine each time, and that Shutdown ends the parked ones.
// The first delivery may find the subscriber's reader still writing its
// SUBACK, and start no writer; each later one starts one.
func TestWriterGoroutinesParkAndEnd(t *testing.T) {
	t.Parallel()
	b := startBroker(t, mqttd.Options{})
	sub := connectRaw(t, b.addr, &packets.Connect{ClientID: "park-sub", CleanStart: true})
	sub.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "park/t"}}})
	if _, ok := sub.read().(*packets.Suback); !ok {
		t.Fatal("no SUBACK")
	}
	pub := connectRaw(t, b.addr, &packets.Connect{ClientID: "park-pub", CleanStart: true})
	allParked := func() bool {
		parked, goroutines := b.srv.WriterGoroutines()
		return parked == goroutines
	}
	for i := range 5 {
		pub.send(&packets.Publish{Topic: "park/t", Payload: []byte{byte(i)}})
		if p, ok := sub.read().(*packets.Publish); !ok || p.Payload[0] != byte(i) {
			t.Fatalf("delivery %d: %v", i, p)
		}
		waitFor(t, "the writers to park", allParked)
		if _, goroutines := b.srv.WriterGoroutines(); i > 0 && goroutines != 1 {
			t.Fatalf("after delivery %d: %d writer goroutines, want the one taken up again", i, goroutines)
		}
	}
	srv := b.srv
	b.stop()
	waitFor(t, "the parked writer to end", func() bool {
		_, goroutines := srv.WriterGoroutines()
		return goroutines == 0
	})
}

// TestReaderDisconnectBehindWriter checks the DISCONNECT a reader sends
// for a protocol error is written, after what a delivery writer was still
// writing, before the connection is closed: closing at once discarded
// both and cut a PUBLISH in half.
func TestReaderDisconnectBehindWriter(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxOutboxBytes: 64 << 10}})
	sub := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "slow", CleanStart: true})
	subscribe(sub, packets.Subscription{Filter: "t"})
	payload := make([]byte, 32<<10)
	for range 300 { // fills the socket buffers: the writer blocks in Write
		srv.Publish("t", payload, 0, false, nil)
	}
	sub.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V5, ClientID: "slow"}) // a protocol error
	var last packets.Packet
	for {
		p, err := sub.tryRead()
		if err != nil {
			break
		}
		last = p
	}
	if d, ok := last.(*packets.Disconnect); !ok || d.ReasonCode != packets.ProtocolError {
		t.Fatalf("last packet before the close: %T %+v, want DISCONNECT 0x82", last, last)
	}
}

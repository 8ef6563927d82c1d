package mqttd_test

import (
	"bytes"
	"testing"
	"time"

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

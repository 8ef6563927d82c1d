package mqttd_test

import (
	"bytes"
	"testing"

	"mqttd"
	"mqttd/packets"
)

// TestClientMaximumPacketSize checks that a PUBLISH larger than a 5.0
// client's Maximum Packet Size is not sent [MQTT-3.1.2-24] but treated as
// sent [MQTT-3.1.2-25]: at QoS 0, and at QoS 1 where it must not hold the
// client's one-message window; and that a message in flight when the
// client reconnects with a smaller maximum is completed, not resent. The
// drops are counted as too_large.
func TestClientMaximumPacketSize(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{})
	big, small := bytes.Repeat([]byte("x"), 100), []byte("s")

	sub := connectAs(t, addr, packets.V5, limitedConnect("small", 40))
	subscribe(sub, packets.Subscription{Filter: "t/#", Options: packets.SubOptions{QoS: 1}})
	pub := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "pub", CleanStart: true})
	pub.send(&packets.Publish{Topic: "t/0", Payload: big})
	pub.send(&packets.Publish{Topic: "t/0", Payload: small})
	pub.send(&packets.Publish{Topic: "t/1", QoS: 1, PacketID: 1, Payload: big})
	pub.send(&packets.Publish{Topic: "t/1", QoS: 1, PacketID: 2, Payload: small})
	pub.ping()
	if p := expectPublish(sub, "t/0"); p.QoS != 0 || !bytes.Equal(p.Payload, small) {
		t.Errorf("first delivery: QoS %d, %d bytes; want the small QoS 0 message", p.QoS, len(p.Payload))
	}
	p := expectPublish(sub, "t/1")
	if p.QoS != 1 || !bytes.Equal(p.Payload, small) {
		t.Errorf("second delivery: QoS %d, %d bytes; want the small QoS 1 message", p.QoS, len(p.Payload))
	}
	sub.send(&packets.Puback{PacketID: p.PacketID})
	if extra := sub.ping(); len(extra) != 0 {
		t.Errorf("more was sent: %+v", extra)
	}
	if n := srv.Stats().Dropped["too_large"]; n != 2 {
		t.Errorf("too_large drops: %d, want 2", n)
	}

	// In flight to a client without a limit, then resumed with one.
	rc := connectAs(t, addr, packets.V5, limitedConnect("resume", 0))
	subscribe(rc, packets.Subscription{Filter: "r", Options: packets.SubOptions{QoS: 1}})
	pub.send(&packets.Publish{Topic: "r", QoS: 1, PacketID: 3, Payload: big})
	pub.read()
	expectPublish(rc, "r") // and not acknowledged
	rc.nc.Close()
	waitFor(t, "the session offline", func() bool { return srv.Stats().SessionsOnline == 2 })
	rc = dialRaw(t, addr)
	rc.v = packets.V5
	cp := limitedConnect("resume", 40)
	cp.ProtocolName, cp.ProtocolVersion = "MQTT", packets.V5
	rc.send(cp)
	if ack, ok := rc.read().(*packets.Connack); !ok || !ack.SessionPresent {
		t.Fatalf("CONNACK %+v: want the session present", ack)
	}
	pub.send(&packets.Publish{Topic: "r", QoS: 1, PacketID: 4, Payload: small})
	pub.read()
	if p := expectPublish(rc, "r"); !bytes.Equal(p.Payload, small) || p.Dup {
		t.Errorf("after the reconnect: %d bytes, DUP %v; want the small message, new", len(p.Payload), p.Dup)
	}
	if n := srv.Stats().Dropped["too_large"]; n != 3 {
		t.Errorf("too_large drops: %d, want 3", n)
	}
}

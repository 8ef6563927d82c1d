package mqttd_test

import (
	"testing"

	"mqttd"
	"mqttd/packets"
)

// Regression tests for defects a review of the engine restructuring found.

// TestRefusedQoS2IDIsNew checks [MQTT-4.3.3-9]: after a PUBREC of 0x80 or
// above the client's next PUBLISH with that packet id is a new message,
// routed, not taken for a resend of the refused one.
func TestRefusedQoS2IDIsNew(t *testing.T) {
	_, addr := startServer(t, mqttd.Options{})
	sub := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "sub", CleanStart: true})
	subscribe(sub, packets.Subscription{Filter: "a"})
	pub := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "pub", CleanStart: true})
	pub.send(&packets.Publish{Topic: "$SYS/x", QoS: 2, PacketID: 7, Payload: []byte("refused")})
	if rec, ok := pub.read().(*packets.Pubrec); !ok || rec.ReasonCode < 0x80 {
		t.Fatalf("got %+v, want a refusing PUBREC", rec)
	}
	pub.send(&packets.Publish{Topic: "a", QoS: 2, PacketID: 7, Payload: []byte("new message")})
	if rec, ok := pub.read().(*packets.Pubrec); !ok || rec.ReasonCode != 0 {
		t.Fatalf("got %+v, want PUBREC 0", rec)
	}
	pub.send(&packets.Pubrel{PacketID: 7})
	pub.read() // PUBCOMP
	expectPublish(sub, "a")
}

// TestHugeMaximumPacketSize checks a 5.0 client announcing the largest
// Maximum Packet Size gets its messages: on 32-bit builds (the Raspberry
// Pi's arm v6/v7) the size once turned negative and every message was
// dropped as too large.
func TestHugeMaximumPacketSize(t *testing.T) {
	_, addr := startServer(t, mqttd.Options{})
	cp := &packets.Connect{ClientID: "big", CleanStart: true}
	cp.Properties.MaximumPacketSize = 0xFFFFFFFF
	cp.Properties.Set(packets.PropMaximumPacketSize)
	sub := connectAs(t, addr, packets.V5, cp)
	subscribe(sub, packets.Subscription{Filter: "t", Options: packets.SubOptions{QoS: 1}})
	pub := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "pub", CleanStart: true})
	pub.send(&packets.Publish{Topic: "t", Payload: []byte("qos0")})
	pub.send(&packets.Publish{Topic: "t", QoS: 1, PacketID: 1, Payload: []byte("qos1")})
	pub.read()
	if got := sub.ping(); len(got) != 2 {
		t.Errorf("got %d of 2 messages", len(got))
	}
}

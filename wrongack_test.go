package mqttd_test

import (
	"testing"

	"mqttd"
	"mqttd/packets"
)

// TestWrongAcknowledgement checks that an acknowledgement of the wrong
// kind for the flow of the message in flight is a protocol error (§4.3):
// the connection is closed, 5.0 with DISCONNECT 0x82 first. One for a
// packet id not in flight is ignored: it may be late, from before a
// reconnect.
func TestWrongAcknowledgement(t *testing.T) {
	for _, tc := range []struct {
		name string
		qos  byte
		ack  func(id uint16) packets.Packet
	}{
		{"PUBACK for QoS 2", 2, func(id uint16) packets.Packet { return &packets.Puback{PacketID: id} }},
		{"PUBREC for QoS 1", 1, func(id uint16) packets.Packet { return &packets.Pubrec{PacketID: id} }},
		{"PUBCOMP for QoS 1", 1, func(id uint16) packets.Packet { return &packets.Pubcomp{PacketID: id} }},
		{"PUBCOMP before PUBREC", 2, func(id uint16) packets.Packet { return &packets.Pubcomp{PacketID: id} }},
	} {
		for _, v := range versions {
			t.Run(tc.name+"-"+versionName(v), func(t *testing.T) {
				srv, addr := startServer(t, mqttd.Options{})
				sub := connectAs(t, addr, v, &packets.Connect{ClientID: "sub", CleanStart: true})
				subscribe(sub, packets.Subscription{Filter: "t", Options: packets.SubOptions{QoS: 2}})
				pub := connectAs(t, addr, v, &packets.Connect{ClientID: "pub", CleanStart: true})
				pub.send(&packets.Publish{Topic: "t", QoS: tc.qos, PacketID: 1, Payload: []byte("x")})
				p := expectPublish(sub, "t")
				// Not in flight: ignored, but for 5.0's PUBREL 0x92 to a PUBREC.
				sub.send(tc.ack(p.PacketID + 1))
				for _, got := range sub.ping() {
					if rel, ok := got.(*packets.Pubrel); !ok || rel.ReasonCode != packets.PacketIDNotFound {
						t.Fatalf("an acknowledgement for an id not in flight got %T %+v", got, got)
					}
				}
				sub.send(tc.ack(p.PacketID))
				if v == packets.V5 {
					if d, ok := sub.read().(*packets.Disconnect); !ok || d.ReasonCode != packets.ProtocolError {
						t.Fatalf("got %+v, want DISCONNECT 0x82", d)
					}
				}
				sub.expectClosed()
				if n := srv.Stats().Disconnects["protocol_error"]; n != 1 {
					t.Errorf("disconnects[protocol_error] = %d, want 1", n)
				}
			})
		}
	}
}

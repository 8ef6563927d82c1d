package mqttd_test

import (
	"testing"

	"mqttd"
	"mqttd/packets"
)

// TestNoMatchingSubscribers checks the 5.0 PUBACK and PUBREC code 0x10
// for a message nobody subscribed to (accepted all the same: a retained
// one is kept), success once somebody has, and that a subscriber left
// out by No Local does not count; 3.1.1 acknowledges plainly.
func TestNoMatchingSubscribers(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{})
	pub := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "pub", CleanStart: true})
	ack := func(qos byte, retain bool) packets.ReasonCode {
		t.Helper()
		pub.send(&packets.Publish{Topic: "t", QoS: qos, PacketID: 1, Retain: retain, Payload: []byte("x")})
		switch p := pub.read().(type) {
		case *packets.Puback:
			return p.ReasonCode
		case *packets.Pubrec:
			pub.send(&packets.Pubrel{PacketID: 1})
			pub.read() // PUBCOMP
			return p.ReasonCode
		default:
			t.Fatalf("got %T", p)
		}
		return 0
	}
	for _, qos := range []byte{1, 2} {
		if code := ack(qos, true); code != packets.NoMatchingSubscribers {
			t.Errorf("QoS %d, nobody subscribed: %#x, want 0x10", qos, code)
		}
	}
	if n := srv.Stats().Retained; n != 1 {
		t.Errorf("%d retained, want the message kept", n)
	}
	subscribe(pub, packets.Subscription{Filter: "t", Options: packets.SubOptions{NoLocal: true}})
	pub.read() // the retained message
	if code := ack(1, false); code != packets.NoMatchingSubscribers {
		t.Errorf("only a No Local subscription of the publisher's own: %#x, want 0x10", code)
	}
	other := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "other", CleanStart: true})
	subscribe(other, packets.Subscription{Filter: "t"})
	other.read() // the retained message
	for _, qos := range []byte{1, 2} {
		if code := ack(qos, false); code != packets.Success {
			t.Errorf("QoS %d with a subscriber: %#x, want 0", qos, code)
		}
	}
	old := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "old", CleanStart: true})
	old.send(&packets.Publish{Topic: "nobody", QoS: 1, PacketID: 1, Payload: []byte("x")})
	if a, ok := old.read().(*packets.Puback); !ok || a.ReasonCode != 0 {
		t.Errorf("3.1.1 PUBACK %+v", a)
	}
}

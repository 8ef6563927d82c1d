package mqttd_test

import (
	"fmt"
	"testing"

	"mqttd"
	"mqttd/packets"
)

// TestFanOutThousandSubscribers checks every one of 1,000 subscribers
// gets every message of a publisher, and that nothing is left running
// once they leave.
func TestFanOutThousandSubscribers(t *testing.T) {
	checkGoroutines(t)
	_, addr := startServer(t, mqttd.Options{})
	const subscribers, messages = 1000, 20
	subs := make([]*rawConn, subscribers)
	for i := range subs {
		subs[i] = connectRawSession(t, addr, fmt.Sprintf("fan-%d", i), true, false)
		subs[i].send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "fan/+", Options: packets.SubOptions{QoS: 1}}}})
	}
	for _, s := range subs {
		if _, ok := s.read().(*packets.Suback); !ok {
			t.Fatal("no SUBACK")
		}
	}
	pub := connectRawSession(t, addr, "fan-pub", true, false)
	for i := range messages {
		pub.send(&packets.Publish{Topic: "fan/x", QoS: byte(i % 2), PacketID: uint16(i + 1), Payload: []byte(fmt.Sprint(i))})
	}
	pub.ping()
	for n, s := range subs {
		for i := range messages {
			p, ok := s.read().(*packets.Publish)
			if !ok || string(p.Payload) != fmt.Sprint(i) {
				t.Fatalf("subscriber %d message %d: %+v", n, i, p)
			}
			if p.QoS == 1 {
				s.send(&packets.Puback{PacketID: p.PacketID})
			}
		}
	}
	for _, s := range subs {
		s.send(&packets.Disconnect{})
		s.expectClosed()
	}
	pub.send(&packets.Disconnect{})
	pub.expectClosed()
}

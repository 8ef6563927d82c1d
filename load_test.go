package mqttd_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	paho "github.com/eclipse/paho.mqtt.golang"

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

// TestTakeoverStorm reconnects one client id 100 times while another
// client publishes to it; the broker must stay consistent (no panic,
// race or leak) and the last connection must own the session.
func TestTakeoverStorm(t *testing.T) {
	checkGoroutines(t)
	_, addr := startServer(t, mqttd.Options{})
	var stop atomic.Bool
	var wg sync.WaitGroup
	pub := pahoConnect(t, addr, "storm-pub", nil)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load() && i < 100000; i++ {
			pub.Publish("storm", byte(i%3), false, "x").Wait()
		}
	}()
	for i := range 100 {
		c := pahoConnect(t, addr, "storm", func(o *paho.ClientOptions) { o.SetCleanSession(i%2 == 0) })
		wait(t, c.Subscribe("storm", 2, nil))
		if i == 99 {
			var got collector
			wait(t, c.Subscribe("storm/last", 1, got.handler))
			wait(t, pub.Publish("storm/last", 1, false, "last"))
			waitFor(t, "delivery to the last connection", func() bool { return got.len() == 1 })
		}
	}
	stop.Store(true)
	wg.Wait()
	pub.Disconnect(100)
}

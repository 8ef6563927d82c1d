package mqttd_test

import (
	"testing"

	"mqttd"
	"mqttd/packets"
)

// TestWriterGoroutinesParkAndEnd checks that a delivery's writer parks
// once it has written and the next delivery takes it up again, instead of
// starting a goroutine each time, and that Shutdown ends the parked ones.
// The first delivery may find the subscriber's reader still writing its
// SUBACK, and start no writer; each later one starts one.
func TestWriterGoroutinesParkAndEnd(t *testing.T) {
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

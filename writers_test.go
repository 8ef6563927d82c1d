package mqttd_test

import (
	"bytes"
	"runtime"
	"testing"

	"mqttd"
	"mqttd/packets"
)

// TestWriterGoroutinesParkAndEnd checks that a delivery's writer parks
// once it has written and the next delivery takes it up again, instead of
// starting a goroutine each time, and that Shutdown ends the parked ones.
func TestWriterGoroutinesParkAndEnd(t *testing.T) {
	before := parkedWriters()
	b := startDurable(t, mqttd.Options{})
	sub := connectRaw(t, b.addr, &packets.Connect{ClientID: "park-sub", CleanStart: true})
	sub.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "park/t"}}})
	if _, ok := sub.read().(*packets.Suback); !ok {
		t.Fatal("no SUBACK")
	}
	pub := connectRaw(t, b.addr, &packets.Connect{ClientID: "park-pub", CleanStart: true})
	for i := range 5 {
		pub.send(&packets.Publish{Topic: "park/t", Payload: []byte{byte(i)}})
		if p, ok := sub.read().(*packets.Publish); !ok || p.Payload[0] != byte(i) {
			t.Fatalf("delivery %d: %v", i, p)
		}
		waitFor(t, "the writer to park", func() bool { return parkedWriters() > before })
		if n := parkedWriters() - before; n != 1 {
			t.Fatalf("after delivery %d: %d writers parked, want the one writer taken up again", i, n)
		}
	}
	b.stop()
	waitFor(t, "the parked writer to end", func() bool { return parkedWriters() == before })
}

// parkedWriters counts the goroutines parked in the writer pool.
func parkedWriters() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Count(buf[:n], []byte("mqttd.(*writerPool).next("))
		}
		buf = make([]byte, 2*len(buf))
	}
}

package mqttd_test

import (
	"bytes"
	"fmt"
	"testing"

	"mqttd"
	"mqttd/packets"
)

// TestFramesSplitAcrossReads: a stream of packets cut at many places, each
// piece read by the broker before the next is written (its count of bytes
// received is the barrier), is handled as if it came whole: the frame a
// read ends in is completed from the next one (in its header or its body,
// small or larger than a read), and the frames after it in that read are
// handled too.
func TestFramesSplitAcrossReads(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{})
	sub := connectRaw(t, addr, &packets.Connect{ClientID: "sub", CleanStart: true})
	sub.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "s/#", Options: packets.SubOptions{QoS: 1}}}})
	sub.read()

	sizes := []int{0, 1, 9, 120, 200, 5000, 40000}
	var stream []byte
	var want [][]byte
	for i, n := range sizes {
		payload := bytes.Repeat([]byte{byte('a' + i)}, n)
		want = append(want, payload)
		p := &packets.Publish{QoS: byte(i % 2), Topic: fmt.Sprintf("s/%d", i), Payload: payload}
		if p.QoS == 1 {
			p.PacketID = uint16(100 + i)
		}
		stream, _ = p.Append(stream, packets.V311)
	}
	stream, _ = (&packets.Pingreq{}).Append(stream, packets.V311)

	// Cuts inside headers and bodies, at frame ends, and pieces of many
	// frames: every prime step up to 41, then a piece per byte for the
	// first frames.
	for _, step := range []int{1, 2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41} {
		pub := connectRaw(t, addr, &packets.Connect{ClientID: "pub", CleanStart: true})
		for off := 0; off < len(stream); {
			n := step
			if off > 600 {
				n = step * 997 // the rest in fewer, larger pieces
			}
			end := min(off+n, len(stream))
			before := srv.Stats().BytesReceived
			if _, err := pub.nc.Write(stream[off:end]); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the piece read", func() bool { return srv.Stats().BytesReceived >= before+uint64(end-off) })
			off = end
		}
		for i := range sizes {
			if i%2 == 1 {
				if ack, ok := pub.read().(*packets.Puback); !ok || ack.PacketID != uint16(100+i) {
					t.Fatalf("step %d: publisher got %+v, want PUBACK %d", step, ack, 100+i)
				}
			}
		}
		if _, ok := pub.read().(*packets.Pingresp); !ok {
			t.Fatalf("step %d: no PINGRESP", step)
		}
		for i := range sizes {
			p, ok := sub.read().(*packets.Publish)
			if !ok || p.Topic != fmt.Sprintf("s/%d", i) || !bytes.Equal(p.Payload, want[i]) {
				t.Fatalf("step %d: subscriber got %+v, want s/%d with %d bytes", step, p, i, len(want[i]))
			}
			if p.QoS == 1 {
				sub.send(&packets.Puback{PacketID: p.PacketID})
			}
		}
		pub.nc.Close()
	}
}

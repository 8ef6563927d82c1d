package mqttd_test

import (
	"bytes"
	"fmt"
	"net"
	"testing"

	"mqttd"
	"mqttd/packets"
)

// A client publishing QoS 0 to itself while its outbox is full of answers
// its own reader has not flushed yet must still get its copy.
func TestSelfDeliveryBehindOwnAnswers(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxOutboxBytes: 1024}})
	c := connectRaw(t, addr, &packets.Connect{ClientID: "self", CleanStart: true})
	subscribeRaw(c, "self", 0)
	c.read()
	var b []byte
	for i := 1; i <= 400; i++ { // 400 PUBACKs: 1,600 bytes queued by the reader
		b, _ = (&packets.Publish{QoS: 1, PacketID: uint16(i), Topic: "o"}).Append(b, packets.V311)
	}
	b, _ = (&packets.Publish{Topic: "self", Payload: []byte("hi")}).Append(b, packets.V311)
	c.write(b)
	self := 0
	for _, p := range c.ping() {
		if pp, ok := p.(*packets.Publish); ok && pp.Topic == "self" {
			self++
		}
	}
	if self != 1 {
		t.Errorf("got %d copies of the client's own QoS 0 message, want 1", self)
	}
}

// TestFramesSplitAcrossReads: a stream of packets cut at many places, each
// piece read by the broker before the next is written (its count of bytes
// received is the barrier), is handled as if it came whole: the frame a
// read ends in is completed from the next one (in its header or its body,
// small or larger than a read), and the frames after it in that read are
// handled too.
func TestFramesSplitAcrossReads(t *testing.T) {
	t.Parallel()
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

// TestPacketsTogetherAnswered checks that packets arriving in one write
// are all answered before the connection closes, for each way the client
// ends it: CONNECT, SUBSCRIBE and DISCONNECT together; CONNECT and
// SUBSCRIBE then the client's side closed; and, 5.0, a protocol error
// after them (the answers come before the DISCONNECT 0x82).
func TestPacketsTogetherAnswered(t *testing.T) {
	t.Parallel()
	bothReaders(t, func(t *testing.T, on ...serverOption) {
		for _, tc := range []struct {
			name string
			v    packets.Version
			last func(rc *rawConn) []byte
		}{
			{"disconnect", packets.V311, func(*rawConn) []byte { return []byte{0xE0, 0} }},
			{"half-close", packets.V311, func(rc *rawConn) []byte { return nil }},
			{"protocol-error", packets.V5, func(*rawConn) []byte { return []byte{0x20, 2, 0, 0} }}, // a CONNACK from the client
		} {
			t.Run(tc.name, func(t *testing.T) {
				srv, addr := startServer(t, mqttd.Options{}, on...)
				rc := dialRaw(t, addr)
				rc.v = tc.v
				out, _ := (&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: tc.v, ClientID: "together", CleanStart: true}).Append(nil, tc.v)
				out, _ = (&packets.Subscribe{PacketID: 7, Subscriptions: []packets.Subscription{{Filter: "t"}}}).Append(out, tc.v)
				rc.write(append(out, tc.last(rc)...))
				if tc.name == "half-close" {
					if err := rc.nc.(*net.TCPConn).CloseWrite(); err != nil {
						t.Fatal(err)
					}
				}
				if ack, ok := rc.read().(*packets.Connack); !ok || ack.ReasonCode != 0 {
					t.Fatalf("got %+v, want CONNACK", ack)
				}
				if ack, ok := rc.read().(*packets.Suback); !ok || ack.PacketID != 7 {
					t.Fatalf("got %+v, want SUBACK 7", ack)
				}
				rc.expectClosed()
				if n := srv.Stats().Connects; n != 1 {
					t.Errorf("%d connects, want 1", n)
				}
			})
		}
	})
}

// TestLargePublishInPieces sends a PUBLISH much larger than one read, in
// uneven pieces, and checks it arrives intact.
func TestLargePublishInPieces(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, mqttd.Options{})
	sub := connectRawSession(t, addr, "big-sub", true, false)
	sub.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "big", Options: packets.SubOptions{QoS: 1}}}})
	sub.read()
	payload := make([]byte, 700<<10)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	frame, err := (&packets.Publish{Topic: "big", QoS: 1, PacketID: 9, Payload: payload}).Append(nil, packets.V311)
	if err != nil {
		t.Fatal(err)
	}
	pub := connectRawSession(t, addr, "big-pub", true, false)
	for off, step := 0, 1; off < len(frame); off, step = off+step, step*3%40000+1 {
		pub.write(frame[off:min(off+step, len(frame))])
	}
	if ack, ok := pub.read().(*packets.Puback); !ok || ack.PacketID != 9 {
		t.Fatalf("want PUBACK 9, got %+v", ack)
	}
	got, ok := sub.read().(*packets.Publish)
	if !ok || !bytes.Equal(got.Payload, payload) {
		t.Fatalf("large payload not delivered intact")
	}
}

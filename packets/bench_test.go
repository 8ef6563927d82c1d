package packets_test

import (
	"bufio"
	"bytes"
	"testing"

	"mqttd/packets"
)

// benchPublish is a 64-byte-payload PUBLISH; with5Props adds the
// properties a request/response application typically sets.
func benchPublish(qos byte, withProps bool) *packets.Publish {
	p := &packets.Publish{QoS: qos, Topic: "sensors/building-7/floor-3/temp", Payload: bytes.Repeat([]byte{'x'}, 64)}
	if qos > 0 {
		p.PacketID = 42
	}
	if withProps {
		p.Properties = packets.Properties{PayloadFormat: 1, MessageExpiry: 3600, ContentType: "application/json",
			ResponseTopic: "replies/7", CorrelationData: []byte("req-1234")}
		for _, id := range []packets.PropID{packets.PropPayloadFormat, packets.PropMessageExpiry,
			packets.PropContentType, packets.PropResponseTopic, packets.PropCorrelationData} {
			p.Properties.Set(id)
		}
	}
	return p
}

var benchCases = []struct {
	name string
	v    packets.Version
	p    *packets.Publish
}{
	{"v311-qos0", packets.V311, benchPublish(0, false)},
	{"v311-qos1", packets.V311, benchPublish(1, false)},
	{"v5-qos0-props", packets.V5, benchPublish(0, true)},
	{"v5-qos1-props", packets.V5, benchPublish(1, true)},
}

// frameParts encodes p and splits the frame into fixed header and body.
func frameParts(tb testing.TB, p packets.Packet, v packets.Version) ([]byte, packets.FixedHeader, []byte) {
	tb.Helper()
	frame, err := p.Append(nil, v)
	if err != nil {
		tb.Fatal(err)
	}
	fh, err := packets.ReadFixedHeader(bufio.NewReader(bytes.NewReader(frame)))
	if err != nil {
		tb.Fatal(err)
	}
	return frame, fh, frame[len(frame)-fh.Remaining:]
}

func TestPublishAllocations(t *testing.T) {
	for _, bc := range benchCases {
		_, fh, body := frameParts(t, bc.p, bc.v)
		if n := testing.AllocsPerRun(100, func() {
			if _, err := packets.Decode(fh, body, bc.v); err != nil {
				t.Fatal(err)
			}
		}); n > 1 {
			t.Errorf("%s: Decode made %v allocations, want at most 1", bc.name, n)
		}
		buf := make([]byte, 0, 512)
		if n := testing.AllocsPerRun(100, func() {
			if _, err := bc.p.Append(buf[:0], bc.v); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: Append made %v allocations, want 0", bc.name, n)
		}
	}
}

func BenchmarkDecodePublish(b *testing.B) {
	for _, bc := range benchCases {
		b.Run(bc.name, func(b *testing.B) {
			_, fh, body := frameParts(b, bc.p, bc.v)
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := packets.Decode(fh, body, bc.v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodePublishReused decodes into one reused Publish, as the
// broker's event reader does: no allocation at all.
func BenchmarkDecodePublishReused(b *testing.B) {
	for _, bc := range benchCases {
		b.Run(bc.name, func(b *testing.B) {
			_, fh, body := frameParts(b, bc.p, bc.v)
			var p packets.Publish
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if err := packets.DecodePublish(fh, body, bc.v, &p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkReadPacketPublish(b *testing.B) {
	for _, bc := range benchCases {
		b.Run(bc.name, func(b *testing.B) {
			frame, _, _ := frameParts(b, bc.p, bc.v)
			src := bytes.NewReader(frame)
			r := bufio.NewReader(src)
			b.ReportAllocs()
			b.SetBytes(int64(len(frame)))
			for b.Loop() {
				src.Reset(frame)
				r.Reset(src)
				if _, err := packets.ReadPacket(r, bc.v, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEncodePublish(b *testing.B) {
	for _, bc := range benchCases {
		b.Run(bc.name, func(b *testing.B) {
			buf := make([]byte, 0, 512)
			b.ReportAllocs()
			b.SetBytes(int64(bc.p.Size(bc.v)))
			for b.Loop() {
				var err error
				if buf, err = bc.p.Append(buf[:0], bc.v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package packets_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"mqttd/packets"
)

// headerOnly serves a frame header and fails the test if more is read.
type headerOnly struct {
	t      *testing.T
	header []byte
}

func (h *headerOnly) Read(p []byte) (int, error) {
	if len(h.header) == 0 {
		h.t.Errorf("ReadPacket read past the fixed header")
		return 0, io.ErrClosedPipe
	}
	n := copy(p, h.header)
	h.header = h.header[n:]
	return n, nil
}

func wantCode(t *testing.T, err error, code packets.ReasonCode) {
	t.Helper()
	var e *packets.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("got %v, want *packets.Error with code 0x%02X", err, byte(code))
	}
}

func TestMaxSizeCheckedBeforeReadingBody(t *testing.T) {
	// PUBLISH claiming 209,715,200 bytes.
	h := &headerOnly{t: t, header: []byte{0x30, 0x80, 0x80, 0x80, 0x64}}
	_, err := packets.ReadPacket(bufio.NewReaderSize(h, 16), packets.V5, 1<<20)
	wantCode(t, err, packets.PacketTooLarge)
}

func TestMaxSizeCountsTheWholeFrame(t *testing.T) {
	frame := []byte{0xC0, 0x00}
	if _, err := readOne(t, frame, packets.V311, 2, same); err != nil {
		t.Fatalf("a 2-byte frame within maxSize 2: %v", err)
	}
	_, err := readOne(t, frame, packets.V311, 1, same)
	wantCode(t, err, packets.PacketTooLarge)
}

func TestFirstPacketNotConnectReadsOnlyOneByte(t *testing.T) {
	h := &headerOnly{t: t, header: []byte{0x30}}
	_, err := packets.ReadPacket(bufio.NewReaderSize(h, 16), 0, 0)
	wantCode(t, err, packets.ProtocolError)
	fh := packets.FixedHeader{Type: packets.TypePingreq}
	_, err = packets.Decode(fh, nil, 0)
	wantCode(t, err, packets.ProtocolError)
}

func TestLyingLengthDoesNotReserveMemory(t *testing.T) {
	// 200 MB declared, 10 bytes sent, then EOF: no limit configured, so
	// only incremental allocation protects us (CVE-2017-7651).
	frame := append([]byte{0x30, 0x80, 0x80, 0x80, 0x64}, make([]byte, 10)...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := readOne(t, frame, packets.V311, 0, same)
	runtime.ReadMemStats(&after)
	if err != io.ErrUnexpectedEOF {
		t.Fatalf("got %v, want io.ErrUnexpectedEOF", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("allocated %d bytes for a 10-byte body", grew)
	}
}

func TestLargeBodyReadIncrementally(t *testing.T) {
	payload := bytes.Repeat([]byte("x"), 300_000)
	p := &packets.Publish{Topic: "big", Payload: payload}
	frame, err := p.Append(nil, packets.V311)
	if err != nil {
		t.Fatal(err)
	}
	got, err := readOne(t, frame, packets.V311, 0, same)
	if err != nil {
		t.Fatal(err)
	}
	if gp := got.(*packets.Publish); gp.Topic != "big" || !bytes.Equal(gp.Payload, payload) {
		t.Fatal("large PUBLISH did not survive the round trip")
	}
}

func TestRemainingLengthLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdr  []byte
		want int
	}{
		{"1 byte max", []byte{0x7F}, 127},
		{"2 bytes min", []byte{0x80, 0x01}, 128},
		{"4 bytes max", []byte{0xFF, 0xFF, 0xFF, 0x7F}, packets.MaxRemainingLength},
	} {
		fh, err := packets.ReadFixedHeader(bufio.NewReader(bytes.NewReader(append([]byte{0xC0}, tc.hdr...))))
		if err != nil || fh.Remaining != tc.want || fh.Type != packets.TypePingreq {
			t.Errorf("%s: %+v, %v; want remaining %d", tc.name, fh, err, tc.want)
		}
		if got := packets.AppendVarInt(nil, tc.want); !bytes.Equal(got, tc.hdr) || packets.VarIntSize(tc.want) != len(tc.hdr) {
			t.Errorf("%s: AppendVarInt(%d) = % X, size %d", tc.name, tc.want, got, packets.VarIntSize(tc.want))
		}
	}
	_, err := packets.ReadFixedHeader(bufio.NewReader(bytes.NewReader([]byte{0xC0, 0x80, 0x80, 0x80, 0x80, 0x01})))
	wantCode(t, err, packets.MalformedPacket)
}

func TestUnsupportedVersionReturnsConnect(t *testing.T) {
	raw := []byte{0x10, 0x0C, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x06, 0x02, 0x00, 0x3C, 0x00, 0x00}
	p, err := readOne(t, raw, 0, 0, same)
	wantCode(t, err, packets.UnsupportedProtocolVersion)
	c, ok := p.(*packets.Connect)
	if !ok || c.ProtocolVersion != 6 || c.ProtocolName != "MQTT" {
		t.Fatalf("got %#v, want the partial CONNECT with level 6", p)
	}
	raw[5] = 'X'
	p, err = readOne(t, raw, 0, 0, same)
	wantCode(t, err, packets.ProtocolError)
	if c, ok := p.(*packets.Connect); !ok || c.ProtocolName != "MXTT" {
		t.Fatalf("got %#v, want the partial CONNECT named MXTT", p)
	}
}

func TestDecodeBodyLengthMismatch(t *testing.T) {
	_, err := packets.Decode(packets.FixedHeader{Type: packets.TypePingreq, Remaining: 1}, nil, packets.V311)
	wantCode(t, err, packets.MalformedPacket)
}

func TestAppendErrors(t *testing.T) {
	long := strings.Repeat("a", 70_000)
	// 5000 user properties sharing one 65,535-byte key encode to more than
	// MaxRemainingLength without holding that much memory.
	huge := make([]packets.UserProperty, 5000)
	for i := range huge {
		huge[i].Key = long[:65535]
	}
	for _, tc := range []struct {
		name string
		p    packets.Packet
		v    packets.Version
	}{
		{"version 0", &packets.Pingreq{}, 0},
		{"version 6", &packets.Publish{Topic: "t"}, 6},
		{"publish QoS 3", &packets.Publish{Topic: "t", QoS: 3}, packets.V311},
		{"long topic", &packets.Publish{Topic: long}, packets.V311},
		{"long client id", &packets.Connect{ClientID: long}, packets.V311},
		{"will QoS 3", &packets.Connect{WillFlag: true, WillQoS: 3}, packets.V5},
		{"long filter", &packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: long}}}, packets.V311},
		{"subscribe QoS 3", &packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "a", Options: packets.SubOptions{QoS: 3}}}}, packets.V5},
		{"long unsubscribe filter", &packets.Unsubscribe{PacketID: 1, Filters: []string{long}}, packets.V5},
		{"auth in 3.1.1", &packets.Auth{}, packets.V311},
		{"long reason string", &packets.Puback{PacketID: 1, Properties: reasonString(long)}, packets.V5},
		{"long user property", &packets.Disconnect{Properties: packets.Properties{User: []packets.UserProperty{{Key: long}}}}, packets.V5},
		{"over the remaining length limit", &packets.Publish{Topic: "t", Properties: packets.Properties{User: huge}}, packets.V5},
	} {
		if _, err := tc.p.Append(nil, tc.v); !errors.Is(err, packets.ErrEncode) {
			t.Errorf("%s: got %v, want ErrEncode", tc.name, err)
		}
	}
}

func reasonString(s string) packets.Properties {
	p := packets.Properties{ReasonString: s}
	p.Set(packets.PropReasonString)
	return p
}

func TestPacketDecodedFromReadPacketOwnsItsBody(t *testing.T) {
	frame := []byte{0x30, 0x05, 0x00, 0x01, 't', 'a', 'b'}
	src := bytes.NewReader(frame)
	p, err := packets.ReadPacket(bufio.NewReader(src), packets.V311, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range frame {
		frame[i] = 0
	}
	if pub := p.(*packets.Publish); pub.Topic != "t" || string(pub.Payload) != "ab" {
		t.Fatalf("packet changed with the source bytes: %#v", pub)
	}
}

func TestErrorString(t *testing.T) {
	_, err := readOne(t, []byte{0x36, 0x03, 0x00, 0x01, 't'}, packets.V311, 0, same)
	if got := err.Error(); !strings.Contains(got, "0x81") || !strings.Contains(got, "[MQTT-3.3.1-4]") {
		t.Fatalf("error text %q lacks the reason code or reference", got)
	}
}

// manyUserProps is a 5.0 QoS 1 PUBLISH carrying n User Properties, all
// empty but the last, named Z, and, after them, a Content Type.
func manyUserProps(tb testing.TB, n int) (packets.FixedHeader, []byte) {
	tb.Helper()
	p := &packets.Publish{Topic: "t", QoS: 1, PacketID: 7, Payload: []byte("x")}
	p.Properties.User = make([]packets.UserProperty, n)
	p.Properties.User[n-1].Key = "Z"
	p.Properties.Set(packets.PropUserProperty)
	p.Properties.ContentType = "text/plain"
	p.Properties.Set(packets.PropContentType)
	frame, err := p.Append(nil, packets.V5)
	if err != nil {
		tb.Fatal(err)
	}
	fh, hn, err := packets.ParseFixedHeader(frame, packets.V5, 0)
	if err != nil {
		tb.Fatal(err)
	}
	return fh, frame[hn:]
}

// TestLimitsMaxUserProperties checks that Limits.MaxUserProperties keeps
// that many User Properties, in order, skips the rest after checking
// them, and decodes what follows them; the zero Limits keeps all.
func TestLimitsMaxUserProperties(t *testing.T) {
	fh, body := manyUserProps(t, 1000)
	for _, tc := range []struct {
		max, want int
	}{{0, 1000}, {65, 65}, {1000, 1000}, {1001, 1000}} {
		var p packets.Publish
		if err := (packets.Limits{MaxUserProperties: tc.max}).DecodePublish(fh, body, packets.V5, &p); err != nil {
			t.Fatalf("max %d: %v", tc.max, err)
		}
		if len(p.Properties.User) != tc.want || p.Properties.ContentType != "text/plain" || p.PacketID != 7 {
			t.Errorf("max %d: %d user properties, content type %q, id %d; want %d, text/plain, 7",
				tc.max, len(p.Properties.User), p.Properties.ContentType, p.PacketID, tc.want)
		}
		got, err := packets.Limits{MaxUserProperties: tc.max}.Decode(fh, body, packets.V5)
		if err != nil || len(got.(*packets.Publish).Properties.User) != tc.want {
			t.Errorf("max %d: Decode kept %d user properties (%v), want %d", tc.max, len(got.(*packets.Publish).Properties.User), err, tc.want)
		}
	}
	// The last User Property's name becomes invalid UTF-8.
	fhBad, bad := manyUserProps(t, 1000)
	bad = bytes.Clone(bad)
	bad[bytes.IndexByte(bad, 'Z')] = 0xFF
	var p packets.Publish
	if err := (packets.Limits{MaxUserProperties: 1}).DecodePublish(fhBad, bad, packets.V5, &p); err == nil {
		t.Error("a broken User Property past the limit was not checked")
	}
}

// BenchmarkDecodeManyUserProperties is a 1 MiB PUBLISH of 200,000 empty
// User Properties, decoded whole and with the broker's default limit.
func BenchmarkDecodeManyUserProperties(b *testing.B) {
	fh, body := manyUserProps(b, 200000)
	for _, max := range []int{0, 65} {
		b.Run(fmt.Sprintf("max=%d", max), func(b *testing.B) {
			b.ReportAllocs()
			var p packets.Publish
			for range b.N {
				if err := (packets.Limits{MaxUserProperties: max}).DecodePublish(fh, body, packets.V5, &p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

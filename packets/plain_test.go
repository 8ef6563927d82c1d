package packets_test

import (
	"bufio"
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"mqttd/packets"
)

// TestAppendPublishPlain checks that AppendPublishPlain gives what
// Publish.Append gives for the same fields without properties, bytes and
// errors, over every version (and one it cannot encode), QoS (and one
// beyond 2), flag and size class, and that a frame with a topic reads
// back as the PUBLISH it was made from.
func TestAppendPublishPlain(t *testing.T) {
	topics := []string{"", "a/b", strings.Repeat("t", 65535), strings.Repeat("t", 65536)}
	payloads := [][]byte{nil, []byte("reading"), bytes.Repeat([]byte{7}, 200)}
	cases := 0
	for _, v := range []packets.Version{packets.V31, packets.V311, packets.V5, 6} {
		for qos := byte(0); qos <= 3; qos++ {
			for flags := 0; flags < 4; flags++ {
				for _, topic := range topics {
					for _, payload := range payloads {
						p := packets.Publish{Dup: flags&1 != 0, QoS: qos, Retain: flags&2 != 0, Topic: topic, Payload: payload}
						if qos > 0 {
							p.PacketID = uint16(0x1234 + flags)
						}
						prefix := []byte{0xee}
						want, wantErr := p.Append(bytes.Clone(prefix), v)
						got, err := packets.AppendPublishPlain(bytes.Clone(prefix), v, p.Dup, p.QoS, p.Retain, p.Topic, p.PacketID, p.Payload)
						if !bytes.Equal(got, want) || (err == nil) != (wantErr == nil) {
							t.Fatalf("v%d qos %d flags %d topic %d bytes payload %d bytes: got % x, %v; Append gives % x, %v",
								v, qos, flags, len(topic), len(payload), got[:min(len(got), 16)], err, want[:min(len(want), 16)], wantErr)
						}
						if err != nil {
							continue
						}
						cases++
						if topic == "" || p.Dup && qos == 0 {
							continue // not a valid PUBLISH to read [MQTT-3.3.1-2], [MQTT-4.7.3-1]
						}
						back, rerr := packets.ReadPacket(bufio.NewReader(bytes.NewReader(got[len(prefix):])), v, 0)
						if rerr != nil {
							t.Fatalf("v%d qos %d: the frame does not read back: %v", v, qos, rerr)
						}
						bp, ok := back.(*packets.Publish)
						if !ok || bp.Dup != p.Dup || bp.QoS != p.QoS || bp.Retain != p.Retain || bp.Topic != p.Topic ||
							bp.PacketID != p.PacketID || !bytes.Equal(bp.Payload, p.Payload) || bp.Properties.Present != 0 {
							t.Fatalf("v%d qos %d flags %d: read back as %+v", v, qos, flags, back)
						}
					}
				}
			}
		}
	}
	if cases == 0 {
		t.Fatal("no case encoded")
	}
}

// TestAppendSuback checks that AppendSuback gives what Suback.Append
// gives for the same packet id and codes, bytes and errors, over every
// version and one it cannot encode, and that the frame reads back as that
// SUBACK.
func TestAppendSuback(t *testing.T) {
	codes := [][]packets.ReasonCode{{0}, {1, packets.SubackFailure, 2}}
	for _, v := range []packets.Version{packets.V31, packets.V311, packets.V5, 6} {
		for _, cs := range codes {
			want, wantErr := (&packets.Suback{PacketID: 0x1234, ReasonCodes: cs}).Append([]byte{0xee}, v)
			got, err := packets.AppendSuback([]byte{0xee}, v, 0x1234, cs)
			if !bytes.Equal(got, want) || (err == nil) != (wantErr == nil) {
				t.Fatalf("v%d %v: % x, %v; Suback.Append gives % x, %v", v, cs, got, err, want, wantErr)
			}
			if err != nil {
				continue
			}
			p, err := packets.ReadPacket(bufio.NewReader(bytes.NewReader(got[1:])), v, 0)
			if sa, ok := p.(*packets.Suback); err != nil || !ok || sa.PacketID != 0x1234 || len(sa.ReasonCodes) != len(cs) {
				t.Fatalf("v%d %v: reads back as %+v, %v", v, cs, p, err)
			}
		}
	}
}

// TestDecodeConnect checks that DecodeConnect, into a Connect that held
// another packet, decodes what Decode does: the same packet, the same
// error, and a packet exactly when Decode returns one.
func TestDecodeConnect(t *testing.T) {
	var frames [][]byte
	for _, cp := range []*packets.Connect{
		{ProtocolName: "MQTT", ProtocolVersion: packets.V5, ClientID: "c", KeepAlive: 30, CleanStart: true,
			UsernameFlag: true, Username: "u", PasswordFlag: true, Password: []byte("p"),
			Properties: packets.Properties{Present: 1 << packets.PropSessionExpiry, SessionExpiry: 9}},
		{ProtocolName: "MQTT", ProtocolVersion: packets.V311, ClientID: "d", WillFlag: true, WillQoS: 1,
			WillTopic: "w", WillPayload: []byte("bye")},
		{ProtocolName: "MQIsdp", ProtocolVersion: packets.V31, ClientID: "e"},
	} {
		b, err := cp.Append(nil, cp.ProtocolVersion)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, b)
	}
	bad := bytes.Clone(frames[1])
	bad[9] |= 0x01 // a reserved connect flag: an error after the level
	frames = append(frames, bad, []byte{0x10, 3, 0, 4, 'M'}, []byte{0x12, 0})
	dirty := &packets.Connect{ClientID: "old", WillFlag: true, Properties: packets.Properties{Present: 1, PayloadFormat: 1}}
	for i, f := range frames {
		fh, n, err := packets.ParseFixedHeader(f, 0, 0)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		want, wantErr := packets.Limits{}.Decode(fh, f[n:], 0)
		got := *dirty
		decoded, err := packets.Limits{}.DecodeConnect(fh, f[n:], &got)
		if fmt.Sprint(err) != fmt.Sprint(wantErr) || decoded != (want != nil) {
			t.Fatalf("frame %d: decoded %v, %v; Decode gives %v, %v", i, decoded, err, want, wantErr)
		}
		if decoded && !reflect.DeepEqual(&got, want) {
			t.Fatalf("frame %d: %+v, Decode gives %+v", i, got, want)
		}
	}
}

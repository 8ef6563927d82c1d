package packets_test

import (
	"bufio"
	"bytes"
	"reflect"
	"testing"

	"mqttd/packets"
	"mqttd/packets/packettest"
)

var fuzzVersions = [...]packets.Version{0, packets.V31, packets.V311, packets.V5}

func versionIndex(v packets.Version) byte {
	for i, fv := range fuzzVersions {
		if fv == v {
			return byte(i)
		}
	}
	return 0
}

// encodingVersion is the version a decoded packet re-encodes with: a
// CONNECT's own level, otherwise the connection's.
func encodingVersion(p packets.Packet, v packets.Version) packets.Version {
	if c, ok := p.(*packets.Connect); ok {
		return c.ProtocolVersion
	}
	return v
}

// checkReencode asserts that a decoded packet encodes to a frame of its
// Size, no longer than the frame it came from, that decodes to an equal
// packet.
func checkReencode(t *testing.T, p packets.Packet, v packets.Version, original int) {
	t.Helper()
	v = encodingVersion(p, v)
	out, err := p.Append(nil, v)
	if err != nil {
		t.Fatalf("decoded %#v does not encode: %v", p, err)
	}
	if len(out) != p.Size(v) || len(out) > original {
		t.Fatalf("encoded %d bytes, Size %d, original %d", len(out), p.Size(v), original)
	}
	again, err := packets.ReadPacket(bufio.NewReader(bytes.NewReader(out)), v, 0)
	if err != nil {
		t.Fatalf("re-encoded % X does not decode: %v", out, err)
	}
	if !reflect.DeepEqual(again, p) {
		t.Fatalf("round trip changed the packet:\n%#v\n%#v", p, again)
	}
}

func FuzzReadPacket(f *testing.F) {
	for _, fx := range packettest.All() {
		f.Add(fx.Raw, versionIndex(fx.Version), uint16(len(fx.Raw)/2))
	}
	f.Fuzz(func(t *testing.T, data []byte, vi byte, split uint16) {
		v := fuzzVersions[int(vi)%len(fuzzVersions)]
		cr := &chunkReader{data: data, chunks: []int{int(split) + 1}}
		p, err := packets.ReadPacket(bufio.NewReaderSize(cr, 16), v, 0)
		if err != nil {
			return
		}
		checkReencode(t, p, v, len(data))
	})
}

func FuzzDecode(f *testing.F) {
	for _, fx := range packettest.All() {
		r := bufio.NewReader(bytes.NewReader(fx.Raw))
		fh, err := packets.ReadFixedHeader(r)
		if err != nil || fh.Remaining > len(fx.Raw) {
			continue
		}
		f.Add(fx.Raw[0], versionIndex(fx.Version), fx.Raw[len(fx.Raw)-fh.Remaining:])
	}
	f.Fuzz(func(t *testing.T, first, vi byte, body []byte) {
		v := fuzzVersions[int(vi)%len(fuzzVersions)]
		fh := packets.FixedHeader{Type: packets.Type(first >> 4), Flags: first & 0x0F, Remaining: len(body)}
		p, err := packets.Decode(fh, bytes.Clone(body), v)
		if packets.IsAck(fh.Type) {
			checkDecodeAck(t, fh, body, v, p, err)
		}
		if err != nil {
			return
		}
		checkReencode(t, p, v, 1+packets.VarIntSize(len(body))+len(body))
	})
}

// checkDecodeAck holds DecodeAck to what Decode made of the same frame:
// the same error, or the same packet, encoded alike.
func checkDecodeAck(t *testing.T, fh packets.FixedHeader, body []byte, v packets.Version, p packets.Packet, err error) {
	t.Helper()
	var a packets.Ack
	aerr := packets.Limits{}.DecodeAck(fh, bytes.Clone(body), v, &a)
	if (err == nil) != (aerr == nil) || err != nil && err.Error() != aerr.Error() {
		t.Fatalf("Decode: %v; DecodeAck: %v", err, aerr)
	}
	if err != nil {
		return
	}
	if got := a.Packet(); !reflect.DeepEqual(got, p) {
		t.Fatalf("DecodeAck %+v, Decode %+v", got, p)
	}
	want, _ := p.Append(nil, v)
	if got, err := a.Append(nil, v); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Ack.Append %x, %v; packet's Append %x", got, err, want)
	}
}

// fixtureProps collects every Properties value in a packet struct.
func fixtureProps(p packets.Packet) []packets.Properties {
	var out []packets.Properties
	if p == nil {
		return nil
	}
	v := reflect.ValueOf(p).Elem()
	for i := range v.NumField() {
		if props, ok := v.Field(i).Interface().(packets.Properties); ok {
			out = append(out, props)
		}
	}
	return out
}

func FuzzProperties(f *testing.F) {
	for _, fx := range packettest.Valid {
		for _, props := range fixtureProps(fx.Packet) {
			b, err := props.Append(nil)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b, byte(fx.Packet.Type()), false)
		}
	}
	f.Add([]byte{6, 0x0B, 0x80, 0x80, 0x80, 0x80, 0x01}, byte(packets.TypePublish), false)
	f.Add([]byte{5, 0x18, 0, 0, 0, 9}, byte(packets.TypeConnect), true)
	f.Fuzz(func(t *testing.T, raw []byte, typ byte, will bool) {
		ty := packets.Type(typ & 0x0F)
		var p packets.Properties
		n, err := p.Decode(raw, ty, will)
		if err != nil {
			return
		}
		out, err := p.Append(nil)
		if err != nil {
			t.Fatalf("decoded properties do not encode: %v", err)
		}
		if len(out) != p.Size() || len(out) > n {
			t.Fatalf("encoded %d bytes, Size %d, consumed %d", len(out), p.Size(), n)
		}
		var again packets.Properties
		if m, err := again.Decode(out, ty, will); err != nil || m != len(out) {
			t.Fatalf("re-encoded % X: consumed %d, %v", out, m, err)
		}
		if !reflect.DeepEqual(again, p) {
			t.Fatalf("round trip changed the properties:\n%+v\n%+v", p, again)
		}
	})
}

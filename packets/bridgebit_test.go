package packets

import (
	"bytes"
	"testing"
)

// TestConnectBridgeBit: a 3.1.1 or 3.1 CONNECT with the bridge bit in its
// protocol level (Mosquitto's try_private) decodes as that version with
// Bridge set, and encodes back to the same bytes; 5.0 has no such bit.
func TestConnectBridgeBit(t *testing.T) {
	for _, v := range []Version{V311, V31} {
		c := &Connect{ClientID: "gw.cloud", KeepAlive: 60, Bridge: true}
		b, err := c.Append(nil, v)
		if err != nil {
			t.Fatal(err)
		}
		fh, n, err := ParseFixedHeader(b, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if level := b[n+2+len(protocolName(v))]; level != byte(v)|0x80 {
			t.Errorf("level byte %#x, want %#x", level, byte(v)|0x80)
		}
		p, err := Decode(fh, b[n:], 0)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		got := p.(*Connect)
		if !got.Bridge || got.ProtocolVersion != v || got.ClientID != "gw.cloud" {
			t.Errorf("decoded %+v, want a %v bridge", got, v)
		}
		again, _ := got.Append(nil, got.ProtocolVersion)
		if !bytes.Equal(again, b) {
			t.Errorf("re-encoded % x, want % x", again, b)
		}
	}
	b, _ := (&Connect{ClientID: "x", Bridge: true}).Append(nil, V5)
	fh, n, _ := ParseFixedHeader(b, 0, 0)
	if p, err := Decode(fh, b[n:], 0); err != nil || p.(*Connect).Bridge {
		t.Errorf("5.0 CONNECT: %v, bridge %v; want no bridge bit", err, p.(*Connect).Bridge)
	}
}

package listeners

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
	"testing/iotest"
)

// v2Header builds a version 2 header: command, family and body.
func v2Header(cmd, fam byte, body []byte) []byte {
	b := append([]byte(nil), v2Signature...)
	b = append(b, 0x20|cmd, fam, 0, 0)
	binary.BigEndian.PutUint16(b[14:], uint16(len(body)))
	return append(b, body...)
}

func TestReadProxyHeader(t *testing.T) {
	tcp4 := []byte{203, 0, 113, 7, 10, 0, 0, 1, 0x30, 0x39, 0x07, 0x5b} // 203.0.113.7:12345 -> 10.0.0.1:1883
	tcp6 := append(netip.MustParseAddr("2001:db8::7").AsSlice(), netip.MustParseAddr("2001:db8::1").AsSlice()...)
	tcp6 = append(tcp6, 0x30, 0x39, 0x07, 0x5b)
	for _, tc := range []struct {
		name string
		in   []byte
		want string // client address; "" for none; "error" for a refusal
	}{
		{"v1 TCP4", []byte("PROXY TCP4 203.0.113.7 10.0.0.1 12345 1883\r\n"), "203.0.113.7:12345"},
		{"v1 TCP6", []byte("PROXY TCP6 2001:db8::7 2001:db8::1 12345 1883\r\n"), "[2001:db8::7]:12345"},
		{"v1 UNKNOWN", []byte("PROXY UNKNOWN\r\n"), ""},
		{"v1 longest", []byte("PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n"), ""},
		{"v1 too long", []byte("PROXY UNKNOWN " + strings.Repeat("x", 100) + "\r\n"), "error"},
		{"v1 without CR", []byte("PROXY TCP4 203.0.113.7 10.0.0.1 12345 1883\n"), "error"},
		{"v1 IPv6 as TCP4", []byte("PROXY TCP4 2001:db8::7 2001:db8::1 12345 1883\r\n"), "error"},
		{"v1 mixed families", []byte("PROXY TCP6 2001:db8::7 10.0.0.1 12345 1883\r\n"), "error"},
		{"v1 port too big", []byte("PROXY TCP4 203.0.113.7 10.0.0.1 65536 1883\r\n"), "error"},
		{"v1 port with leading zero", []byte("PROXY TCP4 203.0.113.7 10.0.0.1 0123 1883\r\n"), "error"},
		{"v1 missing field", []byte("PROXY TCP4 203.0.113.7 10.0.0.1 12345\r\n"), "error"},
		{"v1 UDP", []byte("PROXY UDP4 203.0.113.7 10.0.0.1 12345 1883\r\n"), "error"},
		{"v2 TCP4", v2Header(1, 0x11, tcp4), "203.0.113.7:12345"},
		{"v2 TCP6", v2Header(1, 0x21, tcp6), "[2001:db8::7]:12345"},
		{"v2 TCP4 with TLVs", v2Header(1, 0x11, append(append([]byte(nil), tcp4...), 0x04, 0, 2, 'h', 'i')), "203.0.113.7:12345"},
		{"v2 LOCAL", v2Header(0, 0x00, nil), ""},
		{"v2 UNSPEC", v2Header(1, 0x00, nil), ""},
		{"v2 UDP4", v2Header(1, 0x12, tcp4), ""},
		{"v2 TCP4 cut short", v2Header(1, 0x11, tcp4[:8]), "error"},
		{"v2 TCP6 cut short", v2Header(1, 0x21, tcp6[:20]), "error"},
		{"v2 bad command", v2Header(2, 0x11, tcp4), "error"},
		{"v2 bad version", append(append(append([]byte(nil), v2Signature...), 0x11, 0x11, 0, 12), tcp4...), "error"},
		{"v2 too long", v2Header(1, 0x11, make([]byte, v2MaxLen+1)), "error"},
		{"v2 body missing", v2Header(1, 0x11, tcp4)[:20], "error"},
		{"MQTT CONNECT", []byte{0x10, 0x0d, 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 60, 0, 1, 'x'}, "error"},
		{"short", []byte("PROXY"), "error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// One byte per read, and MQTT bytes after the header: the
			// reader must stop at the header's last byte.
			tail := []byte{0x10, 0xff}
			r := bytes.NewReader(append(append([]byte(nil), tc.in...), tail...))
			src, ok, err := readProxyHeader(iotest.OneByteReader(r))
			switch {
			case tc.want == "error":
				if err == nil {
					t.Fatalf("accepted, with %v %v", src, ok)
				}
				return
			case err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == "" && ok, tc.want != "" && (!ok || src.String() != tc.want):
				t.Fatalf("got %v (ok %v), want %q", src, ok, tc.want)
			}
			if r.Len() != len(tail) {
				t.Fatalf("left %d bytes after the header, want %d", r.Len(), len(tail))
			}
		})
	}
}

// FuzzReadProxyHeader checks that no input panics the parser, that it
// never reads past a header it accepts nor more than the longest header,
// and that what it accepts parses the same again.
func FuzzReadProxyHeader(f *testing.F) {
	f.Add([]byte("PROXY TCP4 203.0.113.7 10.0.0.1 12345 1883\r\n"))
	f.Add([]byte("PROXY TCP6 2001:db8::7 2001:db8::1 12345 1883\r\nrest"))
	f.Add([]byte("PROXY UNKNOWN\r\n"))
	f.Add(v2Header(1, 0x11, []byte{203, 0, 113, 7, 10, 0, 0, 1, 0x30, 0x39, 0x07, 0x5b}))
	f.Add(v2Header(1, 0x21, make([]byte, 36)))
	f.Add(v2Header(0, 0x00, []byte{1, 2, 3}))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		src, ok, err := readProxyHeader(r)
		used := len(in) - r.Len()
		if used > 16+v2MaxLen {
			t.Fatalf("read %d bytes", used)
		}
		if err != nil {
			return
		}
		if ok && !src.Addr().IsValid() {
			t.Fatalf("accepted an invalid address %v", src)
		}
		src2, ok2, err2 := readProxyHeader(bytes.NewReader(in[:used]))
		if err2 != nil || src2 != src || ok2 != ok {
			t.Fatalf("the header alone parses as %v %v %v, not %v %v", src2, ok2, err2, src, ok)
		}
	})
}

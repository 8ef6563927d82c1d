package packets_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"mqttd/packets"
)

// referenceValid is the MQTT rule written the obvious way.
func referenceValid(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

var utf8Cases = []struct {
	s    string
	want bool
}{
	{"", true},
	{"a/b/c", true},
	{"\uFEFFtopic", true},              // BOM kept [MQTT-1.5.4-3]
	{"caf\u00e9/\U0001F600", true},     // 2- and 4-byte sequences
	{"\u0001\u007F\u009F\uFFFF", true}, // control and non-characters: broker policy, not malformed
	{"a\x00b", false},                  // U+0000 [MQTT-1.5.4-2]
	{"\xC0\x80", false},                // overlong U+0000
	{"\xE0\x80\xAF", false},            // overlong '/'
	{"\xED\xA0\x80", false},            // surrogate U+D800
	{"\xED\xBF\xBF", false},            // surrogate U+DFFF
	{"\xE2\x82", false},                // truncated sequence
	{"\xF4\x90\x80\x80", false},        // above U+10FFFF
	{"\xFF", false},
	{"ok\x80", false}, // stray continuation byte
}

func TestValidUTF8String(t *testing.T) {
	for _, tc := range utf8Cases {
		if got := packets.ValidUTF8String(tc.s); got != tc.want {
			t.Errorf("ValidUTF8String(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

func FuzzUTF8(f *testing.F) {
	for _, tc := range utf8Cases {
		f.Add(tc.s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := packets.ValidUTF8String(s), referenceValid(s); got != want {
			t.Fatalf("ValidUTF8String(%q) = %v, reference %v", s, got, want)
		}
	})
}

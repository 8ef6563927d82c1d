package mqttd

import (
	"bytes"
	"strings"
	"testing"
	"unsafe"

	"mqttd/session"
)

// TestCopiedMessage checks the copy a borrowed message gets at every
// size around newWithBytes's: topic and payload equal to the source's and
// independent of its bytes, the payload's capacity ending with it, the
// other fields carried over, and up to 400 bytes one allocation.
func TestCopiedMessage(t *testing.T) {
	frame := make([]byte, 700)
	for n := 0; n <= len(frame); n++ {
		topicLen := min(n, 7)
		for i := range frame[:n] {
			frame[i] = byte('a' + (n+i)%26)
		}
		// The topic aliases the frame, as a decoded one does.
		src := &session.Message{Topic: aliasString(frame[:topicLen]), Payload: frame[topicLen:n], QoS: 1, Retain: true, Origin: "o"}
		wantTopic, wantPayload := strings.Clone(src.Topic), bytes.Clone(src.Payload)
		m := copiedMessage(src)
		for i := range frame[:n] {
			frame[i] = 0 // the next read reuses the buffer
		}
		if m.Topic != wantTopic || !bytes.Equal(m.Payload, wantPayload) {
			t.Fatalf("%d bytes: copy has topic %q payload %q, want %q %q", n, m.Topic, m.Payload, wantTopic, wantPayload)
		}
		if cap(m.Payload) != len(m.Payload) {
			t.Fatalf("%d bytes: payload capacity %d past its length %d", n, cap(m.Payload), len(m.Payload))
		}
		if m.QoS != 1 || !m.Retain || m.Origin != "o" {
			t.Fatalf("%d bytes: copy %+v lost the source's fields", n, m)
		}
	}
	// On 64-bit platforms; a 32-bit one has smaller pointers, and its
	// objects only fill the size classes less exactly.
	if size := unsafe.Sizeof(session.Message{}); unsafe.Sizeof(uintptr(0)) == 8 && size != 88 {
		t.Errorf("session.Message is %d bytes: newWithBytes's sizes assume 88", size)
	}
	src := &session.Message{Topic: "t/opic", Payload: make([]byte, 418)}
	if got := testing.AllocsPerRun(100, func() { copiedMessage(src) }); got != 1 {
		t.Errorf("copiedMessage of 424 bytes: %v allocations, want 1", got)
	}
}

// aliasString is b as a string without a copy, as the codec decodes one.
func aliasString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

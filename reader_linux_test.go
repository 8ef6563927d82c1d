//go:build linux

package mqttd

import (
	"runtime"
	"testing"
)

// TestLargeFrameBufferedInStep checks that a frame arriving in many reads is
// appended to, not copied whole at every read: buffering a 1 MiB frame must
// allocate a small multiple of its size, not one copy per 16 KiB read.
func TestLargeFrameBufferedInStep(t *testing.T) {
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := &conn{srv: s, ev: &eventConn{}, version: 4}
	const size = 1 << 20
	frame := make([]byte, size)
	rem := size - 4
	frame[0] = 0x30 // PUBLISH, QoS 0
	frame[1], frame[2], frame[3] = byte(rem&0x7f|0x80), byte(rem>>7&0x7f|0x80), byte(rem>>14)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for off := 0; off+eventReadBufSize < size; off += eventReadBufSize {
		if _, err := c.consume(frame[off:off+eventReadBufSize], nil); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4*size {
		t.Errorf("buffering one %d-byte frame allocated %d bytes (%.1fx)", size, alloc, float64(alloc)/size)
	}
}

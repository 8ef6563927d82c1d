package mqttd

import (
	"net"
	"testing"

	"mqttd/packets"
)

// Regression tests for defects a review of the engine restructuring found.

// session311 connects a 3.1.1 client and reads its CONNACK.
func session311(t *testing.T, addr, id string, clean bool) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	b, _ := (&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, ClientID: id, CleanStart: clean}).Append(nil, packets.V311)
	nc.Write(b)
	readFull(t, nc, 4) // CONNACK
	return nc
}

// filed reports how many ticks and sessions the expiry wheel holds.
func (w *expiryWheel) filed() (ticks, sessions int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, slot := range w.slots {
		sessions += len(slot.clients)
	}
	return len(w.ticks), sessions
}

// TestExpiryWheelKeepsNothingBehind checks a client that comes back often
// leaves nothing in the expiry wheel but its one offline session, and a
// session dropped by a clean start leaves nothing at all: the wheel must
// not keep a dropped session, and its queue, alive until its tick.
func TestExpiryWheelKeepsNothingBehind(t *testing.T) {
	s, addr := startTestServer(t, Options{}, nil)
	offline := func(nc net.Conn) {
		t.Helper()
		b, _ := (&packets.Disconnect{}).Append(nil, packets.V311)
		nc.Write(b)
		waitUntil(t, "the session offline", func() bool { return s.stats.sessionsOnline.Load() == 0 })
	}
	for range 300 {
		offline(session311(t, addr, "flapper", false))
	}
	if ticks, sessions := s.expiry.filed(); ticks != 1 || sessions != 1 {
		t.Errorf("after 300 reconnects: %d ticks, %d sessions filed; want 1, 1", ticks, sessions)
	}
	offline(session311(t, addr, "flapper", true)) // a clean start drops the session
	if ticks, sessions := s.expiry.filed(); ticks != 0 || sessions != 0 {
		t.Errorf("after the session was dropped: %d ticks, %d sessions filed; want none", ticks, sessions)
	}
}

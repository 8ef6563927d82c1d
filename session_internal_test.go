package mqttd

import (
	"math/rand/v2"
	"net"
	"slices"
	"testing"
	"time"

	"mqttd/packets"
)

// TestExpiryWheelCancel files many clients under one tick and takes them
// out in a random order: each cancel removes exactly its client, the
// others stay due, a client not filed there is left alone, and the slot
// leaves the wheel with its last client.
func TestExpiryWheelCancel(t *testing.T) {
	w := newExpiryWheel()
	at := time.Now().Add(time.Minute).UnixNano()
	clients := make([]*client, 1000)
	for i := range clients {
		clients[i] = &client{id: string(rune('a' + i%26))}
		w.schedule(clients[i], at)
	}
	stranger := &client{}
	w.schedule(stranger, at+int64(time.Hour))
	w.cancel(stranger, at) // filed under another tick: nothing happens here
	order := rand.Perm(len(clients))
	for n, i := range order[:len(order)-1] {
		w.cancel(clients[i], at)
		w.cancel(clients[i], at) // twice: the second finds nothing
		if got, want := len(w.slots[expiryTickOf(at)].clients), len(clients)-n-1; got != want {
			t.Fatalf("after %d cancels the slot holds %d clients, want %d", n+1, got, want)
		}
	}
	due, _ := w.due(at + int64(expiryTick))
	if want := clients[order[len(order)-1]]; !slices.Equal(due, []*client{want}) {
		t.Fatalf("due %d clients, want only the one not cancelled", len(due))
	}
	w.cancel(stranger, at+int64(time.Hour))
	if len(w.slots) != 0 || len(w.ticks) != 0 {
		t.Errorf("%d slots, %d ticks left; want none", len(w.slots), len(w.ticks))
	}
}

// BenchmarkExpiryCancel is the reconnect of one client among many that
// went offline in the same tick.
func BenchmarkExpiryCancel(b *testing.B) {
	w := newExpiryWheel()
	at := time.Now().Add(time.Minute).UnixNano()
	clients := make([]*client, 50000)
	for i := range clients {
		clients[i] = &client{}
		w.schedule(clients[i], at)
	}
	b.ResetTimer()
	for i := range b.N {
		cl := clients[i%len(clients)]
		w.cancel(cl, at)
		w.schedule(cl, at)
	}
}

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

// filed reports how many ticks and sessions the expiry wheel holds.
func (w *expiryWheel) filed() (ticks, sessions int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, slot := range w.slots {
		sessions += len(slot.clients)
	}
	return len(w.ticks), sessions
}

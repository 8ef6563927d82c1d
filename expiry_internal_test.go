package mqttd

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
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

package session

import "testing"

// TestStampsRemembered: a stamp is seen until its expiry, and past
// MaxStamps the oldest is forgotten first, reported as evicted; expired
// ones go without being counted.
func TestStampsRemembered(t *testing.T) {
	s := New(Config{}.Limits())
	const now, ttl = int64(1000), int64(100)
	st := func(i int) Stamp { return Stamp{Node: 1, Seq: uint64(i)} }
	if s.Seen(st(1), now) {
		t.Fatal("seen before remembered")
	}
	if s.Remember(st(1), now+ttl, now) {
		t.Fatal("an eviction with one stamp")
	}
	if !s.Seen(st(1), now) || s.Seen(st(1), now+ttl) || s.Seen(st(2), now) {
		t.Fatal("st(1) not seen until its expiry only")
	}
	// Expired stamps go first, uncounted.
	if s.Remember(st(2), now+2*ttl+1, now+ttl+1) {
		t.Fatal("an expired stamp counted as evicted")
	}
	if got := len(s.Stamps(now + ttl + 1)); got != 1 {
		t.Fatalf("%d stamps remembered, want 1", got)
	}
	later := now + 2*ttl
	evicted := 0
	for i := 3; i < 3+MaxStamps; i++ {
		if s.Remember(st(i), later+ttl, later) {
			evicted++
		}
	}
	if evicted != 1 || s.Seen(st(2), later) || !s.Seen(st(3), later) || !s.Seen(st(2+MaxStamps), later) {
		t.Fatalf("evicted %d, want the oldest only (st(2))", evicted)
	}
	if got := len(s.Stamps(later)); got != MaxStamps {
		t.Fatalf("%d stamps remembered, want %d", got, MaxStamps)
	}
	s.Clear(nil)
	if s.Seen(st(3), later) {
		t.Fatal("a cleared session remembers a stamp")
	}
}

// TestStampForgotten: a stamp whose store failed is forgotten, unless it
// was remembered again since.
func TestStampForgotten(t *testing.T) {
	s := New(Config{}.Limits())
	const now = int64(1000)
	a, b := Stamp{Node: 1, Seq: 1}, Stamp{Node: 1, Seq: 2}
	s.Forget(a, now+100) // none remembered: nothing to do
	s.Remember(a, now+100, now)
	s.Remember(b, now+100, now)
	s.Forget(a, now+100)
	if s.Seen(a, now) || !s.Seen(b, now) {
		t.Fatal("Forget(a): a still seen, or b forgotten with it")
	}
	s.Remember(a, now+200, now)
	s.Forget(a, now+100)
	if !s.Seen(a, now) {
		t.Fatal("a stamp remembered again was forgotten for its earlier expiry")
	}
	// The queue's stale entry for a does not evict the one remembered again.
	if s.Remember(Stamp{Node: 1, Seq: 3}, now+300, now+150) || !s.Seen(a, now+150) {
		t.Fatal("a remembered again was evicted by its old entry's expiry")
	}
}

// TestForwardFollowsItsID: a Forward is kept only for an id awaiting
// PUBREL, and goes with it.
func TestForwardFollowsItsID(t *testing.T) {
	s := New(Config{}.Limits())
	f := &Forward{Stamp: Stamp{Node: 1, Seq: 1}, Msg: &Message{Topic: "t"}}
	s.SetForward(5, f)
	if s.ForwardOf(5) != nil {
		t.Fatal("a Forward kept for an id not awaiting PUBREL")
	}
	if isNew, err := s.ReceiveQoS2(5); !isNew || err != nil {
		t.Fatal(isNew, err)
	}
	s.SetForward(5, f)
	n := 0
	s.Forwards(func(id uint16, fw *Forward) {
		if id != 5 || fw != f {
			t.Fatalf("Forwards gave %d %+v", id, fw)
		}
		n++
	})
	if isNew, _ := s.ReceiveQoS2(5); isNew || s.ForwardOf(5) != f || n != 1 {
		t.Fatal("the Forward did not stay with its id sent again")
	}
	s.Pubrel(5)
	if s.ForwardOf(5) != nil {
		t.Fatal("the Forward outlived its id")
	}
}

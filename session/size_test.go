package session

import (
	"testing"
	"unsafe"
)

// An online client's session fills an 80-byte allocation, and subscribing
// to a few filters leaves its rare part unallocated: the broker holds one
// per client, idle or not.
func TestSessionStaysSmall(t *testing.T) {
	if size := unsafe.Sizeof(Session{}); unsafe.Sizeof(uintptr(0)) == 8 && size > 80 {
		t.Errorf("Session is %d bytes, past the 80-byte size class", size)
	}
	s := New(Config{}.Limits())
	s.Subscribe(Subscription{Filter: "a/b"})
	s.SetExpireAt(0)
	if s.Pubrel(1) || s.AwaitingRel() != 0 || s.LeftAt() != 0 || s.Seen(Stamp{1, 1}, 0) {
		t.Fatal("a new session reports state it never had")
	}
	if s.rare != nil {
		t.Error("an online client's session with one subscription allocated its rare part")
	}
	s.SetLeftAt(5)
	if _, err := s.ReceiveQoS2(7); err != nil {
		t.Fatal(err)
	}
	s.Clear(nil)
	if s.LeftAt() != 5 || s.AwaitingRel() != 0 {
		t.Errorf("after Clear: left at %d, %d awaiting PUBREL; want 5 and 0", s.LeftAt(), s.AwaitingRel())
	}
}

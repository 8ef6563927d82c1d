package mqttd

import (
	"fmt"
	"testing"
	"time"
)

// TestRetainedSendsSwept checks that the allowances of clients that have
// not been sent retained messages for limits.retained_send_refill are
// dropped as others are added: idle clients hold none.
func TestRetainedSendsSwept(t *testing.T) {
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	refill := s.limits().RetainedSendRefill
	now := time.Now()
	spend := func(prefix string, n int, at time.Time) {
		for i := range n {
			a := s.retainedAllowance(fmt.Sprintf("%s-%d", prefix, i), at)
			a.sent, a.sentBytes = 1, 10
			s.retainedSent(fmt.Sprintf("%s-%d", prefix, i), &a, at)
		}
	}
	spend("old", 1000, now)
	if got := len(s.retainedSends.clients); got != 1000 {
		t.Fatalf("%d allowances kept, want 1000", got)
	}
	spend("new", 1000, now.Add(refill))
	if got := len(s.retainedSends.clients); got > 1000 {
		t.Errorf("%d allowances kept after the first 1000 refilled, want at most the 1000 in use", got)
	}
	for id := range s.retainedSends.clients {
		if id[:3] == "old" {
			t.Fatalf("the refilled allowance of %s is still kept", id)
		}
	}
}

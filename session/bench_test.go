package session

import (
	"fmt"
	"testing"
)

// BenchmarkSubscribeMany subscribes one session to 40,000 filters, as a
// client listing that many in its SUBSCRIBEs does: a scan per filter
// made this quadratic.
func BenchmarkSubscribeMany(b *testing.B) {
	filters := make([]string, 40000)
	for i := range filters {
		filters[i] = fmt.Sprintf("dev/%d/cmd", i)
	}
	b.ResetTimer()
	for range b.N {
		s := New("c", Config{}.Limits())
		for _, f := range filters {
			s.Subscribe(Subscription{Filter: f})
		}
	}
}

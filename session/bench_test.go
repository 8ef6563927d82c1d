package session

import (
	"fmt"
	"testing"
	"time"
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
		s := New(Config{}.Limits())
		for _, f := range filters {
			s.Subscribe(Subscription{Filter: f})
		}
	}
}

// BenchmarkResendWindow sends a window of 20,000 entries again after a
// reconnect: linear in the window, not quadratic.
func BenchmarkResendWindow(b *testing.B) {
	const n = 20000
	now := time.Now()
	m := &Message{Topic: "t", Payload: []byte("x")}
	for range b.N {
		b.StopTimer()
		s := New(Config{MaxInflight: n}.Limits())
		for range n {
			s.Deliver(Outbound{Msg: m, QoS: 1}, Target{Online: true, CanSend: true}, now)
		}
		s.Resume(0)
		b.StartTimer()
		for {
			if _, ok, _ := s.Next(now, nil); !ok {
				break
			}
		}
	}
}

package cluster

import (
	"sync/atomic"
	"testing"
	"time"

	"mqttd/internal/natstest"
)

// BenchmarkPublish is the cost of a 64-byte QoS 1 message from one node
// to another over two routed nats-servers, Publish to deliver, with at
// most 1,000 in flight so that no queue overflows.
func BenchmarkPublish(b *testing.B) {
	urls := natstest.Cluster(b, 2)
	var got atomic.Int64
	start := func(name, url string, deliver func(*Message)) *Node {
		n, err := Start(Config{Name: "c1", NodeName: name, NATS: NATSConfig{URL: url}}, testLogger(b), deliver)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = n.Close() })
		return n
	}
	// At most 1,000 in flight: each delivery frees a place.
	window := make(chan struct{}, 1000)
	warm, drained := make(chan struct{}, 1), make(chan struct{}, 1)
	var warming atomic.Bool
	warming.Store(true)
	pub := start("P", urls[0], func(*Message) {})
	sub := start("S", urls[1], func(m *Message) {
		if warming.Load() {
			ch := warm
			if m.Topic == "bench/marker" {
				ch = drained
			}
			select {
			case ch <- struct{}{}:
			default:
			}
			return
		}
		got.Add(1)
		<-window
	})
	sub.Want("bench/+")
	m := &Message{Topic: "bench/x", Payload: make([]byte, 64), QoS: 1, Origin: "client-1"}
	// Published until one crosses: the route's interest is then in place.
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for crossed := false; !crossed; {
		_ = pub.Publish(m)
		select {
		case <-warm:
			crossed = true
		case <-tick.C:
		case <-deadline:
			b.Fatal("no message crossed within 10s")
		}
	}
	// The warm-up's last messages are delivered before a marker sent
	// after them on the same subject tree.
	if err := pub.Publish(&Message{Topic: "bench/marker"}); err != nil {
		b.Fatal(err)
	}
	select {
	case <-drained:
	case <-deadline:
		b.Fatal("the marker did not cross within 10s")
	}
	warming.Store(false)
	b.SetBytes(64)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		window <- struct{}{}
		for pub.Publish(m) == ErrQueueFull {
			<-tick.C
		}
	}
	for range cap(window) {
		select {
		case window <- struct{}{}: // every delivery has freed its place
		case <-time.After(time.Minute):
			b.Fatalf("%d of %d delivered", got.Load(), b.N)
		}
	}
}

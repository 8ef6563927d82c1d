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
	pub := start("P", urls[0], func(*Message) {})
	sub := start("S", urls[1], func(*Message) { got.Add(1) })
	sub.Want("bench/+")
	m := &Message{Topic: "bench/x", Payload: make([]byte, 64), QoS: 1, Origin: "client-1"}
	deadline := time.Now().Add(10 * time.Second)
	for got.Load() == 0 {
		if time.Now().After(deadline) {
			b.Fatal("no message crossed within 10s")
		}
		_ = pub.Publish(m)
		time.Sleep(time.Millisecond) // benchmark warm-up only: waiting for the route's interest
	}
	base := got.Load()
	b.SetBytes(64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		for int64(i)-(got.Load()-base) >= 1000 {
			time.Sleep(10 * time.Microsecond)
		}
		for pub.Publish(m) == ErrQueueFull {
			time.Sleep(10 * time.Microsecond)
		}
	}
	for got.Load()-base < int64(b.N) {
		if time.Now().After(deadline.Add(time.Minute)) {
			b.Fatalf("%d of %d delivered", got.Load()-base, b.N)
		}
		time.Sleep(10 * time.Microsecond)
	}
}

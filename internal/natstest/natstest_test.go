package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestClusterRoutesMessages checks the servers are one cluster: a
// subscriber on the last server gets what a client of the first
// publishes, and a server shut down stops accepting clients.
func TestClusterRoutesMessages(t *testing.T) {
	s := Start(t, 3)
	urls := s.URLs()
	if len(urls) != 3 {
		t.Fatalf("%d URLs, want 3", len(urls))
	}
	sub, err := nats.Connect(urls[2])
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ch := make(chan *nats.Msg, 1)
	if _, err := sub.ChanSubscribe("natstest.x", ch); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	pub, err := nats.Connect(urls[0])
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	// Interest crosses the routes asynchronously: publish until it lands.
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for got := false; !got; {
		if err := pub.Publish("natstest.x", []byte("hello")); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-ch:
			if string(m.Data) != "hello" {
				t.Fatalf("got %q", m.Data)
			}
			got = true
		case <-tick.C:
		case <-deadline:
			t.Fatal("no message crossed from server 0 to server 2")
		}
	}
	s.Shutdown(1)
	if _, err := nats.Connect(urls[1], nats.Timeout(time.Second)); err == nil {
		t.Fatal("server 1 still accepts clients after Shutdown")
	}
	if s.Server(1).Running() {
		t.Fatal("server 1 still running after Shutdown")
	}
	for _, i := range []int{0, 2} {
		if n := routesTo(s.Server(i), s.Server(1).ID()); n != 0 {
			t.Fatalf("server %d has %d routes to the stopped server 1", i, n)
		}
	}
}

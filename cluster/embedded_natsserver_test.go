//go:build natsserver

package cluster

import (
	"fmt"
	"mqttd/internal/testutil"
	"testing"
	"time"
)

func startEmbeddedNode(t *testing.T, name, cluster string, r *recorder, routes ...string) *Node {
	t.Helper()
	cfg := Config{Name: "c1", NodeName: name, Replicas: 1, NATS: NATSConfig{Embedded: &EmbeddedConfig{
		Listen: "127.0.0.1:0", Cluster: cluster, Routes: routes, StoreDir: t.TempDir()}}}
	n, err := Start(cfg, testLogger(t), r.deliver)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("Close %s: %v", name, err)
		}
	})
	return n
}

func TestEmbeddedServersRouted(t *testing.T) {
	r1, r2 := newRecorder(), newRecorder()
	a1 := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	a2 := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	n1 := startEmbeddedNode(t, "E1", a1, r1, a2)
	if n1.RouteAddr() != a1 {
		t.Fatalf("RouteAddr %q, want %s", n1.RouteAddr(), a1)
	}
	n2 := startEmbeddedNode(t, "E2", a2, r2, "nats-route://"+a1)
	if n1.ClientURL() == n2.ClientURL() {
		t.Fatalf("both nodes on %s: not two servers", n1.ClientURL())
	}
	n2.Want("e/#")
	// The route and then the interest cross asynchronously: probe until
	// one lands; what follows must arrive.
	deadline := time.Now().Add(10 * time.Second)
	for probed := false; !probed; {
		if time.Now().After(deadline) {
			t.Fatal("no probe crossed from E1 to E2 within 10s")
		}
		if err := n1.Publish(&Message{Topic: "e/probe"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-r2.ch:
			probed = true
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := n1.Publish(&Message{Topic: "e", Payload: []byte("hi"), QoS: 1, Origin: "c"}); err != nil {
		t.Fatal(err)
	}
	got := r2.until(t, "e", "e/probe")
	if m := got[0]; string(m.Payload) != "hi" || m.QoS != 1 || m.Origin != "c" {
		t.Fatalf("E2 got %+v", m)
	}
}

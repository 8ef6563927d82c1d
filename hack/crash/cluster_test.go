package crash

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"mqttd/internal/natstest"
	"mqttd/packets"
)

// startNode runs the mqttd binary as node name of cluster "crash",
// connected to the NATS server at url.
func startNode(t *testing.T, name, url string) *broker {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "mqttd.yaml")
	yaml := fmt.Sprintf("cluster:\n  name: crash\n  node_name: %s\n  nats:\n    url: %s\n", name, url)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return startBroker(t, filepath.Join(dir, "data"), "--config", cfg)
}

// awaitRoute publishes QoS 0 probes on topic at pub until sub, subscribed
// to it, gets one: the subscription's interest has then crossed from
// sub's node to pub's. It returns once the probes stop arriving too.
func awaitRoute(t *testing.T, pub, sub *conn, topic string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := pub.send(&packets.Publish{Topic: topic, Payload: []byte("probe")}); err != nil {
			t.Fatal(err)
		}
		if p, err := sub.next(20 * time.Millisecond); err == nil {
			if pp, ok := p.(*packets.Publish); ok && pp.Topic == topic {
				break
			}
			t.Fatalf("probe: got %s", p.Type())
		}
		if time.Now().After(deadline) {
			t.Fatalf("no probe on %s crossed the cluster within 10 s", topic)
		}
	}
	for {
		if _, err := sub.next(50 * time.Millisecond); err != nil {
			return // the late probes are in
		}
	}
}

// TestClusterNodeKilled: three mqttd processes form a cluster over a NATS
// cluster. A subscriber on node 1 gets every QoS 1 message published on
// node 2, once, while node 3 is killed with SIGKILL in the middle: the
// clients of the other two nodes do not notice.
func TestClusterNodeKilled(t *testing.T) {
	urls := natstest.Cluster(t, 3)
	nodes := []*broker{startNode(t, "n1", urls[0]), startNode(t, "n2", urls[1]), startNode(t, "n3", urls[2])}

	sub, _, err := dial(nodes[0].addr, packets.V311, connectPacket(packets.V311, "sub", true))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.close(true)
	if err := sub.subscribe(1, "k/#", 1); err != nil {
		t.Fatal(err)
	}
	pub, _, err := dial(nodes[1].addr, packets.V311, connectPacket(packets.V311, "pub", true))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.close(true)
	bystander, _, err := dial(nodes[2].addr, packets.V311, connectPacket(packets.V311, "bystander", true))
	if err != nil {
		t.Fatal(err)
	}
	awaitRoute(t, pub, sub, "k/probe")

	const n = 400
	got := make(map[string]int)
	for i := range n {
		if i == n/2 {
			nodes[2].stop(t, syscall.SIGKILL)
			bystander.close(false)
		}
		p := &packets.Publish{Topic: "k/data", QoS: 1, PacketID: uint16(i%60000 + 1), Payload: fmt.Appendf(nil, "%d", i)}
		if err := pub.publishSync(p); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	// The messages published before the fence came before it.
	if err := pub.send(&packets.Publish{Topic: "k/data", Payload: []byte("fence")}); err != nil {
		t.Fatal(err)
	}
	for {
		p, err := sub.next(10 * time.Second)
		if err != nil {
			t.Fatalf("after %d distinct messages: %v", len(got), err)
		}
		pp, ok := p.(*packets.Publish)
		if !ok {
			t.Fatalf("got %s, want PUBLISH", p.Type())
		}
		if pp.QoS == 1 {
			if err := sub.send(&packets.Puback{PacketID: pp.PacketID}); err != nil {
				t.Fatal(err)
			}
		}
		if string(pp.Payload) == "fence" {
			break
		}
		got[string(pp.Payload)]++
	}
	for i := range n {
		switch c := got[fmt.Sprint(i)]; c {
		case 1:
		case 0:
			t.Errorf("message %d did not arrive", i)
		default:
			t.Errorf("message %d arrived %d times", i, c)
		}
	}
	if len(got) != n {
		t.Errorf("%d distinct messages arrived, want %d", len(got), n)
	}
}

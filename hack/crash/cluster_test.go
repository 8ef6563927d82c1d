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

// nodeTimeout is the cluster's node_timeout here: the time a killed
// node's wills wait for the others to find it dead.
const nodeTimeout = 2 * time.Second

// startNode runs the mqttd binary as node name of cluster "crash",
// connected to the NATS server at url; extra are more lines of its
// cluster block.
func startNode(t *testing.T, name, url string, extra ...string) *broker {
	t.Helper()
	return startNodeIn(t, t.TempDir(), name, url, extra...)
}

// startNodeIn is startNode keeping its state in dir (a restart).
func startNodeIn(t *testing.T, dir, name, url string, extra ...string) *broker {
	t.Helper()
	cfg := filepath.Join(dir, "mqttd.yaml")
	yaml := fmt.Sprintf("cluster:\n  name: crash\n  node_name: %s\n  node_timeout: %v\n  nats:\n    url: %s\n",
		name, nodeTimeout, url)
	for _, line := range extra {
		yaml += "  " + line + "\n"
	}
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

// dialUntilServed connects id to addr, again while the node refuses it
// as it cannot claim the id in the cluster yet (CONNACK 0x03), for up to
// 10 s.
func dialUntilServed(t *testing.T, addr string, cp *packets.Connect) *conn {
	t.Helper()
	return dialServedWithin(t, addr, cp, 10*time.Second)
}

// dialServedWithin is dialUntilServed for up to d.
func dialServedWithin(t *testing.T, addr string, cp *packets.Connect, d time.Duration) *conn {
	t.Helper()
	c, _, err := dialServed(addr, cp, d)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// dialServed connects to addr until a CONNACK accepts the connection,
// for up to d, and returns the CONNACK's session present flag.
func dialServed(addr string, cp *packets.Connect, d time.Duration) (*conn, bool, error) {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		c, present, err := dial(addr, packets.V311, cp)
		if err == nil {
			return c, present, nil
		}
		if time.Now().After(deadline) {
			return nil, false, fmt.Errorf("%s not served within %v: %w", cp.ClientID, d, err)
		}
		<-tick.C
	}
}

// TestClusterNodeKilled: three mqttd processes form a cluster over a NATS
// cluster. A subscriber on node 1 gets every QoS 1 message published on
// node 2, once, while node 3 is killed with SIGKILL in the middle: the
// clients of the other two nodes do not notice. The killed node's
// client is served by another node at once, and its will is published
// once, by a survivor, when they find node 3 dead.
func TestClusterNodeKilled(t *testing.T) {
	urls := natstest.Cluster(t, 3)
	nodes := []*broker{startNode(t, "n1", urls[0]), startNode(t, "n2", urls[1]), startNode(t, "n3", urls[2])}

	sub := dialUntilServed(t, nodes[0].addr, connectPacket(packets.V311, "sub", true))
	defer sub.close(true)
	if err := sub.subscribe(1, "k/#", 1); err != nil {
		t.Fatal(err)
	}
	pub := dialUntilServed(t, nodes[1].addr, connectPacket(packets.V311, "pub", true))
	defer pub.close(true)
	wills := dialUntilServed(t, nodes[1].addr, connectPacket(packets.V311, "wills", true))
	defer wills.close(true)
	if err := wills.subscribe(1, "will/#", 0); err != nil {
		t.Fatal(err)
	}
	bp := connectPacket(packets.V311, "bystander", false)
	bp.WillFlag, bp.WillTopic, bp.WillPayload = true, "will/bystander", []byte("gone")
	bystander := dialUntilServed(t, nodes[2].addr, bp)
	awaitRoute(t, pub, sub, "k/probe")
	awaitRoute(t, sub, wills, "will/probe")

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

	// The bystander, back on node 1 without waiting for anything.
	back := dialUntilServed(t, nodes[0].addr, connectPacket(packets.V311, "bystander", false))
	defer back.close(true)
	p, err := wills.next(4 * nodeTimeout)
	if err != nil {
		t.Fatalf("the killed node's client's will: %v", err)
	}
	if pp, ok := p.(*packets.Publish); !ok || pp.Topic != "will/bystander" {
		t.Fatalf("got %+v, want the will of the killed node's client", p)
	}
	// Once: nothing else comes before a fence through the same node.
	if err := pub.send(&packets.Publish{Topic: "will/fence", Payload: []byte("fence")}); err != nil {
		t.Fatal(err)
	}
	p, err = wills.next(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if pp, ok := p.(*packets.Publish); !ok || string(pp.Payload) != "fence" {
		t.Fatalf("after the will, got %+v; want only the fence", p)
	}
}

//go:build natsserver

package mqttd_test

import (
	"fmt"
	"testing"

	"mqttd"
	"mqttd/cluster"
	"mqttd/internal/testutil"
	"mqttd/packets"
)

// TestClusterEmbedded: three nodes, each with its NATS server embedded
// (JetStream files under its data directory), are one broker: a message
// crosses, a retained message set on one is found on another, and a
// client moving between nodes keeps its session.
func TestClusterEmbedded(t *testing.T) {
	t.Parallel()
	routes := make([]string, 3)
	for i := range routes {
		routes[i] = fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	}
	nodes := make([]*broker, 3)
	for i := range nodes {
		cfg := &cluster.Config{Name: "emb", NodeName: fmt.Sprintf("e%d", i+1), NATS: cluster.NATSConfig{
			Embedded: &cluster.EmbeddedConfig{Listen: "127.0.0.1:0", Cluster: routes[i], Routes: routes}}}
		nodes[i] = startBroker(t, mqttd.Options{DataDir: t.TempDir(), Cluster: cfg})
	}
	for _, b := range nodes {
		waitStore(t, b)
	}
	pub := connectRaw(t, nodes[0].addr, &packets.Connect{ClientID: "pub", CleanStart: true})
	pub.send(&packets.Publish{Topic: "e/kept", Payload: []byte("k"), Retain: true, QoS: 1, PacketID: 1})
	expectAck(pub, packets.TypePuback, 1, 0)

	// Node 1's PUBACK says the message is retained there; node 2 learns
	// of it a moment later.
	testutil.WaitFor(t, "the retained message on node 2", func() bool {
		rc := connectSubscribed(t, &packets.Connect{ClientID: "late", CleanStart: true}, nodes[1].addr,
			packets.Subscription{Filter: "e/kept"})
		defer rc.send(&packets.Disconnect{})
		got := rc.ping()
		return len(got) == 1 && got[0].(*packets.Publish).Retain
	})

	cp := expiringConnect("mover", 600)
	cp.ProtocolName, cp.ProtocolVersion = "MQTT", packets.V5
	first := connectRaw(t, nodes[1].addr, cp)
	first.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "e/#", Options: packets.SubOptions{QoS: 1}}}})
	// The SUBACK waits for the subscription to be stored; the retained
	// message need not.
	for subacked, kept := false, false; !subacked || !kept; {
		switch p := first.read().(type) {
		case *packets.Suback:
			subacked = true
		case *packets.Publish:
			if string(p.Payload) != "k" || !p.Retain {
				t.Fatalf("got %+v, want the retained message set on node 1", p)
			}
			first.send(&packets.Puback{PacketID: p.PacketID})
			kept = true
		default:
			t.Fatalf("got %T", p)
		}
	}
	awaitInterest(t, nodes[1].addr, nodes[0].addr)
	pub.send(&packets.Publish{Topic: "e/live", Payload: []byte("l"), QoS: 1, PacketID: 2})
	expectAck(pub, packets.TypePuback, 2, 0)
	if p, ok := first.read().(*packets.Publish); !ok || string(p.Payload) != "l" {
		t.Fatalf("got %+v, want the message from node 1", p)
	}
	moved, ack := connectReply(t, nodes[2].addr, packets.V5, expiringConnect("mover", 600))
	if ack.ReasonCode != packets.Success || !ack.SessionPresent {
		t.Fatalf("CONNACK on node 3 %+v: want the session present", ack)
	}
	expectTakenOver(first)
	awaitInterest(t, nodes[2].addr, nodes[0].addr)
	pub.send(&packets.Publish{Topic: "e/after", Payload: []byte("a"), QoS: 1, PacketID: 3})
	expectAck(pub, packets.TypePuback, 3, 0)
	for {
		p, ok := moved.read().(*packets.Publish)
		if !ok {
			t.Fatalf("got %+v, want a PUBLISH", p)
		}
		if p.QoS == 1 {
			moved.send(&packets.Puback{PacketID: p.PacketID})
		}
		if string(p.Payload) == "a" {
			break
		}
	}
}

//go:build linux

package crash

import (
	"strconv"
	"testing"
	"time"

	"mqttd/packets"
)

// TestNetsplitReplicatedSessions: three nodes keeping persistent sessions
// in the replicated store, each in a network namespace of its own, with
// an offline persistent subscriber made on A and one on C, and a QoS 1
// publisher on each of A and C. C's link is cut: what C's publisher
// sends then is not acknowledged (its subscribers' sessions cannot be
// written: the store has no quorum on C's side, and A does not answer),
// while A's publisher goes on, once the majority has taken C's sessions
// over. After healing, C's publisher goes on from C; both subscribers,
// reconnecting to B and C, get every message either publisher had
// acknowledged, in order per publisher, at least once.
func TestNetsplitReplicatedSessions(t *testing.T) {
	l := newLab(t)
	bin := natsBinary(t)
	nets := []*labNode{l.node(0, "a"), l.node(1, "b"), l.node(2, "c")}
	var nodes []*nsBroker
	for i, name := range []string{"a", "b", "c"} {
		nodes = append(nodes, startNSNode(t, bin, nets[i], name, nets, splitTimeout, "sessions: replicated"))
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range nodes {
				t.Logf("node %s's last output:\n%s", n.name, n.tail())
			}
		}
	})
	a, b, c := nodes[0], nodes[1], nodes[2]
	start := time.Now()
	logf := func(format string, args ...any) {
		t.Helper()
		t.Logf("%5.1fs: "+format, append([]any{time.Since(start).Seconds()}, args...)...)
	}
	subs := []*cycleSub{{id: "sub-a", next: map[string]int{}}, {id: "sub-c", next: map[string]int{}}}
	for i, n := range []*nsBroker{a, c} {
		sc, _ := served(t, n, packets.V311, connectPacket(packets.V311, subs[i].id, false), 30*time.Second)
		if err := sc.subscribe(1, "k/#", 1); err != nil {
			t.Fatal(err)
		}
		sc.close(true)
	}
	pa, _ := served(t, a, packets.V311, connectPacket(packets.V311, "pub-a", true), 10*time.Second)
	pc, _ := served(t, c, packets.V311, connectPacket(packets.V311, "pub-c", true), 10*time.Second)
	published := map[string]int{"k/a": -1, "k/c": -1}
	e := &sent{published: published, unacked: map[string]map[int]bool{"k/c": {}}}
	// publish sends topic's next message on p, again from a new
	// connection to n while it is not acknowledged, for up to d.
	publish := func(p *conn, n *nsBroker, id, topic string, d time.Duration) *conn {
		t.Helper()
		v := published[topic] + 1
		published[topic] = v
		m := &packets.Publish{Topic: topic, QoS: 1, PacketID: uint16(v%60000 + 1), Payload: []byte(strconv.Itoa(v))}
		deadline := time.Now().Add(d)
		for {
			err := p.publishSync(m)
			if err == nil {
				return p
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s %d not acknowledged within %v: %v", topic, v, d, err)
			}
			p.close(false)
			p, _ = served(t, n, packets.V311, connectPacket(packets.V311, id, true), time.Until(deadline))
		}
	}
	drainAll := func(where []*nsBroker) {
		t.Helper()
		for i, s := range subs {
			sc, _ := served(t, where[i], packets.V311, connectPacket(packets.V311, s.id, false), 30*time.Second)
			s.drain(t, sc, e)
		}
	}
	for range 5 {
		pa = publish(pa, a, "pub-a", "k/a", 10*time.Second)
		pc = publish(pc, c, "pub-c", "k/c", 10*time.Second)
	}
	drainAll([]*nsBroker{a, c})
	logf("cluster up: %v acknowledged and delivered", published)

	l.cut(c.net)
	logf("C's link cut")
	// What C's publisher sends now cannot be kept: not acknowledged.
	v := published["k/c"] + 1
	published["k/c"] = v
	e.unacked["k/c"][v] = true
	refused := &packets.Publish{Topic: "k/c", QoS: 1, PacketID: uint16(v + 1), Payload: []byte(strconv.Itoa(v))}
	if err := pc.publishSync(refused); err == nil {
		t.Fatalf("k/c %d published on C while cut off was acknowledged", v)
	}
	pc.close(false)
	logf("C's publisher not acknowledged")
	// The majority goes on: its sends to C's subscriber fail until A or
	// B has found C dead and taken its session over.
	for range 20 {
		pa = publish(pa, a, "pub-a", "k/a", 2*willWait)
	}
	logf("A's publisher went on: k/a up to %d acknowledged", published["k/a"])

	l.heal(c.net)
	logf("C's link healed")
	pc, _ = served(t, c, packets.V311, connectPacket(packets.V311, "pub-c", true), 45*time.Second)
	for range 5 {
		pc = publish(pc, c, "pub-c", "k/c", 30*time.Second)
	}
	pa = publish(pa, a, "pub-a", "k/a", 30*time.Second)
	pa.close(true)
	pc.close(true)
	logf("C's publisher went on after healing: %v published, all acknowledged but k/c %d", published, v)
	drainAll([]*nsBroker{c, b})
	logf("both subscribers have every acknowledged message")
}

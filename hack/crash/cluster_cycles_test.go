package crash

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"syscall"
	"testing"
	"time"

	"mqttd/internal/natstest"
	"mqttd/packets"
)

// cycleNodes are the three mqttd processes of a cycles test, each
// restarted in its own directory by run.
type cycleNodes struct {
	run   func(i int) *broker
	nodes []*broker
	alive []bool
}

func newCycleNodes(run func(i int) *broker) *cycleNodes {
	cn := &cycleNodes{run: run, nodes: make([]*broker, 3), alive: make([]bool, 3)}
	for i := range 3 {
		cn.start(i)
	}
	return cn
}

func (cn *cycleNodes) start(i int) {
	cn.nodes[i] = cn.run(i)
	cn.alive[i] = true
}

func (cn *cycleNodes) kill(t *testing.T, i int) {
	t.Helper()
	cn.nodes[i].stop(t, syscall.SIGKILL)
	cn.alive[i] = false
}

// live returns the address of a live node other than not (-1: any).
func (cn *cycleNodes) live(rng *rand.Rand, not int) string {
	for {
		if i := rng.IntN(len(cn.nodes)); cn.alive[i] && i != not {
			return cn.nodes[i].addr
		}
	}
}

// cycleSub follows what one persistent subscriber has received: for each
// publisher's topic, every message from 0 up to next, in order, each at
// least once.
type cycleSub struct {
	id   string
	next map[string]int
}

// sent is what the publishers of a test sent, by topic: messages
// 0 to published[topic], each acknowledged but those in unacked.
type sent struct {
	published map[string]int
	unacked   map[string]map[int]bool
}

// drain reads s's messages on c, its connection, until it has, from
// each topic, every message up to published[topic] but those unacked,
// acknowledging each (QoS 1 and 2), and closes c; an acknowledged
// message missing from a topic's sequence, or one never published,
// fails the test.
func (s *cycleSub) drain(t *testing.T, c *conn, e *sent) {
	t.Helper()
	defer c.close(true)
	for topic := range e.published {
		s.skip(topic, e)
	}
	behind := func() bool {
		for topic, n := range e.published {
			if s.next[topic] <= n {
				return true
			}
		}
		return false
	}
	for behind() {
		p, err := c.next(15 * time.Second)
		if err != nil {
			t.Fatalf("%s: waiting for messages up to %v, got up to %v: %v", s.id, e.published, s.next, err)
		}
		var ack packets.Packet
		switch p := p.(type) {
		case *packets.Pubrel:
			ack = &packets.Pubcomp{PacketID: p.PacketID}
		case *packets.Publish:
			ack = &packets.Puback{PacketID: p.PacketID}
			if p.QoS == 2 {
				ack = &packets.Pubrec{PacketID: p.PacketID}
			}
			s.got(t, p, e)
		default:
			t.Fatalf("%s: got %s, want PUBLISH or PUBREL", s.id, p.Type())
		}
		if err := c.send(ack); err != nil {
			t.Fatal(err)
		}
	}
}

// got checks one message p against the sequence of its topic.
func (s *cycleSub) got(t *testing.T, p *packets.Publish, e *sent) {
	t.Helper()
	v, err := strconv.Atoi(string(p.Payload))
	n, ok := e.published[p.Topic]
	switch {
	case err != nil || !ok || v > n:
		t.Fatalf("%s: %s %q was never published", s.id, p.Topic, p.Payload)
	case v > s.next[p.Topic]:
		t.Fatalf("%s: got %s %d, but %d never came: an acknowledged message lost", s.id, p.Topic, v, s.next[p.Topic])
	case v == s.next[p.Topic]:
		s.next[p.Topic]++
		s.skip(p.Topic, e)
	}
}

// skip moves s past the messages of topic never acknowledged that it
// expects next: they may not come (at least once covers only those
// acknowledged), and one that comes later is a duplicate.
func (s *cycleSub) skip(topic string, e *sent) {
	for e.unacked[topic][s.next[topic]] {
		s.next[topic]++
	}
}

// cyclePub is one publisher of a cycles test: it publishes its topic's
// sequence at qos from the node it is on, and when refused sends again
// from a live node.
type cyclePub struct {
	topic string
	qos   byte
	c     *conn
	sent  int
}

// TestClusterReplicatedCrashCycles: three mqttd processes with
// replicated sessions and a persistent subscriber made on each; a QoS 1
// publisher on node 1 and a QoS 2 one on node 2 go on while, each cycle,
// a random node is killed with SIGKILL and started again; between kills
// each subscriber reconnects to a random live node and must get every
// message whose PUBACK or PUBCOMP its publisher got, in order, at least
// once (QoS 2 too: ARCHITECTURE.md "Cluster" says why not exactly once
// across nodes). CLUSTER_CYCLES sets the cycles (default 2; the longer
// run, 20), CRASH_SEED repeats a run.
func TestClusterReplicatedCrashCycles(t *testing.T) {
	urls := natstest.Cluster(t, 3)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	cn := newCycleNodes(func(i int) *broker {
		return startNodeIn(t, dirs[i], fmt.Sprintf("n%d", i+1), urls[i], "sessions: replicated")
	})
	rng := seeded(t)
	runCycles(t, cn, rng, envInt(t, "CLUSTER_CYCLES", 2), func() int {
		victim := rng.IntN(3)
		cn.kill(t, victim)
		return victim
	})
}

// runCycles makes a persistent subscriber (QoS 2) on each of cn's nodes
// and runs cycles: messages published, crash (which stops a node and
// returns which), more published, the node started again, more
// published, then every subscriber drained from a random live node.
func runCycles(t *testing.T, cn *cycleNodes, rng *rand.Rand, cycles int, crash func() int) {
	t.Helper()
	var subs []*cycleSub
	for i := range 3 {
		s := &cycleSub{id: fmt.Sprintf("sub%d", i+1), next: map[string]int{}}
		c := dialUntilServed(t, cn.nodes[i].addr, connectPacket(packets.V311, s.id, false))
		if err := c.subscribe(1, "k/#", 2); err != nil {
			t.Fatal(err)
		}
		c.close(true)
		subs = append(subs, s)
	}
	pubs := []*cyclePub{{topic: "k/q1", qos: 1}, {topic: "k/q2", qos: 2}}
	for i, p := range pubs {
		p.c = dialUntilServed(t, cn.nodes[i].addr, connectPacket(packets.V311, "pub-"+p.topic, true))
		defer func() { p.c.close(true) }()
	}
	publish := func(n int) {
		for range n {
			for _, p := range pubs {
				m := &packets.Publish{Topic: p.topic, QoS: p.qos, PacketID: uint16(p.sent%60000 + 1), Payload: []byte(strconv.Itoa(p.sent))}
				p.c = publishAckedAny(t, p.c, "pub-"+p.topic, func() string { return cn.live(rng, -1) }, m)
				p.sent++
			}
		}
	}
	drain := func() {
		last := map[string]int{}
		for _, p := range pubs {
			last[p.topic] = p.sent - 1
		}
		for _, s := range subs {
			s.drain(t, dialUntilServed(t, cn.live(rng, -1), connectPacket(packets.V311, s.id, false)), &sent{published: last})
		}
	}
	// The subscriptions made on each node have reached the publishers'.
	publish(1)
	drain()
	const perStep = 15
	for cycle := range cycles {
		publish(perStep)
		victim := crash()
		t.Logf("cycle %d: n%d stopped after messages %d", cycle+1, victim+1, pubs[0].sent-1)
		publish(perStep)
		cn.start(victim)
		publish(perStep)
		drain()
	}
}

// publishAckedAny is publishAcked connecting again, when refused, to the
// address next gives (a live node).
func publishAckedAny(t *testing.T, c *conn, id string, next func() string, p *packets.Publish) *conn {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.publishSync(p)
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("message %q not acknowledged within 30 s: %v", p.Payload, err)
		}
		c.close(false)
		c = dialUntilServed(t, next(), connectPacket(packets.V311, id, true))
	}
}

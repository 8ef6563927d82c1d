package crash

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"mqttd/internal/natstest"
	"mqttd/packets"
)

// cycleNodes are the three mqttd processes of the cycles test, each
// restarted in its own directory.
type cycleNodes struct {
	t     *testing.T
	urls  []string
	dirs  []string
	nodes []*broker
	alive []bool
}

func (cn *cycleNodes) start(i int) {
	cn.nodes[i] = startNodeIn(cn.t, cn.dirs[i], fmt.Sprintf("n%d", i+1), cn.urls[i], "sessions: replicated")
	cn.alive[i] = true
}

// live returns the address of a live node other than not (-1: any).
func (cn *cycleNodes) live(rng *rand.Rand, not int) string {
	for {
		if i := rng.IntN(len(cn.nodes)); cn.alive[i] && i != not {
			return cn.nodes[i].addr
		}
	}
}

// cycleSub follows what one persistent subscriber has received: every
// message from 0 up to next, in order, each at least once.
type cycleSub struct {
	id   string
	next int
}

// drain connects s to addr and reads until it has every message up to
// last, acknowledging each; a message missing from the sequence fails
// the test.
func (s *cycleSub) drain(t *testing.T, addr string, last int) {
	t.Helper()
	c := dialUntilServed(t, addr, connectPacket(packets.V311, s.id, false))
	defer c.close(true)
	for s.next <= last {
		p, err := c.next(15 * time.Second)
		if err != nil {
			t.Fatalf("%s: waiting for message %d (of %d): %v", s.id, s.next, last, err)
		}
		pp, ok := p.(*packets.Publish)
		if !ok {
			t.Fatalf("%s: got %s, want PUBLISH", s.id, p.Type())
		}
		if err := c.send(&packets.Puback{PacketID: pp.PacketID}); err != nil {
			t.Fatal(err)
		}
		v, err := strconv.Atoi(string(pp.Payload))
		switch {
		case err != nil:
			t.Fatalf("%s: payload %q", s.id, pp.Payload)
		case v > s.next:
			t.Fatalf("%s: got message %d, but %d never came: an acknowledged message lost", s.id, v, s.next)
		case v == s.next:
			s.next++
		}
	}
}

// TestClusterReplicatedCrashCycles: three mqttd processes with
// replicated sessions and a persistent subscriber made on each; a QoS 1
// publisher goes on while, each cycle, a random node is killed with
// SIGKILL and started again; between kills each subscriber reconnects
// to a random live node and must get every message whose PUBACK the
// publisher got, in order (at least once). CLUSTER_CYCLES sets the
// cycles (default 2; the longer run, 20), CRASH_SEED repeats a run.
func TestClusterReplicatedCrashCycles(t *testing.T) {
	cycles := 2
	if v, err := strconv.Atoi(os.Getenv("CLUSTER_CYCLES")); err == nil && v > 0 {
		cycles = v
	}
	rng := seeded(t)
	cn := &cycleNodes{t: t, urls: natstest.Cluster(t, 3), dirs: []string{t.TempDir(), t.TempDir(), t.TempDir()},
		nodes: make([]*broker, 3), alive: make([]bool, 3)}
	for i := range 3 {
		cn.start(i)
	}
	var subs []*cycleSub
	for i := range 3 {
		s := &cycleSub{id: fmt.Sprintf("sub%d", i+1)}
		c := dialUntilServed(t, cn.nodes[i].addr, connectPacket(packets.V311, s.id, false))
		if err := c.subscribe(1, "k/#", 1); err != nil {
			t.Fatal(err)
		}
		c.close(true)
		subs = append(subs, s)
	}
	pub := dialUntilServed(t, cn.nodes[0].addr, connectPacket(packets.V311, "pub", true))
	defer func() { pub.close(true) }()
	sent := 0
	publish := func(n int) {
		for range n {
			p := &packets.Publish{Topic: "k/data", QoS: 1, PacketID: uint16(sent%60000 + 1), Payload: []byte(strconv.Itoa(sent))}
			pub = publishAckedAny(t, pub, func() string { return cn.live(rng, -1) }, p)
			sent++
		}
	}
	// The subscriptions made on each node have reached the publisher's.
	publish(1)
	for _, s := range subs {
		s.drain(t, cn.live(rng, -1), sent-1)
	}
	const perStep = 30
	for cycle := range cycles {
		publish(perStep)
		victim := rng.IntN(3)
		t.Logf("cycle %d: killing n%d after message %d", cycle+1, victim+1, sent-1)
		cn.nodes[victim].stop(t, syscall.SIGKILL)
		cn.alive[victim] = false
		publish(perStep)
		cn.start(victim)
		publish(perStep)
		for _, s := range subs {
			s.drain(t, cn.live(rng, -1), sent-1)
		}
	}
}

// publishAckedAny is publishAcked connecting again, when refused, to the
// address next gives (a live node).
func publishAckedAny(t *testing.T, c *conn, next func() string, p *packets.Publish) *conn {
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
		c = dialUntilServed(t, next(), connectPacket(packets.V311, "pub", true))
	}
}

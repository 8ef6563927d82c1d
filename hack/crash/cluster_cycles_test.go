package crash

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mqttd"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"mqttd/internal/natstest"
	"mqttd/packets"
)

// cycleNodes are the three mqttd processes of a cycles test, each
// restarted in its own directory by run.
type cycleNodes struct {
	run func(i int) *broker
	// mu guards nodes and alive, which the publishers read (live) while
	// a cycle kills and starts nodes.
	mu    sync.Mutex
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
	b := cn.run(i)
	cn.mu.Lock()
	cn.nodes[i], cn.alive[i] = b, true
	cn.mu.Unlock()
}

func (cn *cycleNodes) kill(t *testing.T, i int) {
	t.Helper()
	cn.mu.Lock()
	b := cn.nodes[i]
	cn.alive[i] = false
	cn.mu.Unlock()
	b.stop(t, syscall.SIGKILL)
}

// live returns the address of a live node other than not (-1: any),
// drawn with rng, which only the caller uses.
func (cn *cycleNodes) live(rng *rand.Rand, not int) string {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for {
		if i := rng.IntN(len(cn.nodes)); cn.alive[i] && i != not {
			return cn.nodes[i].addr
		}
	}
}

// cycleSub follows what one persistent subscriber has received: for each
// publisher's topic, every message from 0 up to next, in order, each at
// least once, and exactly once for the topics in once.
type cycleSub struct {
	id   string
	next map[string]int
	once map[string]bool
	// rel are the packet ids of QoS 2 messages it has received and not
	// yet seen released, across its connections, as a client keeping its
	// session keeps them: a PUBLISH with one of them is the same message
	// sent again [MQTT-4.3.3-10].
	rel map[uint16]bool
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
			delete(s.rel, p.PacketID)
			ack = &packets.Pubcomp{PacketID: p.PacketID}
		case *packets.Publish:
			ack = &packets.Puback{PacketID: p.PacketID}
			if p.QoS == 2 {
				ack = &packets.Pubrec{PacketID: p.PacketID}
				if s.rel[p.PacketID] {
					break
				}
				if s.rel == nil {
					s.rel = map[uint16]bool{}
				}
				s.rel[p.PacketID] = true
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
	case v < s.next[p.Topic] && s.once[p.Topic]:
		t.Fatalf("%s: got %s %d again: a QoS 2 message delivered twice", s.id, p.Topic, v)
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
// from a live node: at QoS 1 from a clean session, at QoS 2 from a
// persistent one that goes on with the message's flow where it was
// (publishExactlyOnce).
type cyclePub struct {
	topic string
	qos   byte
	c     *conn
	sent  int
	rng   *rand.Rand // its own: it runs beside the test's goroutine
}

// publish sends p's next n messages, each until acknowledged, adding
// each to done.
func (p *cyclePub) publish(cn *cycleNodes, n int, done *atomic.Int64) error {
	id := "pub-" + p.topic
	next := func() string { return cn.live(p.rng, -1) }
	for range n {
		m := &packets.Publish{Topic: p.topic, QoS: p.qos, PacketID: uint16(p.sent%60000 + 1), Payload: []byte(strconv.Itoa(p.sent))}
		var err error
		if p.qos == 2 {
			p.c, err = publishExactlyOnce(p.c, id, next, m)
		} else {
			p.c, err = publishAckedAny(p.c, id, next, m)
		}
		if err != nil {
			return err
		}
		p.sent++
		done.Add(1)
	}
	return nil
}

// TestClusterReplicatedCrashCycles: three mqttd processes with
// replicated sessions and a persistent subscriber made on each; a QoS 1
// publisher on node 1 and a QoS 2 one on node 2 go on while, each cycle,
// a random node is killed with SIGKILL and started again; between kills
// each subscriber reconnects to a random live node and must get every
// message whose PUBACK or PUBCOMP its publisher got, in order, at least
// once, and the QoS 2 ones exactly once. CLUSTER_CYCLES sets the cycles (default 2; the longer
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
// and runs cycles: the publishers go on, each on a goroutine of its
// own, while crash (which stops a node and returns which) lands in the
// middle of their flows, after a random number of their messages; the
// node is started again while they go on; then they stop, and every
// subscriber is drained from a random live node.
func runCycles(t *testing.T, cn *cycleNodes, rng *rand.Rand, cycles int, crash func() int) {
	t.Helper()
	var subs []*cycleSub
	for i := range 3 {
		s := &cycleSub{id: fmt.Sprintf("sub%d", i+1), next: map[string]int{}, once: map[string]bool{"k/q2": true}}
		c := dialUntilServed(t, cn.nodes[i].addr, connectPacket(packets.V311, s.id, false))
		if err := c.subscribe(1, "k/#", 2); err != nil {
			t.Fatal(err)
		}
		c.close(true)
		subs = append(subs, s)
	}
	pubs := []*cyclePub{{topic: "k/q1", qos: 1}, {topic: "k/q2", qos: 2}}
	for i, p := range pubs {
		p.rng = rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		p.c = dialUntilServed(t, cn.nodes[i].addr, connectPacket(packets.V311, "pub-"+p.topic, p.qos < 2))
		defer func() { p.c.close(true) }()
	}
	var done atomic.Int64 // messages completed, by both publishers
	// publish has each publisher send n messages, on goroutines of their
	// own; wait returns once they have.
	publish := func(n int) (wait func()) {
		errs := make(chan error, len(pubs))
		for _, p := range pubs {
			go func() { errs <- p.publish(cn, n, &done) }()
		}
		return func() {
			t.Helper()
			for range pubs {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// reach waits until the publishers have completed n messages; should
	// they not in time, it waits for them to give up (wait) and fails.
	reach := func(n int64, wait func()) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for done.Load() < n {
			if time.Now().After(deadline) {
				wait()
				t.Fatalf("the publishers completed %d messages in 60 s, want %d", done.Load(), n)
			}
			<-tick.C
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
	publish(1)()
	drain()
	const perStep = 15
	for cycle := range cycles {
		base := done.Load()
		wait := publish(3 * perStep)
		reach(base+1+rng.Int64N(2*perStep), wait)
		victim := crash()
		t.Logf("cycle %d: n%d stopped after %d messages", cycle+1, victim+1, done.Load())
		reach(min(done.Load()+perStep, base+4*perStep), wait)
		cn.start(victim)
		wait()
		drain()
	}
	var resent, dups uint64
	for i, b := range cn.nodes {
		if st, err := clusterState(b); err != nil {
			t.Logf("n%d: %v", i+1, err)
		} else {
			resent, dups = resent+st.QoS2Resent, dups+st.QoS2Duplicates
		}
	}
	t.Logf("the nodes' last runs routed %d QoS 2 messages again under their stamp, and %d copies were not taken twice", resent, dups)
}

// clusterState reads a node's state in its cluster from its JSON API.
func clusterState(b *broker) (mqttd.ClusterState, error) {
	var st mqttd.ClusterState
	m := metricsLine.FindStringSubmatch(b.tail())
	if m == nil {
		return st, errors.New("no metrics address in the banner")
	}
	resp, err := apiClient.Get("http://" + m[1] + "/api/v1/cluster")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("/api/v1/cluster: %s", resp.Status)
	}
	return st, json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st)
}

// publishAckedAny is publishAcked connecting again, when refused, to the
// address next gives (a live node).
func publishAckedAny(c *conn, id string, next func() string, p *packets.Publish) (*conn, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.publishSync(p)
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			return c, fmt.Errorf("message %q not acknowledged within 30 s: %w", p.Payload, err)
		}
		c.close(false)
		nc, _, err := dialServed(next(), connectPacket(packets.V311, id, true), 10*time.Second)
		if err != nil {
			return c, err // closed, but not nil: the test closes it again
		}
		c = nc
	}
}

// publishExactlyOnce sends p, a QoS 2 message, from c, a persistent
// session, until its PUBCOMP: on a lost or refused connection it
// connects again, to the address next gives, and goes on with the flow
// where it was, as a client keeping its session must: PUBLISH again
// with DUP set before the PUBREC, PUBREL after it [MQTT-4.4.0-1]. Its
// session must be there on every node.
func publishExactlyOnce(c *conn, id string, next func() string, p *packets.Publish) (*conn, error) {
	deadline := time.Now().Add(30 * time.Second)
	received := false
	for {
		err := c.flowQoS2(p, &received)
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			return c, fmt.Errorf("message %q not completed within 30 s: %w", p.Payload, err)
		}
		c.close(false)
		nc, present, err := dialServed(next(), connectPacket(packets.V311, id, false), 10*time.Second)
		if err != nil {
			return c, err // closed, but not nil: the test closes it again
		}
		c = nc
		if !present {
			return c, fmt.Errorf("%s connected again without its session (message %q in flight)", id, p.Payload)
		}
		p.Dup = true
	}
}

// flowQoS2 takes p's QoS 2 flow from where *received says it is (the
// PUBREC got or not) to its PUBCOMP.
func (c *conn) flowQoS2(p *packets.Publish, received *bool) error {
	var out packets.Packet = p
	want := packets.TypePubrec
	if *received {
		out, want = &packets.Pubrel{PacketID: p.PacketID}, packets.TypePubcomp
	}
	if err := c.send(out); err != nil {
		return err
	}
	for {
		got, err := c.next(ioTimeout)
		if err != nil {
			return fmt.Errorf("PUBLISH %s %q: %w", p.Topic, p.Payload, err)
		}
		if got.Type() != want || ackID(got) != p.PacketID {
			return fmt.Errorf("PUBLISH %s id %d: got %s, want %s", p.Topic, p.PacketID, got.Type(), want)
		}
		if want == packets.TypePubcomp {
			return nil
		}
		*received = true
		if err := c.send(&packets.Pubrel{PacketID: p.PacketID}); err != nil {
			return err
		}
		want = packets.TypePubcomp
	}
}

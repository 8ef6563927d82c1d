package mqttd_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"mqttd/internal/natstest"
	"mqttd/internal/testutil"
	"mqttd/packets"
)

// payloadCounter counts, per client, the payloads it received.
type payloadCounter struct {
	mu  sync.Mutex
	got map[string]map[string]int // client → payload → times
}

func (c *payloadCounter) handler(id string) paho.MessageHandler {
	return func(_ paho.Client, m paho.Message) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.got[id] == nil {
			c.got[id] = map[string]int{}
		}
		c.got[id][string(m.Payload())]++
	}
}

// count sums, over the clients ids, the messages whose payload starts
// with prefix.
func (c *payloadCounter) count(prefix string, ids ...string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, id := range ids {
		for p, k := range c.got[id] {
			if strings.HasPrefix(p, prefix) {
				n += k
			}
		}
	}
	return n
}

// times returns how many times the clients ids together received payload.
func (c *payloadCounter) times(payload string, ids ...string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, id := range ids {
		n += c.got[id][payload]
	}
	return n
}

// TestClusterSharedOncePerGroup: a share group with members on three
// nodes gets each message once in the whole cluster, and every node's
// members get some, the publisher's own node's too, retained or not; a
// plain subscriber on another node still gets every message once.
func TestClusterSharedOncePerGroup(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	counter := &payloadCounter{got: map[string]map[string]int{}}
	members := []struct {
		id   string
		node int
	}{{"m1a", 0}, {"m1b", 0}, {"m2", 1}, {"m3", 2}}
	var ids []string
	for _, m := range members {
		c := pahoConnect(t, nodes[m.node].addr, m.id, func(o *paho.ClientOptions) {
			o.SetDefaultPublishHandler(counter.handler(m.id))
		})
		wait(t, c.Subscribe("$share/g/x", 1, nil))
		ids = append(ids, m.id)
	}
	plain := pahoConnect(t, nodes[1].addr, "plain", func(o *paho.ClientOptions) {
		o.SetDefaultPublishHandler(counter.handler("plain"))
	})
	wait(t, plain.Subscribe("x", 1, nil))
	awaitInterest(t, nodes[1].addr, nodes[0].addr)
	pub := pahoConnect(t, nodes[0].addr, "pub", nil)
	// The group's interest crosses to the publisher's node in its own
	// time: probe until a member on every node has had one.
	nodeGot := func(node int, prefix string) bool {
		for _, m := range members {
			if m.node == node && counter.count(prefix, m.id) > 0 {
				return true
			}
		}
		return false
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for probes := 0; !nodeGot(0, "probe-") || !nodeGot(1, "probe-") || !nodeGot(2, "probe-"); probes++ {
		wait(t, pub.Publish("x", 0, false, fmt.Sprintf("probe-%d", probes)))
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%d probes did not reach the group on every node within 10 s", probes)
		}
	}

	// Every tenth is retained: those cross on the retained messages'
	// subjects, and reach the group once too.
	const total = 120
	for i := range total {
		wait(t, pub.Publish("x", 1, i%10 == 0, fmt.Sprintf("m-%d", i)))
	}
	testutil.WaitFor(t, "every message delivered", func() bool {
		return counter.count("m-", ids...) >= total && counter.count("m-", "plain") >= total
	})
	for i := range total {
		p := fmt.Sprintf("m-%d", i)
		if n := counter.times(p, ids...); n != 1 {
			t.Errorf("%s reached the group %d times, want once", p, n)
		}
		if n := counter.times(p, "plain"); n != 1 {
			t.Errorf("%s reached the plain subscriber %d times, want once", p, n)
		}
	}
	for _, m := range members {
		if counter.count("m-", m.id) == 0 {
			t.Errorf("member %s on node %d got none of the %d messages", m.id, m.node+1, total)
		}
	}
	for i, n := range nodes {
		if st, _ := n.srv.Cluster(); st.Dropped != 0 {
			t.Errorf("node %d dropped %d", i+1, st.Dropped)
		}
	}
}

// TestClusterSharedRoundRobinOnNode: the messages a node routes do not
// move its share groups' round robin on (they get them back through the
// cluster, which moves it once): two members on the publisher's node
// take turns.
func TestClusterSharedRoundRobinOnNode(t *testing.T) {
	t.Parallel()
	node := startCluster(t, 1)[0]
	counter := &payloadCounter{got: map[string]map[string]int{}}
	ids := []string{"w1", "w2"}
	for _, id := range ids {
		c := pahoConnect(t, node.addr, id, func(o *paho.ClientOptions) {
			o.SetDefaultPublishHandler(counter.handler(id))
		})
		wait(t, c.Subscribe("$share/g/rr", 1, nil))
	}
	pub := pahoConnect(t, node.addr, "pub", nil)
	testutil.WaitFor(t, "the group's interest in NATS", func() bool {
		wait(t, pub.Publish("rr", 0, false, "probe"))
		return counter.count("probe", ids...) > 0
	})
	// One at a time, each delivered before the next is published.
	const total = 10
	for i := range total {
		wait(t, pub.Publish("rr", 1, false, fmt.Sprintf("m-%d", i)))
		testutil.WaitFor(t, fmt.Sprintf("m-%d delivered", i), func() bool { return counter.count("m-", ids...) == i+1 })
	}
	if a, b := counter.count("m-", "w1"), counter.count("m-", "w2"); a != total/2 || b != total/2 {
		t.Fatalf("the members got %d and %d of %d, want turns", a, b, total)
	}
}

// TestClusterSharedCopyConfirmed: with replicated sessions, a QoS 1
// message whose only subscriber is a share group's persistent member on
// another node is acknowledged once that node has stored it, as a plain
// subscriber's copy is: the PUBACK waits for the member's node's commit.
func TestClusterSharedCopyConfirmed(t *testing.T) {
	t.Parallel()
	urls := natstest.Cluster(t, 3)
	dirs := []string{t.TempDir(), t.TempDir()}
	a, b := startReplicated(t, urls, dirs, 0), startReplicated(t, urls, dirs, 1)
	member := connectSubscribed(t, expiringConnect5("member", 600), b.addr,
		packets.Subscription{Filter: "$share/g/s/#", Options: packets.SubOptions{QoS: 1}})
	pub, _ := connectReply(t, a.addr, packets.V5, &packets.Connect{ClientID: "pub", CleanStart: true})
	testutil.WaitFor(t, "the share group's copies to reach node 2", func() bool {
		pub.send(&packets.Publish{Topic: "s/probe", Payload: []byte("probe")})
		return len(member.ping()) > 0
	})

	release := b.srv.HoldCommits()
	t.Cleanup(release)
	in, _ := b.srv.Cluster()
	pub.send(&packets.Publish{Topic: "s/1", QoS: 1, PacketID: 1, Payload: []byte("kept")})
	testutil.WaitFor(t, "the copy on node 2", func() bool {
		st, _ := b.srv.Cluster()
		return st.MessagesIn > in.MessagesIn
	})
	if n := a.srv.HeldAnswers("pub"); n != 1 {
		t.Fatalf("%d answers held: want the PUBACK held until node 2 has stored the member's copy", n)
	}
	release()
	expectAck(pub, packets.TypePuback, 1, 0)
	for {
		p, ok := member.read().(*packets.Publish)
		if !ok {
			t.Fatalf("member got %+v, want the message", p)
		}
		if string(p.Payload) == "kept" {
			break
		}
	}
}

package mqttd_test

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"mqttd"
	"mqttd/cluster"
	"mqttd/internal/natstest"
	"mqttd/internal/testutil"
	"mqttd/packets"
)

// startFlowPair starts two brokers of cluster "flow", each on its own
// server of a two-server NATS cluster, and returns them with the second
// server's URL and each broker's metrics.
func startFlowPair(t *testing.T) (nodes []*broker, url string, regs []*prometheus.Registry) {
	t.Helper()
	urls := natstest.Start(t, 2).URLs()
	for i := range 2 {
		regs = append(regs, prometheus.NewRegistry())
		cfg := &cluster.Config{Name: "flow", NodeName: fmt.Sprintf("n%d", i+1), Replicas: 1, NATS: cluster.NATSConfig{URL: urls[i]}}
		nodes = append(nodes, startBroker(t, mqttd.Options{Cluster: cfg, Registerer: regs[i]}))
	}
	for _, b := range nodes {
		testutil.WaitFor(t, "the node to be ready", func() bool { return b.srv.Ready() == nil })
	}
	return nodes, urls[1], regs
}

// pauser publishes pauses for a node named ghost on cluster "flow" every
// 100 ms, as a node whose delivery is behind does, until stop (which
// may be called more than once); then it resumes.
func pauser(t *testing.T, url string) (stop func()) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			_ = nc.Publish("mqttd.flow.flow", []byte("pghost"))
			select {
			case <-tick.C:
			case <-done:
				_ = nc.Publish("mqttd.flow.flow", []byte("rghost"))
				_ = nc.Flush()
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			<-stopped
			nc.Close()
		})
	}
}

// TestClusterPausedPublisherWaits: while another node's pause holds a
// node's sending, its queue to the cluster fills and a QoS 1 publisher's
// reader waits for room instead of dropping what it acknowledges: once
// the pause ends, a subscriber on the other node gets every message, in
// order, and no node counts a drop.
func TestClusterPausedPublisherWaits(t *testing.T) {
	t.Parallel()
	nodes, url, regs := startFlowPair(t)
	sub := connectSubscribed(t, &packets.Connect{ClientID: "sub", CleanStart: true}, nodes[1].addr,
		packets.Subscription{Filter: "flow/#"})
	awaitInterest(t, nodes[1].addr, nodes[0].addr)
	pub := connectRaw(t, nodes[0].addr, &packets.Connect{ClientID: "pub", CleanStart: true})
	stop := pauser(t, url)
	defer stop()
	testutil.WaitFor(t, "the publishing node paused", func() bool {
		st, _ := nodes[0].srv.Cluster()
		return st.PausesReceived > 0
	})

	// More than the node's queue: the last ones must wait.
	const total = cluster.OutQueueMessages + 500
	written := make(chan error, 1)
	go func() { written <- writeQoS1(pub.nc, total) }()
	testutil.WaitFor(t, "the publisher's reader waiting for room", func() bool {
		st, _ := nodes[0].srv.Cluster()
		return st.PublishWaits > 0 && st.Held > 0
	})
	stop()
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	for i := range total {
		expectAck(pub, packets.TypePuback, uint16(i%65535+1), 0)
	}
	for i := range total {
		if p := expectPublish(sub, "flow/x"); string(p.Payload) != strconv.Itoa(i) {
			t.Fatalf("message %d: got %q", i, p.Payload)
		}
	}
	for i, n := range nodes {
		if st, _ := n.srv.Cluster(); st.Dropped != 0 {
			t.Errorf("node %d: %+v", i+1, st)
		}
	}
	if v := metricValue(t, regs[0], "mqttd_cluster_publish_waits_total"); v == 0 {
		t.Error("mqttd_cluster_publish_waits_total 0")
	}
	if v := metricValue(t, regs[0], "mqttd_cluster_held_seconds_total"); v == 0 {
		t.Error("mqttd_cluster_held_seconds_total 0")
	}
}

// writeQoS1 writes total QoS 1 PUBLISHes on flow/x, numbered from 0, to
// nc, in one go.
func writeQoS1(nc net.Conn, total int) error {
	var b []byte
	for i := range total {
		p := &packets.Publish{Topic: "flow/x", QoS: 1, PacketID: uint16(i%65535 + 1), Payload: []byte(strconv.Itoa(i))}
		var err error
		if b, err = p.Append(b, packets.V311); err != nil {
			return err
		}
	}
	_, err := nc.Write(b)
	return err
}

// TestClusterDroppedInCounted: a message from the cluster this node
// cannot read is counted as dropped on its way in, in ClusterState and
// in mqttd_cluster_dropped_total{direction="in"}.
func TestClusterDroppedInCounted(t *testing.T) {
	t.Parallel()
	nodes, url, regs := startFlowPair(t)
	sub := connectSubscribed(t, &packets.Connect{ClientID: "sub", CleanStart: true}, nodes[1].addr,
		packets.Subscription{Filter: "in/#"})
	awaitInterest(t, nodes[1].addr, nodes[0].addr)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// A batch of no version a node sends, on node 2's subject.
	if err := nc.Publish("mqttd.flow.to.n2", []byte("bad")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the drop counted", func() bool {
		st, _ := nodes[1].srv.Cluster()
		return st.DroppedIn == 1
	})
	if st, _ := nodes[1].srv.Cluster(); st.Dropped != 1 || st.DroppedOut != 0 {
		t.Errorf("node 2: %+v", st)
	}
	if v := metricValue(t, regs[1], "mqttd_cluster_dropped_total"); v != 1 {
		t.Errorf("mqttd_cluster_dropped_total %v, want 1", v)
	}
	expectNothing(sub)
}

// TestClusterSlowSubscriberPausesSenders: a QoS 1 subscriber on node 2
// reading slower than a publisher on node 1 publishes holds node 1's
// sending once its session queue is deep, though node 2's own queue of
// messages from the cluster never is: node 2 pauses node 1, which keeps
// the messages, and the subscriber gets all of them, in order, none
// dropped from its queue.
func TestClusterSlowSubscriberPausesSenders(t *testing.T) {
	t.Parallel()
	nodes, pub, sub := startSlowPair(t)

	// The subscriber reads and acknowledges one message for each step,
	// on a goroutine of its own: a fifth of the publisher's pace.
	const total = 1000
	steps, got := make(chan int, total), make(chan string, total)
	defer close(steps)
	go func() {
		defer close(got)
		for n := range steps {
			for range n {
				p, err := sub.tryRead()
				pub, ok := p.(*packets.Publish)
				if err != nil || !ok {
					got <- fmt.Sprintf("read: %T %v", p, err)
					return
				}
				got <- string(pub.Payload)
				if b, err := (&packets.Puback{PacketID: pub.PacketID}).Append(nil, sub.v); err != nil || writeAll(sub.nc, b) != nil {
					return
				}
			}
		}
	}()
	for i := range total {
		pub.send(&packets.Publish{Topic: "slow/x", QoS: 1, PacketID: uint16(i + 1), Payload: []byte(strconv.Itoa(i))})
		expectAck(pub, packets.TypePuback, uint16(i+1), 0)
		if i%5 == 4 {
			steps <- 1
		}
	}
	testutil.WaitFor(t, "node 2 pausing node 1 for its subscriber", func() bool {
		st, _ := nodes[0].srv.Cluster()
		return st.PausesReceived > 0 && st.Held > 0
	})
	steps <- total - total/5
	for i := range total {
		if p := <-got; p != strconv.Itoa(i) {
			t.Fatalf("message %d: got %q", i, p)
		}
	}
	for i, n := range nodes {
		if st, _ := n.srv.Cluster(); st.Dropped != 0 {
			t.Errorf("node %d: %+v", i+1, st)
		}
		if d := n.srv.Stats().Dropped["queue_full"]; d != 0 {
			t.Errorf("node %d dropped %d from the subscriber's queue", i+1, d)
		}
	}
}

func writeAll(nc net.Conn, b []byte) error {
	_, err := nc.Write(b)
	return err
}

// startSlowPair starts two brokers of cluster "slow" (a window of 10, a
// queue of 800 per client), a QoS 1 subscriber to slow/# on the second
// and a publisher on the first.
func startSlowPair(t *testing.T) (nodes []*broker, pub, sub *rawConn) {
	t.Helper()
	urls := natstest.Start(t, 2).URLs()
	for i := range 2 {
		cfg := &cluster.Config{Name: "slow", NodeName: fmt.Sprintf("n%d", i+1), Replicas: 1, NATS: cluster.NATSConfig{URL: urls[i]}}
		nodes = append(nodes, startBroker(t, mqttd.Options{Cluster: cfg, Limits: mqttd.Limits{MaxInflight: 10, MaxQueued: 800}}))
	}
	for _, b := range nodes {
		testutil.WaitFor(t, "the node to be ready", func() bool { return b.srv.Ready() == nil })
	}
	sub = connectSubscribed(t, &packets.Connect{ClientID: "sub", CleanStart: true}, nodes[1].addr,
		packets.Subscription{Filter: "slow/#", Options: qos(1)})
	awaitInterest(t, nodes[1].addr, nodes[0].addr)
	pub = connectRaw(t, nodes[0].addr, &packets.Connect{ClientID: "pub", CleanStart: true})
	return nodes, pub, sub
}

// TestClusterStuckSubscriberLeftOut: a subscriber that reads nothing
// holds the other nodes' sending for a second at most: then its node
// stops pausing them for it, and what does not fit its queue is dropped
// and counted there, as on one node.
func TestClusterStuckSubscriberLeftOut(t *testing.T) {
	t.Parallel()
	nodes, pub, _ := startSlowPair(t)
	const total = 1200 // more than the window and the queue
	for i := range total {
		pub.send(&packets.Publish{Topic: "slow/x", QoS: 1, PacketID: uint16(i + 1), Payload: []byte(strconv.Itoa(i))})
		expectAck(pub, packets.TypePuback, uint16(i+1), 0)
	}
	testutil.WaitFor(t, "node 2 pausing node 1 for its subscriber", func() bool {
		st, _ := nodes[0].srv.Cluster()
		return st.PausesReceived > 0 && st.Held > 0
	})
	testutil.WaitFor(t, "the stuck subscriber's queue overflowing", func() bool {
		return nodes[1].srv.Stats().Dropped["queue_full"] > 0
	})
}

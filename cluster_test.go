package mqttd_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"

	"mqttd"
	"mqttd/bridge"
	"mqttd/cluster"
	"mqttd/internal/natstest"
	"mqttd/internal/testutil"
	"mqttd/packets"
)

// startCluster starts n brokers, each a node of one cluster on its own
// nats-server of a cluster of n, and waits until every node is connected
// and has its replicated store (until then it refuses clients).
func startCluster(t *testing.T, n int) []*broker {
	t.Helper()
	urls := natstest.Cluster(t, n)
	nodes := make([]*broker, n)
	for i := range n {
		cfg := &cluster.Config{Name: "test", NodeName: fmt.Sprintf("node%d", i+1), NATS: cluster.NATSConfig{URL: urls[i]}}
		nodes[i] = startBroker(t, mqttd.Options{Cluster: cfg})
	}
	for _, b := range nodes {
		waitStore(t, b)
	}
	return nodes
}

// waitStore waits until b is connected to NATS with its replicated store
// bound: JetStream elects its leaders first, which on a loaded machine
// can take longer than WaitFor's 10 s.
func waitStore(t *testing.T, b *broker) {
	t.Helper()
	testutil.WaitWithin(t, time.Minute, "the node to join its cluster", func() bool {
		st, ok := b.srv.Cluster()
		return ok && st.Connected && st.StoreReady
	})
}

// awaitInterest waits until the node at to knows of the subscriptions
// made on the node at from before the call: a probe subscribed on from
// after them is published on to until it arrives. The nodes' NATS
// servers pass interest along their route in the order it came, so the
// probe's comes after the others'.
func awaitInterest(t *testing.T, from, to string) {
	t.Helper()
	topic := fmt.Sprintf("probe/%d", time.Now().UnixNano())
	got := make(chan struct{}, 1)
	sub := pahoConnect(t, from, topic+"-sub", nil)
	wait(t, sub.Subscribe(topic, 0, func(paho.Client, paho.Message) {
		select {
		case got <- struct{}{}:
		default:
		}
	}))
	pub := pahoConnect(t, to, topic+"-pub", nil)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		wait(t, pub.Publish(topic, 0, false, "probe"))
		select {
		case <-got:
			wait(t, sub.Unsubscribe(topic))
			sub.Disconnect(0)
			pub.Disconnect(0)
			return
		case <-tick.C:
		case <-deadline:
			t.Fatalf("a subscription on %s was not known on %s within 10 s", from, to)
		}
	}
}

// publishQoS2 publishes on rc at QoS 2, through PUBCOMP.
func publishQoS2(rc *rawConn, id uint16, topic, payload string) {
	rc.t.Helper()
	rc.send(&packets.Publish{Topic: topic, QoS: 2, PacketID: id, Payload: []byte(payload)})
	expectAck(rc, packets.TypePubrec, id, 0)
	rc.send(&packets.Pubrel{PacketID: id})
	expectAck(rc, packets.TypePubcomp, id, 0)
}

// readUntil reads PUBLISHes on rc up to one whose payload is fence, and
// returns the payloads before it with the QoS each came at.
func readUntil(rc *rawConn, fence string) []string {
	rc.t.Helper()
	var got []string
	for {
		p, ok := rc.read().(*packets.Publish)
		if !ok {
			rc.t.Fatalf("got %T, want a PUBLISH", p)
		}
		if string(p.Payload) == fence {
			return got
		}
		got = append(got, fmt.Sprintf("%s@%d", p.Payload, p.QoS))
	}
}

// TestClusterDeliversAcrossNodes: a subscriber on one node gets, once
// each, the messages published at every QoS on the other nodes, and a
// subscriber on the publisher's own node gets them once too (nothing
// comes back to the node it left); a topic nobody subscribes to crosses
// to no one.
func TestClusterDeliversAcrossNodes(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	a, b, c := nodes[0].addr, nodes[1].addr, nodes[2].addr
	subA := connectSubscribed(t, &packets.Connect{ClientID: "sub-a", CleanStart: true}, a,
		packets.Subscription{Filter: "c/+/x", Options: qos(2)})
	subB := connectSubscribed(t, &packets.Connect{ClientID: "sub-b", CleanStart: true}, b,
		packets.Subscription{Filter: "c/#", Options: qos(2)})
	awaitInterest(t, a, b)
	awaitInterest(t, a, c)
	awaitInterest(t, b, c)

	for _, from := range []struct{ name, addr string }{{"b", b}, {"c", c}} {
		pub := connectRaw(t, from.addr, &packets.Connect{ClientID: "pub-" + from.name, CleanStart: true})
		topic := "c/" + from.name + "/x"
		pub.send(&packets.Publish{Topic: topic, Payload: []byte(from.name + "0")})
		pub.send(&packets.Publish{Topic: "c/" + from.name + "/y", Payload: []byte("not for a")})
		publishQoS1(pub, 1, topic, false)
		publishQoS2(pub, 2, topic, from.name+"2")
		pub.send(&packets.Publish{Topic: topic, Payload: []byte("fence")})

		want := fmt.Sprintf("[%[1]s0@0 %[2]s@1 %[1]s2@2]", from.name, topic)
		if got := fmt.Sprint(readUntil(subA, "fence")); got != want {
			t.Errorf("from %s, the subscriber on a got %s, want %s", from.name, got, want)
		}
		wantB := fmt.Sprintf("[%[1]s0@0 not for a@0 %[2]s@1 %[1]s2@2]", from.name, topic)
		if got := fmt.Sprint(readUntil(subB, "fence")); got != wantB {
			t.Errorf("from %s, the subscriber on b got %s, want %s", from.name, got, wantB)
		}
	}
	expectNothing(subA)
	expectNothing(subB)
	for i, n := range nodes {
		st, _ := n.srv.Cluster()
		if st.Dropped != 0 {
			t.Errorf("node %d dropped %d messages", i+1, st.Dropped)
		}
	}
}

// TestClusterRetainedOnEveryNode: a message retained on one node is kept
// by every node, so a client subscribing later on another node gets it,
// and clearing it on a third clears it everywhere.
func TestClusterRetainedOnEveryNode(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	a, c := nodes[0].addr, nodes[2].addr
	pub := connectRaw(t, a, &packets.Connect{ClientID: "pub", CleanStart: true})
	publishQoS1(pub, 1, "r/1", true)

	retained := func(addr string) bool {
		// A node refuses a CONNECT whose claim the store did not answer
		// in time (under load): asked again at the next poll.
		rc := dialRaw(t, addr)
		rc.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, ClientID: "late", CleanStart: true})
		if ack, ok := rc.read().(*packets.Connack); !ok || ack.ReasonCode != 0 {
			rc.nc.Close()
			return false
		}
		subscribe(rc, packets.Subscription{Filter: "r/1"})
		defer rc.send(&packets.Disconnect{})
		got := rc.ping()
		return len(got) == 1 && got[0].(*packets.Publish).Retain
	}
	testutil.WaitFor(t, "the retained message on the third node", func() bool { return retained(c) })

	clr := connectRaw(t, nodes[1].addr, &packets.Connect{ClientID: "clear", CleanStart: true})
	clr.send(&packets.Publish{Topic: "r/1", Retain: true})
	testutil.WaitFor(t, "the retained message cleared on the first node", func() bool { return !retained(a) })
}

// TestClusterStateShown: a node's state in its cluster is in Cluster, the
// mqttd_cluster_* metrics and Ready, which fails once the node has lost
// every NATS server; a broker without a cluster says it is in none.
func TestClusterStateShown(t *testing.T) {
	t.Parallel()
	servers := natstest.Start(t, 2)
	urls := servers.URLs()
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	var nodes []*broker
	for i := range 2 {
		cfg := &cluster.Config{Name: "shown", NodeName: fmt.Sprintf("n%d", i+1), Replicas: 1, NodeTimeout: 2 * time.Second, NATS: cluster.NATSConfig{URL: urls[i]}}
		nodes = append(nodes, startBroker(t, mqttd.Options{Cluster: cfg, Registerer: regs[i]}))
	}
	for _, b := range nodes {
		testutil.WaitFor(t, "the node to be ready", func() bool { return b.srv.Ready() == nil })
	}
	sub := connectSubscribed(t, &packets.Connect{ClientID: "sub", CleanStart: true}, nodes[0].addr,
		packets.Subscription{Filter: "s/#"})
	awaitInterest(t, nodes[0].addr, nodes[1].addr)
	pub := connectRaw(t, nodes[1].addr, &packets.Connect{ClientID: "pub", CleanStart: true})
	pub.send(&packets.Publish{Topic: "s/1", Payload: []byte("fence")})
	readUntil(sub, "fence")

	st, ok := nodes[0].srv.Cluster()
	if !ok || st.Name != "shown" || st.Node != "n1" || !st.Connected || st.Filters != 1 || st.MessagesIn == 0 {
		t.Errorf("node 1: %+v, %v", st, ok)
	}
	if st, _ := nodes[1].srv.Cluster(); st.MessagesOut == 0 {
		t.Errorf("node 2 sent nothing: %+v", st)
	}
	if v := metricValue(t, regs[0], "mqttd_cluster_connected"); v != 1 {
		t.Errorf("mqttd_cluster_connected %v, want 1", v)
	}
	if v := metricValue(t, regs[0], "mqttd_cluster_messages_total"); v < 2 {
		t.Errorf("mqttd_cluster_messages_total %v, want the probe and the fence at least", v)
	}
	if v := metricValue(t, regs[0], "mqttd_cluster_filters"); v != 1 {
		t.Errorf("mqttd_cluster_filters %v, want 1 (s/#)", v)
	}
	sys := connectSubscribed(t, &packets.Connect{ClientID: "sys", CleanStart: true}, nodes[0].addr,
		packets.Subscription{Filter: "$SYS/broker/cluster/#"})
	values := map[string]string{}
	for len(values) < 9 {
		p, ok := sys.read().(*packets.Publish)
		if !ok {
			t.Fatalf("got %T, want a $SYS value", p)
		}
		values[strings.TrimPrefix(p.Topic, "$SYS/broker/cluster/")] = string(p.Payload)
	}
	if values["node"] != "n1" || values["connected"] != "1" || values["filters"] != "1" || values["messages/received"] == "0" ||
		values["takeovers/in"] != "0" || values["nodes"] == "" {
		t.Errorf("$SYS/broker/cluster/: %v", values)
	}
	testutil.WaitFor(t, "both nodes to see each other beat", func() bool {
		return metricValue(t, regs[0], "mqttd_cluster_nodes") == 2 && metricValue(t, regs[1], "mqttd_cluster_nodes") == 2
	})
	if v := metricValue(t, regs[0], "mqttd_cluster_store_ready"); v != 1 {
		t.Errorf("mqttd_cluster_store_ready %v, want 1", v)
	}

	// A node fails over to the other servers it learned of: only with
	// none left is it out of the cluster.
	servers.Shutdown(0)
	servers.Shutdown(1)
	testutil.WaitFor(t, "Ready to fail without NATS", func() bool {
		err := nodes[0].srv.Ready()
		return err != nil && strings.Contains(err.Error(), "cluster shown")
	})
	if v := metricValue(t, regs[0], "mqttd_cluster_connected"); v != 0 {
		t.Errorf("mqttd_cluster_connected %v after the servers stopped, want 0", v)
	}

	alone := startBroker(t, mqttd.Options{})
	if _, ok := alone.srv.Cluster(); ok {
		t.Error("a broker without a cluster says it is in one")
	}
}

// TestClusterBridges: a bridge configured alike on two nodes forwards
// each message once, from the node its publisher is on, and brings each
// remote message in once to every node's subscribers; each node's bridge
// is its own client on the remote.
func TestClusterBridges(t *testing.T) {
	t.Parallel()
	remote, raddr := startServer(t, mqttd.Options{})
	urls := natstest.Cluster(t, 2)
	var nodes []*broker
	for i := range 2 {
		cfg := &cluster.Config{Name: "bridged", NodeName: fmt.Sprintf("n%d", i+1), Replicas: 1, NATS: cluster.NATSConfig{URL: urls[i]}}
		b := bridgeTo(raddr, "5", rule("up/#", bridge.Out, 1, "", ""), rule("down/#", bridge.In, 1, "", ""))
		b.ClientID = "" // the default: the node's name, then the bridge's
		nodes = append(nodes, startBroker(t, mqttd.Options{DataDir: t.TempDir(), Cluster: cfg, Bridges: []bridge.Config{b}}))
	}
	for i, n := range nodes {
		waitStore(t, n)
		waitBridge(t, n.srv, true)
		waitRemoteSub(t, remote, fmt.Sprintf("n%d.cloud", i+1), "down/#")
	}
	// Each node's subscriber, and each bridge's out rule, wanted on the
	// other node.
	sub1 := connectSubscribed(t, &packets.Connect{ClientID: "sub1", CleanStart: true}, nodes[0].addr,
		packets.Subscription{Filter: "up/#"}, packets.Subscription{Filter: "down/#"})
	sub2 := connectSubscribed(t, &packets.Connect{ClientID: "sub2", CleanStart: true}, nodes[1].addr,
		packets.Subscription{Filter: "down/#"})
	awaitInterest(t, nodes[0].addr, nodes[1].addr)
	awaitInterest(t, nodes[1].addr, nodes[0].addr)
	atRemote := connectSubscribed(t, &packets.Connect{ClientID: "remote-sub", CleanStart: true}, raddr,
		packets.Subscription{Filter: "up/#"})

	// Out, from node 2: once at the remote. Node 1 has it too (sub1 shows
	// when), and its bridge leaves it: what node 1's bridge forwards next
	// comes after anything it might have taken.
	pub2 := connectRaw(t, nodes[1].addr, &packets.Connect{ClientID: "pub2", CleanStart: true})
	pub2.send(&packets.Publish{Topic: "up/2", Payload: []byte("from 2")})
	pub2.send(&packets.Publish{Topic: "up/2", Payload: []byte("fence")})
	if got := fmt.Sprint(readUntil(sub1, "fence")); got != "[from 2@0]" {
		t.Fatalf("node 1's subscriber got %s", got)
	}
	pub1 := connectRaw(t, nodes[0].addr, &packets.Connect{ClientID: "pub1", CleanStart: true})
	pub1.send(&packets.Publish{Topic: "up/1", Payload: []byte("from 1")})
	pub1.send(&packets.Publish{Topic: "up/1", Payload: []byte("fence1")})
	readUntil(sub1, "fence1")
	var seen []string
	for fences := 0; fences < 2; {
		p, ok := atRemote.read().(*packets.Publish)
		if !ok {
			t.Fatalf("the remote's subscriber got %T", p)
		}
		switch string(p.Payload) {
		case "fence", "fence1":
			fences++
		default:
			seen = append(seen, string(p.Payload))
		}
	}
	if slices.Sort(seen); fmt.Sprint(seen) != "[from 1 from 2]" {
		t.Errorf("the remote got %v, want each message once", seen)
	}
	expectNothing(atRemote)

	// In: each node's subscriber gets a remote message once.
	rpub := connectRaw(t, raddr, &packets.Connect{ClientID: "remote-pub", CleanStart: true})
	rpub.send(&packets.Publish{Topic: "down/x", Payload: []byte("cmd")})
	rpub.send(&packets.Publish{Topic: "down/x", Payload: []byte("fence")})
	for i, sub := range []*rawConn{sub1, sub2} {
		if got := fmt.Sprint(readUntil(sub, "fence")); got != "[cmd@0]" {
			t.Errorf("node %d's subscriber got %s, want the remote's message once", i+1, got)
		}
	}
	expectNothing(sub1)
	expectNothing(sub2)
}

// TestClusterDeadLettersShared: a dead letter set aside on one node
// reaches a $DLQ/ subscriber on another, live, and is kept there too:
// the cluster sets its letters aside as one broker.
func TestClusterDeadLettersShared(t *testing.T) {
	t.Parallel()
	urls := natstest.Cluster(t, 3)
	var nodes []*broker
	for i := range 2 {
		cfg := &cluster.Config{Name: "dlq", NodeName: fmt.Sprintf("node%d", i+1), NATS: cluster.NATSConfig{URL: urls[i]}}
		nodes = append(nodes, startBroker(t, mqttd.Options{Cluster: cfg, DataDir: t.TempDir(), Limits: mqttd.Limits{MaxQueued: 1}}))
		waitStore(t, nodes[i])
	}
	a, b := nodes[0], nodes[1]
	watcher := connectSubscribed(t, &packets.Connect{ClientID: "watcher", CleanStart: true}, a.addr,
		packets.Subscription{Filter: "$DLQ/#", Options: packets.SubOptions{QoS: 1}})
	awaitInterest(t, a.addr, b.addr)
	offlineSubscriber(t, b.addr, "sub", "t/#")
	pub := connectAs(t, b.addr, packets.V311, &packets.Connect{ClientID: "pub", CleanStart: true})
	publishQoS1(pub, 1, "t/0", false)
	publishQoS1(pub, 2, "t/1", false)
	p, ok := watcher.read().(*packets.Publish)
	if !ok || p.Topic != "$DLQ/queue_full/t/1" {
		t.Fatalf("node 1's $DLQ/# subscriber got %+v, want node 2's letter for t/1", p)
	}
	testutil.WaitFor(t, "the letter kept on node 1", func() bool {
		page, _ := a.srv.RetainedTopics("$DLQ/", 10, 0)
		return len(page) == 1 && page[0].Topic == "$DLQ/queue_full/t/1"
	})
}

package mqttd_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"mqttd"
	"mqttd/cluster"
	"mqttd/internal/natstest"
	"mqttd/internal/testutil"
	"mqttd/packets"
)

// expectTakenOver reads the DISCONNECT 0x8E a 5.0 connection gets when
// another node takes its client id, and then the close.
func expectTakenOver(rc *rawConn) {
	rc.t.Helper()
	d, ok := rc.read().(*packets.Disconnect)
	if !ok || d.ReasonCode != packets.SessionTakenOver {
		rc.t.Fatalf("got %+v, want DISCONNECT Session taken over", d)
	}
	rc.expectClosed()
}

// TestClusterTakeoverMovesSession: a client reconnecting to another node
// without a clean start finds its session there: session present, its
// subscription (now wanted by the new node), the message it had not
// acknowledged again with DUP; its old connection is told Session taken
// over and leaves no will. Reconnecting clean to a third node ends the
// session: the will of the connection it replaces is published, once.
func TestClusterTakeoverMovesSession(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	a, b, c := nodes[0].addr, nodes[1].addr, nodes[2].addr
	wills := connectSubscribed(t, &packets.Connect{ClientID: "wills", CleanStart: true}, c,
		packets.Subscription{Filter: "will/#"})
	awaitInterest(t, c, a)
	awaitInterest(t, c, b)

	cp := expiringConnect("dev", 600)
	cp.ProtocolName, cp.ProtocolVersion = "MQTT", packets.V5
	setWill(cp, "will/dev")
	old := connectSubscribed(t, cp, a, packets.Subscription{Filter: "t/#", Options: packets.SubOptions{QoS: 1}})
	awaitInterest(t, a, c)
	pub := connectRaw(t, c, &packets.Connect{ClientID: "pub", CleanStart: true})
	pub.send(&packets.Publish{Topic: "t/1", QoS: 1, PacketID: 1, Payload: []byte("m1")})
	expectAck(pub, packets.TypePuback, 1, 0)
	if p, ok := old.read().(*packets.Publish); !ok || string(p.Payload) != "m1" {
		t.Fatalf("on node 1 got %+v, want m1", p)
	}

	cp = expiringConnect("dev", 600)
	setWill(cp, "will/dev")
	moved, ack := connectReply(t, b, packets.V5, cp)
	if ack.ReasonCode != packets.Success || !ack.SessionPresent {
		t.Fatalf("CONNACK on node 2 %+v: want success with the session present", ack)
	}
	expectTakenOver(old)
	p, ok := moved.read().(*packets.Publish)
	if !ok || string(p.Payload) != "m1" || !p.Dup || p.QoS != 1 {
		t.Fatalf("on node 2 got %+v, want m1 again with DUP", p)
	}
	moved.send(&packets.Puback{PacketID: p.PacketID})
	awaitInterest(t, b, c)
	pub.send(&packets.Publish{Topic: "t/2", QoS: 1, PacketID: 2, Payload: []byte("m2")})
	expectAck(pub, packets.TypePuback, 2, 0)
	if p, ok := moved.read().(*packets.Publish); !ok || string(p.Payload) != "m2" {
		t.Fatalf("on node 2 got %+v, want m2 through the moved subscription", p)
	}

	fresh, ack := connectReply(t, c, packets.V5, &packets.Connect{ClientID: "dev", CleanStart: true})
	if ack.ReasonCode != packets.Success || ack.SessionPresent {
		t.Fatalf("clean CONNACK on node 3 %+v: want success without a session", ack)
	}
	expectTakenOver(moved)
	fresh.send(&packets.Disconnect{})
	// The will of node 2's connection, published once (once its record
	// is taken out of the cluster's store); node 1's none.
	if p, ok := wills.read().(*packets.Publish); !ok || p.Topic != "will/dev" {
		t.Fatalf("got %+v, want the will of node 2's connection", p)
	}
	pub.send(&packets.Publish{Topic: "will/fence", Payload: []byte("fence")})
	if got := readUntil(wills, "fence"); len(got) != 0 {
		t.Fatalf("wills published after the first: %v", got)
	}
	in, out := 0, 0
	for _, n := range nodes {
		st, _ := n.srv.Cluster()
		in += int(st.TakeoversIn)
		out += int(st.TakeoversOut)
	}
	if in != 2 || out != 2 {
		t.Fatalf("takeovers in %d, out %d; want 2 each", in, out)
	}
}

// TestClusterRefusesWithoutStore: a node that cannot reach a replicated
// store (its NATS has no JetStream) refuses clients with Server
// unavailable, counts them and is not ready.
func TestClusterRefusesWithoutStore(t *testing.T) {
	t.Parallel()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	n := startBroker(t, mqttd.Options{Cluster: &cluster.Config{Name: "nojs", NodeName: "n1", NATS: cluster.NATSConfig{URL: ns.ClientURL()}}})
	testutil.WaitFor(t, "the node to connect", func() bool { st, _ := n.srv.Cluster(); return st.Connected })
	if _, ack := connectReply(t, n.addr, packets.V5, &packets.Connect{ClientID: "x", CleanStart: true}); ack.ReasonCode != packets.ServerUnavailable {
		t.Fatalf("5.0 CONNACK %#x, want Server unavailable", byte(ack.ReasonCode))
	}
	if _, ack := connectReply(t, n.addr, packets.V311, &packets.Connect{ClientID: "y", CleanStart: true}); ack.ReasonCode != packets.ConnRefusedServerUnavailable {
		t.Fatalf("3.1.1 CONNACK %d, want 3 (server unavailable)", ack.ReasonCode)
	}
	if st, _ := n.srv.Cluster(); st.Refused != 2 || st.StoreReady {
		t.Fatalf("cluster state %+v: want 2 refused, store not ready", st)
	}
	if err := n.srv.Ready(); err == nil {
		t.Fatal("ready without a replicated store")
	}
}

// TestClusterKeptSessionLetGo: a node restarted with a persistent session
// in its store lets it go when the client took its id to another node
// meanwhile, and keeps (claims) the one nobody took.
func TestClusterKeptSessionLetGo(t *testing.T) {
	t.Parallel()
	urls := natstest.Cluster(t, 3)
	dir := t.TempDir()
	node := func(i int, dataDir string) *broker {
		t.Helper()
		cfg := &cluster.Config{Name: "kept", NodeName: fmt.Sprintf("n%d", i+1), NATS: cluster.NATSConfig{URL: urls[i]}}
		b := startBroker(t, mqttd.Options{DataDir: dataDir, Cluster: cfg})
		waitStore(t, b)
		return b
	}
	n1 := node(0, dir)
	n2 := node(1, "")
	for _, id := range []string{"moves", "stays"} {
		cp := expiringConnect(id, 600)
		cp.ProtocolName, cp.ProtocolVersion = "MQTT", packets.V5
		rc := connectSubscribed(t, cp, n1.addr, packets.Subscription{Filter: "k/" + id})
		rc.send(&packets.Disconnect{})
		rc.expectClosed()
	}
	n1.stop()
	if rc, present := reconnect5(t, n2.addr, "moves", 600); present {
		t.Fatal("session present on node 2 while node 1, which had it, is down")
	} else {
		rc.send(&packets.Disconnect{})
	}
	n1 = node(0, dir)
	testutil.WaitFor(t, "node 1 to let the moved session go", func() bool {
		page, _ := n1.srv.Clients("", 10)
		return len(page) == 1 && page[0].ID == "stays"
	})
	rc, present := reconnect5(t, n1.addr, "stays", 600)
	if !present {
		t.Fatal("the session nobody took is not present on node 1")
	}
	rc.send(&packets.Disconnect{})
}

// TestClusterRetainedForLateNode: a node that joins after retained
// messages were set, changed and deleted on another finds the latest of
// each, and not the deleted one, from the cluster's replicated stream.
func TestClusterRetainedForLateNode(t *testing.T) {
	t.Parallel()
	urls := natstest.Cluster(t, 3)
	node := func(i int) *broker {
		t.Helper()
		cfg := &cluster.Config{Name: "late", NodeName: fmt.Sprintf("n%d", i+1), NATS: cluster.NATSConfig{URL: urls[i]}}
		b := startBroker(t, mqttd.Options{Cluster: cfg})
		waitStore(t, b)
		return b
	}
	n1 := node(0)
	pub := connectRaw(t, n1.addr, &packets.Connect{ClientID: "pub", CleanStart: true})
	for _, p := range []packets.Publish{
		{Topic: "late/a", Payload: []byte("a1"), Retain: true},
		{Topic: "late/a", Payload: []byte("a2"), Retain: true},
		{Topic: "late/gone", Payload: []byte("x"), Retain: true},
		{Topic: "late/gone", Retain: true},
		{Topic: "late/b", Payload: []byte("b"), Retain: true, QoS: 1, PacketID: 1},
	} {
		pub.send(&p)
		if p.QoS == 1 {
			expectAck(pub, packets.TypePuback, 1, 0)
		}
	}
	n3 := node(2)
	testutil.WaitFor(t, "the late node to keep the retained messages", func() bool {
		page, _ := n3.srv.RetainedTopics("", 10, 10)
		return len(page) == 2
	})
	page, _ := n3.srv.RetainedTopics("", 10, 10)
	got := map[string]string{}
	for _, r := range page {
		got[r.Topic] = string(r.Payload)
	}
	if fmt.Sprint(got) != "map[late/a:a2 late/b:b]" {
		t.Fatalf("retained on the late node: %v", got)
	}
}

// TestClusterCutOffClosesClients: a node that loses the cluster's store
// for its node_timeout closes its clients' connections (5.0: Use another
// server), leaving their wills to the nodes that still have it, and
// refuses clients.
func TestClusterCutOffClosesClients(t *testing.T) {
	t.Parallel()
	servers := natstest.Start(t, 3)
	cfg := &cluster.Config{Name: "cut", NodeName: "n1", NodeTimeout: time.Second, NATS: cluster.NATSConfig{URL: servers.URLs()[0]}}
	n := startBroker(t, mqttd.Options{Cluster: cfg})
	waitStore(t, n)
	cp := &packets.Connect{ClientID: "c", CleanStart: true, ProtocolName: "MQTT", ProtocolVersion: packets.V5}
	setWill(cp, "will/c")
	c := connectRaw(t, n.addr, cp)
	for i := range 3 {
		servers.Shutdown(i)
	}
	d, ok := c.read().(*packets.Disconnect)
	if !ok || d.ReasonCode != packets.UseAnotherServer {
		t.Fatalf("got %+v, want DISCONNECT Use another server", d)
	}
	c.expectClosed()
	if _, ack := connectReply(t, n.addr, packets.V5, &packets.Connect{ClientID: "d", CleanStart: true}); ack.ReasonCode != packets.ServerUnavailable {
		t.Fatalf("CONNACK %#x while cut off, want Server unavailable", byte(ack.ReasonCode))
	}
	st, _ := n.srv.Cluster()
	if !st.CutOff || n.srv.Stats().Disconnects["cluster_cut_off"] != 1 || n.srv.Stats().WillsPublished != 0 {
		t.Fatalf("cluster %+v, disconnects %v, wills published %d", st, n.srv.Stats().Disconnects, n.srv.Stats().WillsPublished)
	}
	if err := n.srv.Ready(); err == nil {
		t.Fatal("ready while cut off")
	}
}

// TestClusterCleanTakeoverDropsDelayedWill: a client whose will waits
// for a delay, back on another node with a clean start, is back in time
// [MQTT-3.1.2-8]: its old connection, taken over, leaves no will, as on
// one node.
func TestClusterCleanTakeoverDropsDelayedWill(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	watch := connectSubscribed(t, &packets.Connect{ClientID: "watch", CleanStart: true}, nodes[2].addr,
		packets.Subscription{Filter: "will"})
	awaitInterest(t, nodes[2].addr, nodes[0].addr)
	awaitInterest(t, nodes[2].addr, nodes[1].addr)
	old := willClient(t, nodes[0].addr, "dw", 30, 300, false)
	again := willClient(t, nodes[1].addr, "dw", 30, 300, true)
	expectTakenOver(old)
	again.send(&packets.Disconnect{})
	pub := connectRaw(t, nodes[0].addr, &packets.Connect{ClientID: "fence", CleanStart: true})
	pub.send(&packets.Publish{Topic: "will", Payload: []byte("fence")})
	if got := readUntil(watch, "fence"); len(got) != 0 {
		t.Fatalf("wills published: %v, want none", got)
	}
}

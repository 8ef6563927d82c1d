package mqttd_test

import (
	"context"
	"fmt"
	"time"

	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"mqttd"
	"mqttd/cluster"
	"mqttd/internal/natstest"
	"mqttd/internal/testutil"
	"mqttd/packets"
)

// startReplicated starts n brokers of one cluster keeping their
// persistent sessions in the replicated store, each with a data
// directory of its own (dirs, reused by a restart).
func startReplicated(t *testing.T, urls []string, dirs []string, i int) *broker {
	t.Helper()
	cfg := &cluster.Config{Name: "test", NodeName: fmt.Sprintf("node%d", i+1), NATS: cluster.NATSConfig{URL: urls[i]},
		Sessions: cluster.SessionsReplicated}
	b := startBroker(t, mqttd.Options{Cluster: cfg, DataDir: dirs[i]})
	waitStore(t, b)
	return b
}

// devOnNode2 starts two nodes with replicated sessions (over three NATS
// servers) and makes dev's persistent session (5.0, expiry 600 s, t/#
// at qos) on node 2, offline, its subscription known on node 1.
func devOnNode2(t *testing.T, qos byte) (a, b *broker) {
	t.Helper()
	urls := natstest.Cluster(t, 3)
	dirs := []string{t.TempDir(), t.TempDir()}
	a, b = startReplicated(t, urls, dirs, 0), startReplicated(t, urls, dirs, 1)
	cp := expiringConnect("dev", 600)
	cp.ProtocolName, cp.ProtocolVersion = "MQTT", packets.V5
	dev := connectSubscribed(t, cp, b.addr, packets.Subscription{Filter: "t/#", Options: packets.SubOptions{QoS: qos}})
	dev.send(&packets.Disconnect{})
	awaitInterest(t, b.addr, a.addr)
	return a, b
}

// devOnNode1 starts three nodes with replicated sessions, makes dev's
// persistent session (5.0, expiry 600 s, t/# at QoS 1) on node 1,
// offline, its subscription known on node 3, and returns the nodes and
// a 5.0 publisher on node 3.
func devOnNode1(t *testing.T) ([]*broker, *rawConn) {
	t.Helper()
	urls := natstest.Cluster(t, 3)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	nodes := make([]*broker, 3)
	for i := range nodes {
		nodes[i] = startReplicated(t, urls, dirs, i)
	}
	cp := expiringConnect("dev", 600)
	cp.ProtocolName, cp.ProtocolVersion = "MQTT", packets.V5
	dev := connectSubscribed(t, cp, nodes[0].addr, packets.Subscription{Filter: "t/#", Options: packets.SubOptions{QoS: 1}})
	dev.send(&packets.Disconnect{})
	awaitInterest(t, nodes[0].addr, nodes[2].addr)
	pub, _ := connectReply(t, nodes[2].addr, packets.V5, &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V5, ClientID: "pub", CleanStart: true})
	return nodes, pub
}

// TestClusterReplicatedSessionOutlivesNode: a persistent session whose
// node stops, with messages queued for it there, is found whole on
// another node: session present, its subscription, its messages.
func TestClusterReplicatedSessionOutlivesNode(t *testing.T) {
	t.Parallel()
	nodes, pub := devOnNode1(t)
	a, b := nodes[0], nodes[1].addr
	for i := range 3 {
		pub.send(&packets.Publish{Topic: "t/x", QoS: 1, PacketID: uint16(i + 1), Payload: fmt.Appendf(nil, "m%d", i)})
		expectAck(pub, packets.TypePuback, uint16(i+1), 0)
	}
	testutil.WaitFor(t, "node 1 to queue the messages", func() bool { return a.srv.Stats().Queued == 3 })
	// Each acknowledged once the stream held it: commits of one round
	// trip each at least, a record a message at least.
	if st, _ := a.srv.Cluster(); st.StoreCommits < 1 || st.StoreRoundTrips < st.StoreCommits || st.StoreRecords < 3 {
		t.Errorf("node 1's writes to the stream: %d commits, %d round trips, %d records; want at least 1, as many as the commits, 3",
			st.StoreCommits, st.StoreRoundTrips, st.StoreRecords)
	}
	a.stop()

	moved, ack := connectReply(t, b, packets.V5, expiringConnect("dev", 600))
	if ack.ReasonCode != packets.Success || !ack.SessionPresent {
		t.Fatalf("CONNACK on node 2 %+v: want success with the session present", ack)
	}
	for i := range 3 {
		p, ok := moved.read().(*packets.Publish)
		if !ok || string(p.Payload) != fmt.Sprintf("m%d", i) || p.QoS != 1 {
			t.Fatalf("on node 2 got %+v, want m%d", p, i)
		}
		moved.send(&packets.Puback{PacketID: p.PacketID})
	}
	awaitInterest(t, b, nodes[2].addr)
	// Refused while node 1's routes are held, after it left.
	publishUntilAcked(t, pub, &packets.Publish{Topic: "t/x", QoS: 1, PacketID: 9, Payload: []byte("after")})
	if p, ok := moved.read().(*packets.Publish); !ok || string(p.Payload) != "after" {
		t.Fatalf("on node 2 got %+v, want the next message through the adopted subscription", p)
	}
	// Adopted by node 2 (its CONNECT) or taken over by node 2 or 3 when
	// node 1 left, then handed to node 2: once in the cluster.
	st2, _ := nodes[1].srv.Cluster()
	st3, _ := nodes[2].srv.Cluster()
	if st2.Adopted+st3.Adopted != 1 {
		t.Errorf("nodes 2 and 3 counted %d and %d sessions adopted, want 1 between them", st2.Adopted, st3.Adopted)
	}
}

// publishUntilAcked publishes p (QoS 1) on pub, a 5.0 client, again while
// it is refused (0x80: a node it went to did not confirm it), for up to
// 10 s, and returns the refusals.
func publishUntilAcked(t *testing.T, pub *rawConn, p *packets.Publish) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for refused := 0; ; refused++ {
		pub.send(p)
		ack, ok := pub.read().(*packets.Puback)
		if !ok || ack.PacketID != p.PacketID {
			t.Fatalf("got %+v, want the PUBACK of %q", ack, p.Payload)
		}
		if ack.ReasonCode == packets.Success {
			return refused
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q refused (%#x) for 10 s", p.Payload, ack.ReasonCode)
		}
	}
}

// TestClusterReplicatedLeaveHandsSessionsOver: a node that stops (a
// rolling restart) leaves its persistent sessions to the others at once:
// a QoS 1 message published for one of them right after is refused (5.0:
// 0x80) until another node has taken the session over, never
// acknowledged and sent to no node; the client, reconnecting to another
// node, gets every message acknowledged. The will of a client connected
// to the node when it stopped is not published: the broker ended that
// connection.
func TestClusterReplicatedLeaveHandsSessionsOver(t *testing.T) {
	t.Parallel()
	nodes, pub := devOnNode1(t)
	a, b, c := nodes[0], nodes[1].addr, nodes[2].addr
	watcher := connectSubscribed(t, &packets.Connect{ClientID: "watcher", CleanStart: true}, c,
		packets.Subscription{Filter: "will/#"})
	awaitInterest(t, c, b)
	connectRaw(t, a.addr, &packets.Connect{ClientID: "lwt", CleanStart: true, WillFlag: true, WillTopic: "will/lwt", WillPayload: []byte("gone")})
	a.stop()
	// Refused until node 2 or 3 has taken dev's session over: the
	// default node_timeout (15 s) would find node 1 dead only later.
	refused := 0
	for i := range 5 {
		refused += publishUntilAcked(t, pub, &packets.Publish{Topic: "t/x", QoS: 1, PacketID: uint16(i + 1), Payload: fmt.Appendf(nil, "m%d", i)})
	}
	// Node 1's wills would have been swept before its sessions were
	// taken over, which the acknowledgements above followed.
	fence, _ := connectReply(t, b, packets.V5, &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V5, ClientID: "fence", CleanStart: true})
	fence.send(&packets.Publish{Topic: "will/fence", Payload: []byte("fence")})
	if p, ok := watcher.read().(*packets.Publish); !ok || p.Topic != "will/fence" {
		t.Fatalf("watcher got %+v before the fence: a will of a connection the broker ended", p)
	}
	moved, ack := connectReply(t, b, packets.V5, expiringConnect("dev", 600))
	if ack.ReasonCode != packets.Success || !ack.SessionPresent {
		t.Fatalf("CONNACK on node 2 %+v: want success with the session present", ack)
	}
	// At least once: a message refused by one node and sent again may
	// have been stored by another the first time.
	for i := 0; i < 5; {
		p, ok := moved.read().(*packets.Publish)
		switch {
		case ok && string(p.Payload) == fmt.Sprintf("m%d", i):
			i++
		case !ok || i == 0 || string(p.Payload) != fmt.Sprintf("m%d", i-1):
			t.Fatalf("on node 2 got %+v, want m%d (%d refusals while node 1 left)", p, i, refused)
		}
		moved.send(&packets.Puback{PacketID: p.PacketID})
	}
}

// TestClusterReplicatedTakenForDeadAlive: a node that takes another's
// sessions over while that node is alive (taken for dead: its beats late,
// its answers too) has them handed over, so that one node holds each;
// the client then finds its session, and its messages, on either.
func TestClusterReplicatedTakenForDeadAlive(t *testing.T) {
	t.Parallel()
	nodes, pub := devOnNode1(t)
	a, b := nodes[0], nodes[1]
	publishUntilAcked(t, pub, &packets.Publish{Topic: "t/x", QoS: 1, PacketID: 1, Payload: []byte("before")})
	b.srv.TakeDeadSessions("node1")
	if !b.srv.HoldsSession("dev") || a.srv.HoldsSession("dev") {
		t.Fatalf("after node 2's takeover: node 1 holds dev %v, node 2 %v; want node 2 alone",
			a.srv.HoldsSession("dev"), b.srv.HoldsSession("dev"))
	}
	awaitInterest(t, b.addr, nodes[2].addr)
	publishUntilAcked(t, pub, &packets.Publish{Topic: "t/x", QoS: 1, PacketID: 2, Payload: []byte("after")})
	dev, ack := connectReply(t, a.addr, packets.V5, expiringConnect("dev", 600))
	if !ack.SessionPresent {
		t.Fatalf("CONNACK on node 1 %+v: want the session present", ack)
	}
	for _, want := range []string{"before", "after"} {
		p, ok := dev.read().(*packets.Publish)
		if !ok || string(p.Payload) != want {
			t.Fatalf("got %+v, want %s", p, want)
		}
		dev.send(&packets.Puback{PacketID: p.PacketID})
	}
}

// TestClusterReplicatedSessionsMovedAndRestored: a node that kept its
// sessions in its own store moves them to the replicated store when it
// starts with cluster.sessions: replicated, and takes them back from
// there when it starts again, queued messages included.
func TestClusterReplicatedSessionsMovedAndRestored(t *testing.T) {
	t.Parallel()
	urls := natstest.Cluster(t, 1)
	dirs := []string{t.TempDir()}
	local := &cluster.Config{Name: "test", NodeName: "node1", NATS: cluster.NATSConfig{URL: urls[0]}}
	n := startBroker(t, mqttd.Options{Cluster: local, DataDir: dirs[0]})
	waitStore(t, n)
	cp := expiringConnect("dev", 600)
	cp.ProtocolName, cp.ProtocolVersion = "MQTT", packets.V5
	dev := connectSubscribed(t, cp, n.addr, packets.Subscription{Filter: "t/#", Options: packets.SubOptions{QoS: 1}})
	dev.send(&packets.Disconnect{})
	pub := connectRaw(t, n.addr, &packets.Connect{ClientID: "pub", CleanStart: true})
	pub.send(&packets.Publish{Topic: "t/x", QoS: 1, PacketID: 1, Payload: []byte("kept")})
	expectAck(pub, packets.TypePuback, 1, 0)
	n.stop()

	n = startReplicated(t, urls, dirs, 0)
	testutil.WaitFor(t, "the session restored", func() bool { return n.srv.Stats().Queued == 1 })
	// Moved: the stream holds the session's record and its entry.
	nc, err := nats.Connect(urls[0])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	stream, err := js.Stream(context.Background(), "mqttd_test_sessions")
	if err != nil || stream.CachedInfo().State.Msgs != 2 {
		t.Fatalf("the session stream after the move: %v (%v)", stream, err)
	}
	n.stop()
	n = startReplicated(t, urls, dirs, 0)
	back, ack := connectReply(t, n.addr, packets.V5, expiringConnect("dev", 600))
	if ack.ReasonCode != packets.Success || !ack.SessionPresent {
		t.Fatalf("CONNACK after two restarts %+v: want the session present", ack)
	}
	if p, ok := back.read().(*packets.Publish); !ok || string(p.Payload) != "kept" {
		t.Fatalf("got %+v, want the message queued before the first restart", p)
	}
}

// TestClusterConfirmedPublish: with replicated sessions, a QoS 1
// message acknowledged to its publisher is committed by the node whose
// persistent session it went to: the PUBACK waits for that node's
// commit, and a node that does not confirm in time turns it into a
// refusal (5.0: 0x80), which the publisher answers by sending again.
func TestClusterConfirmedPublish(t *testing.T) {
	t.Parallel()
	a, b := devOnNode2(t, 1)
	pub, _ := connectReply(t, a.addr, packets.V5, &packets.Connect{ClientID: "pub", CleanStart: true})

	release := b.srv.HoldCommits()
	defer release()
	pub.send(&packets.Publish{Topic: "t/1", QoS: 1, PacketID: 1, Payload: []byte("m1")})
	pub.wait = 500 * time.Millisecond
	if p, err := pub.tryRead(); err == nil {
		t.Fatalf("got %+v while node 2 held its commits, want nothing", p)
	}
	pub.wait = 0
	release()
	expectAck(pub, packets.TypePuback, 1, 0)

	a.srv.SetClusterConfirmTimeout(200 * time.Millisecond)
	release2 := b.srv.HoldCommits()
	defer release2()
	pub.send(&packets.Publish{Topic: "t/2", QoS: 1, PacketID: 2, Payload: []byte("m2")})
	expectAck(pub, packets.TypePuback, 2, packets.UnspecifiedError)
	if st := a.srv.Stats(); st.StoreRefused == 0 {
		t.Errorf("node 1's stats: no refusal counted")
	}
}

// TestClusterTakeoverKeepsReleasedQoS2: a QoS 2 message past PUBREC
// (only its PUBREL left to send) moves with its session and is stored
// on the new node, which sends the PUBREL again.
func TestClusterTakeoverKeepsReleasedQoS2(t *testing.T) {
	t.Parallel()
	urls := natstest.Cluster(t, 3)
	for _, sessions := range []string{cluster.SessionsLocal, cluster.SessionsReplicated} {
		t.Run(sessions, func(t *testing.T) {
			var nodes []*broker
			for i := range 2 {
				cfg := &cluster.Config{Name: "rel" + sessions, NodeName: fmt.Sprintf("node%d", i+1), NATS: cluster.NATSConfig{URL: urls[i]},
					Sessions: sessions}
				nodes = append(nodes, startBroker(t, mqttd.Options{Cluster: cfg, DataDir: t.TempDir()}))
				waitStore(t, nodes[i])
			}
			cp := expiringConnect("dev", 600)
			cp.ProtocolName, cp.ProtocolVersion = "MQTT", packets.V5
			dev := connectSubscribed(t, cp, nodes[0].addr, packets.Subscription{Filter: "t/#", Options: packets.SubOptions{QoS: 2}})
			pub := connectRaw(t, nodes[0].addr, &packets.Connect{ClientID: "pub", CleanStart: true})
			pub.send(&packets.Publish{Topic: "t/1", QoS: 1, PacketID: 1, Payload: []byte("m1")})
			expectAck(pub, packets.TypePuback, 1, 0)
			p, ok := dev.read().(*packets.Publish)
			if !ok || p.QoS != 1 {
				t.Fatalf("got %+v, want the QoS 1 message", p)
			}
			pub.send(&packets.Publish{Topic: "t/2", QoS: 2, PacketID: 2, Payload: []byte("m2")})
			expectAck(pub, packets.TypePubrec, 2, 0)
			pub.send(&packets.Pubrel{PacketID: 2})
			expectAck(pub, packets.TypePubcomp, 2, 0)
			p2, ok := dev.read().(*packets.Publish)
			if !ok || p2.QoS != 2 {
				t.Fatalf("got %+v, want the QoS 2 message", p2)
			}
			dev.send(&packets.Pubrec{PacketID: p2.PacketID})
			expectAck(dev, packets.TypePubrel, p2.PacketID, 0)

			moved, ack := connectReply(t, nodes[1].addr, packets.V5, expiringConnect("dev", 600))
			if !ack.SessionPresent {
				t.Fatalf("CONNACK %+v: want the session present", ack)
			}
			got := map[packets.Type]bool{}
			for range 2 {
				got[moved.read().Type()] = true
			}
			if !got[packets.TypePublish] || !got[packets.TypePubrel] {
				t.Fatalf("on node 2 got %v, want the QoS 1 message again and the PUBREL", got)
			}
			if st := nodes[1].srv.Stats(); st.StoreErrors != 0 {
				t.Fatalf("node 2: %d store errors: the moved session was not stored", st.StoreErrors)
			}
		})
	}
}

// TestClusterReplicatedExpiryAfterTakeover: an offline persistent session
// taken over from a node that stopped keeps its Session Expiry Interval
// on its new node, counted from its client's leaving: it ends there
// when the interval runs out, and a client back later finds no session
// on any node (the stream holds nothing of it).
func TestClusterReplicatedExpiryAfterTakeover(t *testing.T) {
	t.Parallel()
	urls := natstest.Cluster(t, 3)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	nodes := make([]*broker, 3)
	for i := range nodes {
		nodes[i] = startReplicated(t, urls, dirs, i)
	}
	// Long enough for the takeover to come first on a loaded machine.
	cp := expiringConnect("dev", 8)
	cp.ProtocolName, cp.ProtocolVersion = "MQTT", packets.V5
	dev := connectSubscribed(t, cp, nodes[0].addr, packets.Subscription{Filter: "t/#", Options: packets.SubOptions{QoS: 1}})
	dev.send(&packets.Disconnect{})
	dev.expectClosed()
	nodes[0].stop()
	holder := func() int {
		for i, n := range nodes[1:] {
			if n.srv.HoldsSession("dev") {
				return i + 2
			}
		}
		return 0
	}
	testutil.WaitFor(t, "node 2 or 3 to take dev's session over", func() bool { return holder() > 0 })
	took := holder()
	testutil.WaitFor(t, "dev's session to expire on its new node", func() bool { return holder() == 0 })
	for i, n := range nodes[1:] {
		// Clean start 0 finds a session if there is one; an expiry of 0
		// leaves none behind.
		back, ack := connectReply(t, n.addr, packets.V5, &packets.Connect{ClientID: "dev"})
		if ack.ReasonCode != packets.Success || ack.SessionPresent {
			t.Fatalf("CONNACK on node %d after the expiry on node %d: %+v, want no session", i+2, took, ack)
		}
		back.send(&packets.Disconnect{})
		back.expectClosed()
		// Its session ends with the connection, after the client sees it
		// closed: the next node's claim would otherwise be handed it.
		testutil.WaitFor(t, "the session of expiry 0 to end", func() bool { return !n.srv.HoldsSession("dev") })
	}
}

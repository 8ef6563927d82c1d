package mqttd_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"mqttd/internal/natstest"
	"mqttd/internal/testutil"
	"mqttd/packets"
)

// TestClusterQoS2SentAgainOnce: a QoS 2 message whose node did not get
// the other node's confirmation in time (held commits) is refused (the
// 3.1.1 connection closed) while that node does take it. Its publisher
// connects again, to the same node or to the subscriber's (which takes
// its session, with the message's Forward, over), and sends it again
// (DUP): the message is routed again under its stamp, the subscriber's
// session, remembering it, does not take it twice, and the flow
// completes. The subscriber gets it once, then the next message.
func TestClusterQoS2SentAgainOnce(t *testing.T) {
	t.Parallel()
	for _, again := range []int{0, 1} {
		t.Run(fmt.Sprintf("on node %d", again+1), func(t *testing.T) {
			t.Parallel()
			a, b := devOnNode2(t, 2)
			nodes := []*broker{a, b}

			pub := connectRawSession(t, a.addr, "pub", false, false)
			a.srv.SetClusterConfirmTimeout(200 * time.Millisecond)
			release := b.srv.HoldCommits()
			m1 := &packets.Publish{Topic: "t/1", QoS: 2, PacketID: 1, Payload: []byte("m1")}
			pub.send(m1)
			pub.expectClosed()
			release()

			pub = connectRawSession(t, nodes[again].addr, "pub", false, true)
			m1.Dup = true
			completeQoS2(t, pub, m1)
			completeQoS2(t, pub, &packets.Publish{Topic: "t/2", QoS: 2, PacketID: 2, Payload: []byte("m2")})

			dev, ack := connectReply(t, b.addr, packets.V5, expiringConnect("dev", 600))
			if !ack.SessionPresent {
				t.Fatalf("CONNACK %+v: want the session present", ack)
			}
			readPayloads(t, dev, "m1", "m2")
			resent, _ := nodes[again].srv.Cluster()
			sb, _ := b.srv.Cluster()
			if resent.QoS2Resent != 1 || sb.QoS2Duplicates != 1 {
				t.Errorf("resent %d on node %d, %d copies not taken again on node 2; want 1 and 1",
					resent.QoS2Resent, again+1, sb.QoS2Duplicates)
			}
		})
	}
}

// TestClusterQoS2StoreFailed: a node whose commit failed does not
// confirm the copy it delivered, and the session that took it forgets
// its stamp: the publisher, refused, sends the message again, and this
// time it is stored, so that the subscriber reading its session back on
// another node gets it. Before, it was lost both ways: the node
// confirmed what it had not kept, and passed the second copy over as
// one its session held.
func TestClusterQoS2StoreFailed(t *testing.T) {
	t.Parallel()
	a, b := devOnNode2(t, 2)
	pub := connectRawSession(t, a.addr, "pub", false, false)
	restore := b.srv.FailCommits(errors.New("test: the store is gone"))
	m1 := &packets.Publish{Topic: "t/1", QoS: 2, PacketID: 1, Payload: []byte("m1")}
	pub.send(m1)
	pub.expectClosed() // 3.1.1: refused
	restore()

	pub = connectRawSession(t, a.addr, "pub", false, true)
	m1.Dup = true
	completeQoS2(t, pub, m1)

	// On node 2 the copy whose unit failed went with its stamp: the
	// client gets m1 once, then m2, and acknowledges neither.
	dev, _ := connectReply(t, b.addr, packets.V5, expiringConnect("dev", 600))
	completeQoS2(t, pub, &packets.Publish{Topic: "t/2", QoS: 2, PacketID: 2, Payload: []byte("m2")})
	readPayloads(t, dev, "m1", "m2")
	dev.send(&packets.Disconnect{})
	dev.expectClosed()
	b.stop()

	// Both were stored: node 1 reads them back.
	dev, ack := connectReply(t, a.addr, packets.V5, expiringConnect("dev", 600))
	if !ack.SessionPresent {
		t.Fatalf("CONNACK %+v: want dev's session, read back on node 1", ack)
	}
	readPayloads(t, dev, "m1", "m2")
}

// completeQoS2 takes p, a QoS 2 message, through its flow from pub to
// its PUBCOMP.
func completeQoS2(t *testing.T, pub *rawConn, p *packets.Publish) {
	t.Helper()
	pub.send(p)
	expectAck(pub, packets.TypePubrec, p.PacketID, 0)
	pub.send(&packets.Pubrel{PacketID: p.PacketID})
	expectAck(pub, packets.TypePubcomp, p.PacketID, 0)
}

// readPayloads reads messages with these payloads from c, in order,
// and nothing else before them.
func readPayloads(t *testing.T, c *rawConn, payloads ...string) {
	t.Helper()
	for _, want := range payloads {
		if p, ok := c.read().(*packets.Publish); !ok || string(p.Payload) != want {
			t.Fatalf("got %+v, want %q (each of %q once, in order)", p, want, payloads)
		}
	}
}

// TestClusterQoS2RefusedIDFreed: a 5.0 QoS 2 message refused with 0x80
// (the other node's confirmation late) frees its packet id in the store
// too [MQTT-4.3.3-9], before the refusal is sent: when the publisher's
// node stops and another reads its session back from the replicated
// store, the client's next message with that id is a new one, routed,
// not taken for the refused one.
func TestClusterQoS2RefusedIDFreed(t *testing.T) {
	t.Parallel()
	urls := natstest.Cluster(t, 3)
	dirs := []string{t.TempDir(), t.TempDir()}
	a, b := startReplicated(t, urls, dirs, 0), startReplicated(t, urls, dirs, 1)
	sub := connectSubscribed(t, &packets.Connect{ClientID: "sub", CleanStart: true}, b.addr,
		packets.Subscription{Filter: "t/#", Options: packets.SubOptions{QoS: 2}})
	awaitInterest(t, b.addr, a.addr)

	pub, _ := connectReply(t, a.addr, packets.V5, expiringConnect("pub", 600))
	a.srv.SetClusterConfirmTimeout(time.Minute)
	release := b.srv.HoldCommits()
	t.Cleanup(release)
	in, _ := b.srv.Cluster()
	pub.send(&packets.Publish{Topic: "t/1", QoS: 2, PacketID: 1, Payload: []byte("refused")})
	// The copy goes out once node 1 has stored the id with it.
	testutil.WaitFor(t, "the copy on node 2", func() bool {
		st, _ := b.srv.Cluster()
		return st.MessagesIn > in.MessagesIn
	})
	// The id's deletion, which the refusal adds, is held; so must the
	// refusal be.
	holdA := a.srv.HoldCommits()
	t.Cleanup(holdA)
	refused := a.srv.Stats().StoreRefused
	a.srv.SetClusterConfirmTimeout(time.Millisecond)
	testutil.WaitFor(t, "the refusal", func() bool { return a.srv.Stats().StoreRefused > refused })
	if n := a.srv.HeldAnswers("pub"); n != 1 {
		t.Fatalf("%d answers held: want the 0x80 held until its id's deletion is stored", n)
	}
	holdA()
	expectAck(pub, packets.TypePubrec, 1, packets.UnspecifiedError)
	release()
	pub.send(&packets.Disconnect{})
	pub.expectClosed()
	a.stop()

	pub, ack := connectReply(t, b.addr, packets.V5, expiringConnect("pub", 600))
	if !ack.SessionPresent {
		t.Fatalf("CONNACK %+v: want pub's session, read back on node 2", ack)
	}
	pub.send(&packets.Publish{Topic: "t/2", QoS: 2, PacketID: 1, Payload: []byte("new")})
	expectAck(pub, packets.TypePubrec, 1, 0)
	pub.send(&packets.Pubrel{PacketID: 1})
	expectAck(pub, packets.TypePubcomp, 1, 0)
	for {
		switch p := sub.read().(type) {
		case *packets.Pubrel:
			sub.send(&packets.Pubcomp{PacketID: p.PacketID})
		case *packets.Publish:
			sub.send(&packets.Pubrec{PacketID: p.PacketID})
			switch string(p.Payload) {
			case "new":
				return
			case "refused":
				// It may have reached node 2 before its confirmation
				// was late: what some nodes had of it stays.
			default:
				t.Fatalf("subscriber got %q, want the new message", p.Payload)
			}
		default:
			t.Fatalf("subscriber got %+v, want the new message", p)
		}
	}
}

package mqttd_test

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"

	"mqttd"
	"mqttd/packets"
	"mqttd/persistence"
)

// TestBlockedCommitHoldsAcks: while a commit is held, the acknowledgements
// of what it covers (a QoS 1 message for a persistent session, a retained
// message) wait for it, with those the same connection owes after them
// (their order is kept [MQTT-4.6.0-2]); nothing else waits: PINGRESP,
// another connection's PUBACK, deliveries.
func TestBlockedCommitHoldsAcks(t *testing.T) {
	t.Parallel()
	g := newGatedStore()
	_, addr := startServer(t, mqttd.Options{Store: g})

	durable := connectRaw(t, addr, &packets.Connect{ClientID: "durable", CleanStart: false})
	durable.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "keep/#", Options: packets.SubOptions{QoS: 1}}}})
	if ack, ok := durable.read().(*packets.Suback); !ok || ack.ReasonCodes[0] != 1 {
		t.Fatalf("SUBACK: %+v", ack)
	}
	clean := connectRaw(t, addr, &packets.Connect{ClientID: "clean", CleanStart: true})
	clean.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "plain/#", Options: packets.SubOptions{QoS: 1}}}})
	clean.read()
	pub := connectRaw(t, addr, &packets.Connect{ClientID: "pub", CleanStart: true})
	other := connectRaw(t, addr, &packets.Connect{ClientID: "other", CleanStart: true})

	g.hold()
	pub.send(&packets.Publish{QoS: 1, PacketID: 1, Topic: "keep/a", Payload: []byte("1")})
	pub.send(&packets.Publish{QoS: 1, PacketID: 2, Topic: "plain/a", Payload: []byte("2")})
	<-g.entered
	if got := pub.ping(); len(got) != 0 {
		t.Fatalf("while the commit is held the publisher got %+v before PINGRESP", got)
	}
	other.send(&packets.Publish{QoS: 1, PacketID: 7, Topic: "plain/b", Payload: []byte("3")})
	if ack, ok := other.read().(*packets.Puback); !ok || ack.PacketID != 7 {
		t.Fatalf("a PUBACK that needs no commit was held: got %+v", ack)
	}
	other.send(&packets.Publish{QoS: 1, PacketID: 8, Topic: "keep/r", Payload: []byte("r"), Retain: true})
	if got := other.ping(); len(got) != 0 {
		t.Fatalf("a retained message was acknowledged before its commit: %+v", got)
	}
	for _, want := range []string{"keep/a"} {
		if p, ok := durable.read().(*packets.Publish); !ok || p.Topic != want {
			t.Fatalf("persistent subscriber got %+v, want %s delivered without waiting", p, want)
		}
	}
	for _, want := range []string{"plain/a", "plain/b"} {
		if p, ok := clean.read().(*packets.Publish); !ok || p.Topic != want {
			t.Fatalf("clean subscriber got %+v, want %s", p, want)
		}
	}

	g.release()
	for _, id := range []uint16{1, 2} {
		if ack, ok := pub.read().(*packets.Puback); !ok || ack.PacketID != id {
			t.Fatalf("after the commit got %+v, want PUBACK %d (in order)", ack, id)
		}
	}
	if ack, ok := other.read().(*packets.Puback); !ok || ack.PacketID != 8 {
		t.Fatalf("retained message: got %+v, want PUBACK 8", ack)
	}
}

// TestStoreErrorNotAcknowledged: a message that could not be stored is
// not acknowledged: a 5.0 publisher is told why (0x80, or 0x97 for a
// full disk), a 3.1.1 publisher, which cannot be told, loses its
// connection. Clean sessions go on being served meanwhile.
func TestStoreErrorNotAcknowledged(t *testing.T) {
	t.Parallel()
	g := newGatedStore()
	srv, addr := startServer(t, mqttd.Options{Store: g})
	durable := connectRaw(t, addr, &packets.Connect{ClientID: "durable", CleanStart: false})
	durable.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "keep/#", Options: packets.SubOptions{QoS: 2}}}})
	durable.read()
	v5 := connectRaw(t, addr, &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V5, ClientID: "v5", CleanStart: true})

	g.failWith(errors.New("disk on fire"))
	v5.send(&packets.Publish{QoS: 1, PacketID: 1, Topic: "keep/a", Payload: []byte("x")})
	if ack, ok := v5.read().(*packets.Puback); !ok || ack.ReasonCode != packets.UnspecifiedError {
		t.Fatalf("got %+v, want PUBACK 0x80", ack)
	}
	g.failWith(syscall.ENOSPC)
	v5.send(&packets.Publish{QoS: 2, PacketID: 2, Topic: "keep/b", Payload: []byte("y")})
	if rec, ok := v5.read().(*packets.Pubrec); !ok || rec.ReasonCode != packets.QuotaExceeded {
		t.Fatalf("got %+v, want PUBREC 0x97 for a full disk", rec)
	}
	// Refused, the packet id is free: the same id is a new message.
	g.failWith(nil)
	v5.send(&packets.Publish{QoS: 2, PacketID: 2, Topic: "keep/b", Payload: []byte("y")})
	if rec, ok := v5.read().(*packets.Pubrec); !ok || rec.ReasonCode != packets.Success {
		t.Fatalf("got %+v, want PUBREC 0 once the store works", rec)
	}
	// Clean sessions need no store.
	g.failWith(errors.New("disk on fire"))
	v5.send(&packets.Publish{QoS: 1, PacketID: 3, Topic: "nobody/keeps", Payload: []byte("z")})
	if ack, ok := v5.read().(*packets.Puback); !ok || ack.ReasonCode >= 0x80 {
		t.Fatalf("got %+v, want a PUBACK without error for a message no store needs", ack)
	}
	v3 := connectRaw(t, addr, &packets.Connect{ClientID: "v3", CleanStart: true})
	v3.send(&packets.Publish{QoS: 1, PacketID: 1, Topic: "keep/c", Payload: []byte("w")})
	v3.expectClosed()
	st := srv.Stats()
	if st.StoreErrors == 0 || st.StoreRefused < 3 || st.Disconnects["store_error"] != 1 {
		t.Errorf("stats: %d store errors, %d refused, %d store_error closes; want them counted",
			st.StoreErrors, st.StoreRefused, st.Disconnects["store_error"])
	}
}

// TestStoreErrorQoS2SentAgain: a 3.1.1 QoS 2 message whose store failed
// closes its publisher's connection, and is then neither held by its
// packet id nor left in the subscriber's session: the publisher's DUP is
// routed, stored and delivered once, and is there after a restart.
// Before, the id stayed taken in memory, so the DUP was acknowledged
// without being routed while the subscriber's copy was never stored.
func TestStoreErrorQoS2SentAgain(t *testing.T) {
	t.Parallel()
	g := newGatedStore()
	b := startBroker(t, mqttd.Options{Store: g})
	sub := connectRawSession(t, b.addr, "sub", false, false)
	sub.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "keep/#", Options: packets.SubOptions{QoS: 2}}}})
	sub.read()
	pub := connectRawSession(t, b.addr, "pub", false, false)

	g.failWith(errors.New("disk on fire"))
	m1 := &packets.Publish{QoS: 2, PacketID: 1, Topic: "keep/a", Payload: []byte("m1")}
	pub.send(m1)
	pub.expectClosed()
	g.failWith(nil)

	pub = connectRawSession(t, b.addr, "pub", false, true)
	m1.Dup = true
	completeQoS2(t, pub, m1)
	completeQoS2(t, pub, &packets.Publish{QoS: 2, PacketID: 2, Topic: "keep/b", Payload: []byte("m2")})
	readPayloads(t, sub, "m1", "m2") // neither acknowledged
	b.stop()

	b = startBroker(t, mqttd.Options{Store: g})
	sub = connectRawSession(t, b.addr, "sub", false, true)
	readPayloads(t, sub, "m1", "m2")
}

// TestIdleBrokerWritesNothing: once what clients did is stored, an idle
// broker, pings included, commits nothing (SD cards wear out).
func TestIdleBrokerWritesNothing(t *testing.T) {
	g := newGatedStore()
	srv, addr := startServer(t, mqttd.Options{Store: g})
	sub := connectRaw(t, addr, &packets.Connect{ClientID: "sub", CleanStart: false, KeepAlive: 60})
	sub.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "t/#", Options: packets.SubOptions{QoS: 1}}}})
	sub.read()
	pub := connectRaw(t, addr, &packets.Connect{ClientID: "pub", CleanStart: true})
	pub.send(&packets.Publish{QoS: 1, PacketID: 1, Topic: "t/1", Payload: []byte("x"), Retain: true})
	pub.read()
	p := sub.read().(*packets.Publish)
	sub.send(&packets.Puback{PacketID: p.PacketID})
	sub.ping()
	waitFor(t, "the PUBACK's delete to be committed", func() bool { return srv.Stats().StoreOps >= 7 })
	// Then until a ping round trip of both clients sees no commit: a
	// commit of what came before may still be on its way (once in a
	// hundred runs it came after the count was reached). Pings that
	// commit would keep this from ever passing.
	var before int
	waitFor(t, "the store quiet", func() bool {
		n := g.appliesSoFar()
		sub.ping()
		pub.ping()
		before = g.appliesSoFar()
		return before == n
	})
	for range 5 {
		sub.ping()
		pub.ping()
	}
	if n := g.appliesSoFar() - before; n != 0 {
		t.Errorf("%d commits while idle, want 0", n)
	}
}

// TestSlowStoreBackpressure: QoS 0 retained messages hold no
// acknowledgement back, so a publisher faster than the disk would make
// the operations waiting for a commit grow without bound; past the bound
// its reader waits for the commit before reading more.
func TestSlowStoreBackpressure(t *testing.T) {
	t.Parallel()
	g := newGatedStore()
	srv, addr := startServer(t, mqttd.Options{Store: g})
	pub := connectRaw(t, addr, &packets.Connect{ClientID: "pub", CleanStart: true})
	g.hold()
	var frames []byte
	for i := range 20000 {
		b, err := (&packets.Publish{Topic: fmt.Sprintf("r/%d", i), Payload: []byte("x"), Retain: true}).Append(nil, packets.V311)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, b...)
	}
	go pub.nc.Write(frames) // the broker stops reading before the end
	waitFor(t, "the publisher's reader to wait for the commit", func() bool { return srv.Stats().StoreBackpressure > 0 })
	if st := srv.Stats(); st.Retained >= 20000 {
		t.Errorf("all %d retained messages taken while the store was held", st.Retained)
	}
	g.release()
	waitFor(t, "every retained message", func() bool { return srv.Stats().Retained == 20000 })
	pub.ping()
}

// recordingStore is an in-memory store that keeps a copy of every batch
// it applies.
type recordingStore struct {
	persistence.Store
	mu      sync.Mutex
	batches [][]persistence.Op
}

func (r *recordingStore) Apply(b *persistence.Batch) error {
	r.mu.Lock()
	r.batches = append(r.batches, append([]persistence.Op(nil), b.Ops...))
	r.mu.Unlock()
	return r.Store.Apply(b)
}

// TestQoS2CommittedWhole: an inbound QoS 2 message of a persistent
// publisher is committed whole: its awaiting-PUBREL id with its entries
// in every persistent session, never the id in one transaction and an
// entry in the next (a crash between them would lose the message, or
// deliver it twice). Three publishers route at once, so their groups
// overlap.
func TestQoS2CommittedWhole(t *testing.T) {
	t.Parallel()
	rs := &recordingStore{Store: persistence.NewMemory()}
	srv, addr := startServer(t, mqttd.Options{Store: rs})
	for _, id := range []string{"a", "b"} {
		c := connectSubscribed(t, &packets.Connect{ClientID: id}, addr, packets.Subscription{Filter: "q/#", Options: qos(2)})
		c.send(&packets.Disconnect{})
		c.expectClosed()
	}
	const pubs, each = 3, 2000
	frames := make([][]byte, pubs)
	for i := range pubs {
		for j := 1; j <= each; j++ {
			p := &packets.Publish{QoS: 2, PacketID: uint16(j), Topic: fmt.Sprintf("q/%d", i), Payload: []byte(fmt.Sprint(j))}
			frames[i], _ = p.Append(frames[i], packets.V311)
			if j%50 == 0 { // keep under limits.max_awaiting_rel
				for k := j - 49; k <= j; k++ {
					frames[i], _ = (&packets.Pubrel{PacketID: uint16(k)}).Append(frames[i], packets.V311)
				}
			}
		}
	}
	var conns []*rawConn
	for i := range pubs {
		conns = append(conns, connectRaw(t, addr, &packets.Connect{ClientID: fmt.Sprint("p", i)}))
	}
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() { c.nc.Write(frames[i]) })
	}
	wg.Wait()
	waitFor(t, "every message routed", func() bool { return srv.Stats().MessagesReceived >= pubs*each })
	for _, c := range conns {
		c.ping()
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	split := 0
	for bi, b := range rs.batches {
		for _, op := range b {
			if op.Kind != persistence.OpPutAwaitingRel {
				continue
			}
			// The message (its payload is its packet id) and its entries
			// are in the same batch.
			var msgID uint64
			got := map[string]bool{}
			for _, o := range b {
				if o.Kind == persistence.OpPutMessage && o.Message.Origin == op.SessionID && string(o.Message.Payload) == fmt.Sprint(op.PacketID) {
					msgID = o.Message.ID
				}
			}
			for _, o := range b {
				if o.Kind == persistence.OpPutOutbound && msgID != 0 && o.Outbound.MessageID == msgID {
					got[o.SessionID] = true
				}
			}
			if !got["a"] || !got["b"] {
				if split++; split <= 3 {
					t.Errorf("batch %d: %s's id %d committed without its entries in both sessions (%v)", bi, op.SessionID, op.PacketID, got)
				}
			}
		}
	}
	t.Logf("%d commits, %d split", len(rs.batches), split)
}

// heldCommit starts a broker whose store holds the commit of other's
// QoS 1 PUBLISH to a persistent session; sub, a persistent session online
// on t/#, and pub, a clean one, then work while it is held.
func heldCommit(t *testing.T) (g *gatedStore, sub, pub, other *rawConn) {
	t.Helper()
	g = newGatedStore()
	_, addr := startServer(t, mqttd.Options{Store: g})
	sub = connectRaw(t, addr, &packets.Connect{ClientID: "sub", CleanStart: false})
	sub.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "t/#", Options: packets.SubOptions{QoS: 1}}}})
	sub.read()
	slow := connectRaw(t, addr, &packets.Connect{ClientID: "slow", CleanStart: false})
	slow.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "slow/#", Options: packets.SubOptions{QoS: 1}}}})
	slow.read()
	pub = connectRaw(t, addr, &packets.Connect{ClientID: "pub", CleanStart: true})
	other = connectRaw(t, addr, &packets.Connect{ClientID: "other", CleanStart: true})

	g.hold()
	other.send(&packets.Publish{QoS: 1, PacketID: 1, Topic: "slow/x", Payload: []byte("held")})
	<-g.entered // a commit is held: what is added now waits for the next
	return g, sub, pub, other
}

// TestAcknowledgedBeforeCommitNeedsNoCommit: while one commit is held, a
// QoS 1 message for an online persistent subscriber that acknowledges it
// before the next commit takes it leaves nothing to store, and its
// publisher gets its PUBACK at once, without waiting for any commit; one
// its subscriber has not acknowledged waits for the commit. Restarted,
// the broker has nothing queued for the subscriber.
func TestAcknowledgedBeforeCommitNeedsNoCommit(t *testing.T) {
	t.Parallel()
	g, sub, pub, other := heldCommit(t)

	for i := range 3 {
		id := uint16(10 + i)
		pub.send(&packets.Publish{QoS: 1, PacketID: id, Topic: "t/a", Payload: []byte{byte(i)}})
		p, ok := sub.read().(*packets.Publish)
		if !ok {
			t.Fatalf("subscriber got %+v", p)
		}
		sub.send(&packets.Puback{PacketID: p.PacketID})
		if ack, ok := pub.read().(*packets.Puback); !ok || ack.PacketID != id {
			t.Fatalf("message %d: got %+v, want its PUBACK while the commit is still held", i, ack)
		}
	}
	pub.send(&packets.Publish{QoS: 1, PacketID: 20, Topic: "t/b", Payload: []byte("unacked")})
	if p, ok := sub.read().(*packets.Publish); !ok || p.Topic != "t/b" {
		t.Fatalf("subscriber got %+v", p)
	}
	if got := pub.ping(); len(got) != 0 {
		t.Fatalf("a message its subscriber has not acknowledged was acknowledged before its commit: %+v", got)
	}
	g.release()
	if ack, ok := pub.read().(*packets.Puback); !ok || ack.PacketID != 20 {
		t.Fatalf("after the commit got %+v, want PUBACK 20", ack)
	}
	if ack, ok := other.read().(*packets.Puback); !ok || ack.PacketID != 1 {
		t.Fatalf("got %+v, want PUBACK 1", ack)
	}
}

// TestVoidedAnswersKeepTheirOrder: while a commit is held, the PUBACKs of
// messages their persistent subscriber acknowledges go out as the
// acknowledgements come, each once and in the order of the PUBLISHes
// [MQTT-4.6.0-2]: one whose message was acknowledged first waits behind
// the one before it, and what is released leaves the rest held.
func TestVoidedAnswersKeepTheirOrder(t *testing.T) {
	t.Parallel()
	g, sub, pub, other := heldCommit(t)

	delivered := map[byte]uint16{} // payload: the subscriber's packet id
	for i := range 4 {
		pub.send(&packets.Publish{QoS: 1, PacketID: uint16(10 + i), Topic: "t/a", Payload: []byte{byte(i)}})
	}
	for range 4 {
		p, ok := sub.read().(*packets.Publish)
		if !ok {
			t.Fatalf("subscriber got %+v", p)
		}
		delivered[p.Payload[0]] = p.PacketID
	}
	acks := func(step string, want ...uint16) {
		t.Helper()
		sub.ping() // the subscriber's PUBACK is handled
		var got []uint16
		for _, p := range pub.ping() {
			ack, ok := p.(*packets.Puback)
			if !ok {
				t.Fatalf("%s: publisher got %+v", step, p)
			}
			got = append(got, ack.PacketID)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: publisher got PUBACKs %v, want %v", step, got, want)
		}
	}
	sub.send(&packets.Puback{PacketID: delivered[1]})
	acks("second acknowledged first")
	sub.send(&packets.Puback{PacketID: delivered[0]})
	acks("first acknowledged", 10, 11)
	pub.send(&packets.Publish{QoS: 1, PacketID: 14, Topic: "t/a", Payload: []byte{4}})
	if p, ok := sub.read().(*packets.Publish); !ok {
		t.Fatalf("subscriber got %+v", p)
	} else {
		delivered[4] = p.PacketID
	}
	sub.send(&packets.Puback{PacketID: delivered[3]})
	acks("fourth acknowledged before the third")
	sub.send(&packets.Puback{PacketID: delivered[2]})
	acks("third acknowledged", 12, 13)
	sub.send(&packets.Puback{PacketID: delivered[4]})
	acks("fifth acknowledged", 14)

	g.release()
	if ack, ok := other.read().(*packets.Puback); !ok || ack.PacketID != 1 {
		t.Fatalf("got %+v, want PUBACK 1", ack)
	}
	acks("after the commit")
}

// TestHandedOffNotAcknowledgedEarly: a QoS 1 message for a share group of
// persistent sessions whose member leaves before the commit is handed to
// the other member; its publisher's PUBACK still waits for the commit
// (handing it off is not acknowledging it), and the other member gets it.
func TestHandedOffNotAcknowledgedEarly(t *testing.T) {
	t.Parallel()
	g := newGatedStore()
	srv, addr := startServer(t, mqttd.Options{Store: g})
	share := &packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "$share/g/t", Options: packets.SubOptions{QoS: 1}}}}
	m1 := connectRaw(t, addr, &packets.Connect{ClientID: "m1", CleanStart: false})
	m1.send(share)
	m1.read()
	m2 := connectRaw(t, addr, &packets.Connect{ClientID: "m2", CleanStart: false})
	slow := connectRaw(t, addr, &packets.Connect{ClientID: "slow", CleanStart: false})
	slow.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "slow", Options: packets.SubOptions{QoS: 1}}}})
	slow.read()
	pub := connectRaw(t, addr, &packets.Connect{ClientID: "pub", CleanStart: true})
	other := connectRaw(t, addr, &packets.Connect{ClientID: "other", CleanStart: true})

	g.hold()
	other.send(&packets.Publish{QoS: 1, PacketID: 1, Topic: "slow", Payload: []byte("held")})
	<-g.entered
	pub.send(&packets.Publish{QoS: 1, PacketID: 5, Topic: "t", Payload: []byte("m")})
	if p, ok := m1.read().(*packets.Publish); !ok || p.Topic != "t" {
		t.Fatalf("m1 got %+v", p)
	}
	m2.send(share) // joins the group; its SUBACK waits for the commit
	m2.ping()
	m1.nc.Close() // leaves without acknowledging: handed to m2
	if p, ok := m2.read().(*packets.Publish); !ok || p.Topic != "t" {
		t.Fatalf("m2 got %+v, want the message handed over", p)
	}
	waitFor(t, "the hand-off done", func() bool { return srv.Stats().SharedHandedOff == 1 })
	if got := pub.ping(); len(got) != 0 {
		t.Fatalf("the publisher got %+v before the commit: a hand-off is not an acknowledgement", got)
	}
	g.release()
	if ack, ok := pub.read().(*packets.Puback); !ok || ack.PacketID != 5 {
		t.Fatalf("after the commit got %+v, want PUBACK 5", ack)
	}
}

// TestReplacedSessionStoredWhole: under other_user_session: replace, the
// newcomer's session record is committed in the same transaction as the
// deletion of everything the other user's session held, so no crash can
// leave the newcomer owning the old subscriptions.
func TestReplacedSessionStoredWhole(t *testing.T) {
	t.Parallel()
	rec := &recordingStore{Store: persistence.NewMemory()}
	_, addr := startServer(t, mqttd.Options{Store: rec, Auth: mqttd.Auth{OtherUserSession: mqttd.OtherUserReplace}})
	bob := connectRaw(t, addr, &packets.Connect{ClientID: "dev", UsernameFlag: true, Username: "bob"})
	bob.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "bob/secret/#", Options: packets.SubOptions{QoS: 1}}}})
	bob.read()
	connectRaw(t, addr, &packets.Connect{ClientID: "dev", UsernameFlag: true, Username: "alice"}).ping()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, b := range rec.batches {
		for j, op := range b {
			if op.Kind != persistence.OpPutSession || op.Session.Username != "alice" {
				continue
			}
			deleted := false
			for _, before := range b[:j] {
				deleted = deleted || before.Kind == persistence.OpDeleteSession && before.SessionID == "dev"
			}
			if !deleted {
				t.Errorf("batch %d stores alice's record without deleting bob's session first: %+v", i, b)
			}
			return
		}
	}
	t.Fatal("alice's session record was never stored")
}

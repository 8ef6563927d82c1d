package mqttd_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"mqttd"
	"mqttd/packets"
)

// TestPubSubQoSDowngrade checks every publish QoS against every
// subscription QoS on both readers.
func TestPubSubQoSDowngrade(t *testing.T) { bothReaders(t, testPubSubQoSDowngrade) }

func testPubSubQoSDowngrade(t *testing.T, on ...serverOption) {
	checkGoroutines(t)
	_, addr := startServer(t, mqttd.Options{}, on...)
	for _, subQoS := range []byte{0, 1, 2} {
		t.Run(fmt.Sprintf("sub_qos%d", subQoS), func(t *testing.T) {
			var got collector
			sub := pahoConnect(t, addr, "sub", nil)
			topic := fmt.Sprintf("q/%d", subQoS)
			wait(t, sub.Subscribe(topic, subQoS, got.handler))
			pub := pahoConnect(t, addr, "pub", nil)
			for pubQoS := byte(0); pubQoS <= 2; pubQoS++ {
				wait(t, pub.Publish(topic, pubQoS, false, fmt.Sprintf("m%d", pubQoS)))
			}
			waitFor(t, "three messages", func() bool { return got.len() == 3 })
			seen := map[string]bool{}
			for i := range 3 {
				m := got.get(i)
				var pubQoS byte
				if _, err := fmt.Sscanf(string(m.Payload()), "m%d", &pubQoS); err != nil || seen[string(m.Payload())] {
					t.Fatalf("unexpected or repeated payload %q", m.Payload())
				}
				seen[string(m.Payload())] = true
				if want := min(pubQoS, subQoS); m.Qos() != want || m.Retained() {
					t.Errorf("%s: qos %d retained %v; want qos %d, not retained", m.Payload(), m.Qos(), m.Retained(), want)
				}
			}
			pub.Disconnect(100)
			sub.Disconnect(100)
		})
	}
}

// TestNoMatchingSubscribers checks the 5.0 PUBACK and PUBREC code 0x10
// for a message nobody subscribed to (accepted all the same: a retained
// one is kept), success once somebody has, and that a subscriber left
// out by No Local does not count; 3.1.1 acknowledges plainly.
func TestNoMatchingSubscribers(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, mqttd.Options{})
	pub := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "pub", CleanStart: true})
	ack := func(qos byte, retain bool) packets.ReasonCode {
		t.Helper()
		pub.send(&packets.Publish{Topic: "t", QoS: qos, PacketID: 1, Retain: retain, Payload: []byte("x")})
		switch p := pub.read().(type) {
		case *packets.Puback:
			return p.ReasonCode
		case *packets.Pubrec:
			pub.send(&packets.Pubrel{PacketID: 1})
			pub.read() // PUBCOMP
			return p.ReasonCode
		default:
			t.Fatalf("got %T", p)
		}
		return 0
	}
	for _, qos := range []byte{1, 2} {
		if code := ack(qos, true); code != packets.NoMatchingSubscribers {
			t.Errorf("QoS %d, nobody subscribed: %#x, want 0x10", qos, code)
		}
	}
	if n := srv.Stats().Retained; n != 1 {
		t.Errorf("%d retained, want the message kept", n)
	}
	subscribe(pub, packets.Subscription{Filter: "t", Options: packets.SubOptions{NoLocal: true}})
	pub.read() // the retained message
	if code := ack(1, false); code != packets.NoMatchingSubscribers {
		t.Errorf("only a No Local subscription of the publisher's own: %#x, want 0x10", code)
	}
	other := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "other", CleanStart: true})
	subscribe(other, packets.Subscription{Filter: "t"})
	other.read() // the retained message
	for _, qos := range []byte{1, 2} {
		if code := ack(qos, false); code != packets.Success {
			t.Errorf("QoS %d with a subscriber: %#x, want 0", qos, code)
		}
	}
	old := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "old", CleanStart: true})
	old.send(&packets.Publish{Topic: "nobody", QoS: 1, PacketID: 1, Payload: []byte("x")})
	if a, ok := old.read().(*packets.Puback); !ok || a.ReasonCode != 0 {
		t.Errorf("3.1.1 PUBACK %+v", a)
	}
}

// TestRequestProblemInformation checks Request Problem Information: an
// acknowledgement refusing a PUBLISH says why in a Reason String unless
// the client asked for none (0) [MQTT-3.1.2-29] or the string would take
// the packet past its Maximum Packet Size; a DISCONNECT says why either
// way (§3.1.2.11.7).
func TestRequestProblemInformation(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, mqttd.Options{})
	connect := func(id string, problemInfo byte, set bool, maxPacket uint32) *rawConn {
		cp := &packets.Connect{ClientID: id, CleanStart: true}
		if set {
			cp.Properties.RequestProblemInfo = problemInfo
			cp.Properties.Set(packets.PropRequestProblemInfo)
		}
		if maxPacket > 0 {
			cp.Properties.MaximumPacketSize = maxPacket
			cp.Properties.Set(packets.PropMaximumPacketSize)
		}
		return connectAs(t, addr, packets.V5, cp)
	}
	refused := func(rc *rawConn) *packets.Puback {
		t.Helper()
		rc.send(&packets.Publish{Topic: "$SYS/x", QoS: 1, PacketID: 1, Payload: []byte("x")})
		ack, ok := rc.read().(*packets.Puback)
		if !ok || ack.ReasonCode != packets.NotAuthorized {
			t.Fatalf("got %+v, want PUBACK 0x87", ack)
		}
		return ack
	}
	if ack := refused(connect("default", 0, false, 0)); ack.Properties.ReasonString == "" {
		t.Error("no Reason String on a refusal, the default being to send them")
	}
	if ack := refused(connect("asked", 1, true, 0)); ack.Properties.ReasonString == "" {
		t.Error("no Reason String on a refusal for a client that asked for them")
	}
	// 24 bytes: the CONNACK fits [MQTT-3.1.2-24], a PUBACK with a Reason String not.
	if ack := refused(connect("small", 1, true, 24)); ack.Properties.Has(packets.PropReasonString) {
		t.Errorf("Reason String %q past the client's Maximum Packet Size of 24", ack.Properties.ReasonString)
	}
	quiet := connect("quiet", 0, true, 0)
	if ack := refused(quiet); ack.Properties.Has(packets.PropReasonString) {
		t.Errorf("Reason String %q for a client that asked for no problem information", ack.Properties.ReasonString)
	}
	sub := &packets.Publish{Topic: "t", Payload: []byte("x")}
	sub.Properties.SubscriptionIDs = []uint32{1}
	sub.Properties.Set(packets.PropSubscriptionID)
	quiet.send(sub)
	if d, ok := quiet.read().(*packets.Disconnect); !ok || d.ReasonCode != packets.ProtocolError || d.Properties.ReasonString == "" {
		t.Errorf("got %+v, want DISCONNECT 0x82 saying why", d)
	}
}

// TestClientMaximumPacketSize checks that a PUBLISH larger than a 5.0
// client's Maximum Packet Size is not sent [MQTT-3.1.2-24] but treated as
// sent [MQTT-3.1.2-25]: at QoS 0, and at QoS 1 where it must not hold the
// client's one-message window; and that a message in flight when the
// client reconnects with a smaller maximum is completed, not resent. The
// drops are counted as too_large.
func TestClientMaximumPacketSize(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, mqttd.Options{})
	big, small := bytes.Repeat([]byte("x"), 100), []byte("s")

	sub := connectAs(t, addr, packets.V5, limitedConnect("small", 40))
	subscribe(sub, packets.Subscription{Filter: "t/#", Options: packets.SubOptions{QoS: 1}})
	pub := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "pub", CleanStart: true})
	pub.send(&packets.Publish{Topic: "t/0", Payload: big})
	pub.send(&packets.Publish{Topic: "t/0", Payload: small})
	pub.send(&packets.Publish{Topic: "t/1", QoS: 1, PacketID: 1, Payload: big})
	pub.send(&packets.Publish{Topic: "t/1", QoS: 1, PacketID: 2, Payload: small})
	pub.ping()
	if p := expectPublish(sub, "t/0"); p.QoS != 0 || !bytes.Equal(p.Payload, small) {
		t.Errorf("first delivery: QoS %d, %d bytes; want the small QoS 0 message", p.QoS, len(p.Payload))
	}
	p := expectPublish(sub, "t/1")
	if p.QoS != 1 || !bytes.Equal(p.Payload, small) {
		t.Errorf("second delivery: QoS %d, %d bytes; want the small QoS 1 message", p.QoS, len(p.Payload))
	}
	sub.send(&packets.Puback{PacketID: p.PacketID})
	if extra := sub.ping(); len(extra) != 0 {
		t.Errorf("more was sent: %+v", extra)
	}
	if n := srv.Stats().Dropped["too_large"]; n != 2 {
		t.Errorf("too_large drops: %d, want 2", n)
	}

	// In flight to a client without a limit, then resumed with one.
	rc := connectAs(t, addr, packets.V5, limitedConnect("resume", 0))
	subscribe(rc, packets.Subscription{Filter: "r", Options: packets.SubOptions{QoS: 1}})
	pub.send(&packets.Publish{Topic: "r", QoS: 1, PacketID: 3, Payload: big})
	pub.read()
	expectPublish(rc, "r") // and not acknowledged
	rc.nc.Close()
	waitFor(t, "the session offline", func() bool { return srv.Stats().SessionsOnline == 2 })
	rc = dialRaw(t, addr)
	rc.v = packets.V5
	cp := limitedConnect("resume", 40)
	cp.ProtocolName, cp.ProtocolVersion = "MQTT", packets.V5
	rc.send(cp)
	if ack, ok := rc.read().(*packets.Connack); !ok || !ack.SessionPresent {
		t.Fatalf("CONNACK %+v: want the session present", ack)
	}
	pub.send(&packets.Publish{Topic: "r", QoS: 1, PacketID: 4, Payload: small})
	pub.read()
	if p := expectPublish(rc, "r"); !bytes.Equal(p.Payload, small) || p.Dup {
		t.Errorf("after the reconnect: %d bytes, DUP %v; want the small message, new", len(p.Payload), p.Dup)
	}
	if n := srv.Stats().Dropped["too_large"]; n != 3 {
		t.Errorf("too_large drops: %d, want 3", n)
	}
}

// TestHugeMaximumPacketSize checks a 5.0 client announcing the largest
// Maximum Packet Size gets its messages: on 32-bit builds (the Raspberry
// Pi's arm v6/v7) the size once turned negative and every message was
// dropped as too large.
func TestHugeMaximumPacketSize(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, mqttd.Options{})
	cp := &packets.Connect{ClientID: "big", CleanStart: true}
	cp.Properties.MaximumPacketSize = 0xFFFFFFFF
	cp.Properties.Set(packets.PropMaximumPacketSize)
	sub := connectAs(t, addr, packets.V5, cp)
	subscribe(sub, packets.Subscription{Filter: "t", Options: packets.SubOptions{QoS: 1}})
	pub := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "pub", CleanStart: true})
	pub.send(&packets.Publish{Topic: "t", Payload: []byte("qos0")})
	pub.send(&packets.Publish{Topic: "t", QoS: 1, PacketID: 1, Payload: []byte("qos1")})
	pub.read()
	if got := sub.ping(); len(got) != 2 {
		t.Errorf("got %d of 2 messages", len(got))
	}
}

// A plain QoS 0 PUBLISH (not retained, no properties) is routed from the
// read buffer without a copy of its own: these tests check that whatever
// keeps such a message keeps a copy, by sending each batch in a write of
// its own, so that later reads reuse the buffer the earlier ones were in.

// plainBatch encodes n plain QoS 0 PUBLISHes to prefix/round/i.
func plainBatch(t *testing.T, v packets.Version, prefix string, round, n int) []byte {
	return batch(t, v, prefix, round, n, packets.Properties{})
}

// batch is plainBatch with props on every PUBLISH.
func batch(t *testing.T, v packets.Version, prefix string, round, n int, props packets.Properties) []byte {
	t.Helper()
	var b []byte
	for i := range n {
		var err error
		b, err = (&packets.Publish{Topic: fmt.Sprintf("%s/%d/%d", prefix, round, i),
			Payload: fmt.Appendf(nil, "payload %d of round %d", i, round), Properties: props}).Append(b, v)
		if err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// wantPlain reports the first message of rounds×n from plainBatch that got
// lacks or has wrong, in order.
func wantPlain(prefix string, rounds, n int, topics []string, payloads [][]byte) error {
	if len(topics) != rounds*n {
		return fmt.Errorf("%d messages, want %d", len(topics), rounds*n)
	}
	for k := range topics {
		r, i := k/n, k%n
		topic, payload := fmt.Sprintf("%s/%d/%d", prefix, r, i), fmt.Sprintf("payload %d of round %d", i, r)
		if topics[k] != topic || string(payloads[k]) != payload {
			return fmt.Errorf("message %d is %q %q, want %q %q", k, topics[k], payloads[k], topic, payload)
		}
	}
	return nil
}

// TestPlainQoS0KeptByInlineHandler checks the messages an inline handler
// keeps (Handler: "it may keep the Message"), and that a 5.0 PUBLISH with
// properties, which is not plain, is copied out of the read buffer.
func TestPlainQoS0KeptByInlineHandler(t *testing.T) {
	t.Parallel()
	bothReaders(t, testPlainQoS0KeptByInlineHandler)
}

func testPlainQoS0KeptByInlineHandler(t *testing.T, on ...serverOption) {
	s, addr := startServer(t, mqttd.Options{}, on...)
	var mu sync.Mutex
	var kept []mqttd.Message
	unsubscribe, err := s.Subscribe("kept/#", func(m mqttd.Message) {
		mu.Lock()
		kept = append(kept, m)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unsubscribe()
	withProps := packets.Properties{ContentType: "text/plain"}
	withProps.Set(packets.PropContentType)
	for _, tc := range []struct {
		v     packets.Version
		props packets.Properties
	}{{packets.V311, packets.Properties{}}, {packets.V5, packets.Properties{}}, {packets.V5, withProps}} {
		mu.Lock()
		kept = nil
		mu.Unlock()
		pub := connectAs(t, addr, tc.v, &packets.Connect{ClientID: "pub", CleanStart: true})
		const rounds, n = 40, 5
		for r := range rounds {
			pub.write(batch(t, tc.v, "kept", r, n, tc.props))
			pub.ping() // handled before the next write is read
		}
		mu.Lock()
		var topics []string
		var payloads [][]byte
		for _, m := range kept {
			topics, payloads = append(topics, m.Topic), append(payloads, m.Payload)
			if tc.props.Present != 0 && (m.Properties == nil || m.Properties.ContentType != "text/plain") {
				t.Errorf("version %d: the inline handler kept %q with properties %+v, want content type text/plain", tc.v, m.Topic, m.Properties)
			}
		}
		mu.Unlock()
		if err := wantPlain("kept", rounds, n, topics, payloads); err != nil {
			t.Errorf("version %d, properties %b: the inline handler kept: %v", tc.v, tc.props.Present, err)
		}
	}
}

// TestPlainQoS0QueuedBehindBacklog checks the QoS 0 messages a session
// queues behind QoS 1 messages its client has no room for (Receive
// Maximum 1), to keep their order: they are sent once the backlog is
// acknowledged, long after the reads they came in.
func TestPlainQoS0QueuedBehindBacklog(t *testing.T) {
	t.Parallel()
	bothReaders(t, testPlainQoS0QueuedBehindBacklog)
}

func testPlainQoS0QueuedBehindBacklog(t *testing.T, on ...serverOption) {
	_, addr := startServer(t, mqttd.Options{}, on...)
	props := packets.Properties{ReceiveMaximum: 1}
	props.Set(packets.PropReceiveMaximum)
	sub := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "sub", CleanStart: true, Properties: props})
	subscribe(sub, packets.Subscription{Filter: "q/#", Options: packets.SubOptions{QoS: 1}})
	pub := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "pub", CleanStart: true})
	for id := uint16(1); id <= 2; id++ { // one in flight, one queued
		pub.send(&packets.Publish{Topic: "q/backlog", QoS: 1, PacketID: id, Payload: []byte("backlog")})
		pub.read() // PUBACK
	}
	const rounds, n = 20, 4
	for r := range rounds {
		pub.write(plainBatch(t, packets.V311, "q", r, n))
		pub.ping()
	}
	var topics []string
	var payloads [][]byte
	backlog := 0
	for len(topics) < rounds*n {
		switch p := sub.read().(type) {
		case *packets.Publish:
			if p.QoS == 1 {
				backlog++
				sub.send(&packets.Puback{PacketID: p.PacketID})
				continue
			}
			if backlog < 2 {
				t.Fatalf("QoS 0 %q sent before the QoS 1 backlog", p.Topic)
			}
			topics, payloads = append(topics, p.Topic), append(payloads, p.Payload)
		default:
			t.Fatalf("subscriber got %v", p)
		}
	}
	if err := wantPlain("q", rounds, n, topics, payloads); err != nil {
		t.Errorf("queued behind the backlog: %v", err)
	}
}

// TestPlainQoS0StoredForOfflineSession checks the plain QoS 0 messages
// queued, and so stored, for an offline persistent session
// (limits.queue_qos0): they come back intact after a restart.
func TestPlainQoS0StoredForOfflineSession(t *testing.T) {
	t.Parallel()
	bothReaders(t, testPlainQoS0StoredForOfflineSession)
}

func testPlainQoS0StoredForOfflineSession(t *testing.T, on ...serverOption) {
	opts := mqttd.Options{DataDir: t.TempDir()}
	opts.Limits.QueueQoS0 = true
	a := startBroker(t, opts, on...)
	off := connectSubscribed(t, &packets.Connect{ClientID: "off"}, a.addr, packets.Subscription{Filter: "s/#", Options: qos(0)})
	off.send(&packets.Disconnect{})
	off.expectClosed()
	waitFor(t, "the subscriber to be offline", func() bool { return a.srv.Stats().SessionsOnline == 0 })
	pub := connectRaw(t, a.addr, &packets.Connect{ClientID: "pub", CleanStart: true})
	const rounds, n = 20, 4
	for r := range rounds {
		pub.write(plainBatch(t, packets.V311, "s", r, n))
		pub.ping()
	}
	waitFor(t, "every message to be queued", func() bool { return a.srv.Stats().Queued == rounds*n })
	a.stop()
	b := startBroker(t, opts, on...)
	sub := connectRaw(t, b.addr, &packets.Connect{ClientID: "off"})
	var topics []string
	var payloads [][]byte
	for len(topics) < rounds*n {
		pk, err := sub.tryRead()
		if err != nil {
			t.Fatalf("after %d messages: %v", len(topics), err)
		}
		p, ok := pk.(*packets.Publish)
		if !ok {
			t.Fatalf("got %T, want a PUBLISH", pk)
		}
		topics, payloads = append(topics, p.Topic), append(payloads, p.Payload)
	}
	if err := wantPlain("s", rounds, n, topics, payloads); err != nil {
		t.Errorf("after the restart: %v", err)
	}
}

// TestFanOutThousandSubscribers checks every one of 1,000 subscribers
// gets every message of a publisher, and that nothing is left running
// once they leave.
func TestFanOutThousandSubscribers(t *testing.T) {
	checkGoroutines(t)
	_, addr := startServer(t, mqttd.Options{})
	const subscribers, messages = 1000, 20
	subs := make([]*rawConn, subscribers)
	for i := range subs {
		subs[i] = connectRawSession(t, addr, fmt.Sprintf("fan-%d", i), true, false)
		subs[i].send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "fan/+", Options: packets.SubOptions{QoS: 1}}}})
	}
	for _, s := range subs {
		if _, ok := s.read().(*packets.Suback); !ok {
			t.Fatal("no SUBACK")
		}
	}
	pub := connectRawSession(t, addr, "fan-pub", true, false)
	for i := range messages {
		pub.send(&packets.Publish{Topic: "fan/x", QoS: byte(i % 2), PacketID: uint16(i + 1), Payload: []byte(fmt.Sprint(i))})
	}
	pub.ping()
	for n, s := range subs {
		for i := range messages {
			p, ok := s.read().(*packets.Publish)
			if !ok || string(p.Payload) != fmt.Sprint(i) {
				t.Fatalf("subscriber %d message %d: %+v", n, i, p)
			}
			if p.QoS == 1 {
				s.send(&packets.Puback{PacketID: p.PacketID})
			}
		}
	}
	for _, s := range subs {
		s.send(&packets.Disconnect{})
		s.expectClosed()
	}
	pub.send(&packets.Disconnect{})
	pub.expectClosed()
}

package mqttd_test

import (
	"fmt"
	"sync"
	"testing"

	"mqttd"
	"mqttd/packets"
)

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

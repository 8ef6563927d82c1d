package mqttd_test

import (
	"fmt"
	"sort"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"

	"mqttd"
	"mqttd/packets"
)

func TestPersistentSessionQueuesWhileOffline(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	_, addr := startServer(t, mqttd.Options{Registerer: reg})
	persistent := func(o *paho.ClientOptions) { o.SetCleanSession(false) }
	sub := pahoConnect(t, addr, "durable", persistent)
	wait(t, sub.Subscribe("jobs/+", 1, nil))
	sub.Disconnect(100)
	// paho returns before the broker has seen the close; publishing sooner
	// would deliver to the closing connection instead of the queue.
	waitFor(t, "the broker to see the client go", func() bool {
		return metricValue(t, reg, "mqttd_connections") == 0
	})

	pub := pahoConnect(t, addr, "pub", nil)
	// Not kept for offline clients by default. Sent first: the acknowledged
	// publishes after it prove it was routed before the client returns.
	wait(t, pub.Publish("jobs/q0", 0, false, "qos0"))
	for i := range 10 {
		wait(t, pub.Publish(fmt.Sprintf("jobs/%d", i), byte(1+i%2), false, fmt.Sprint(i)))
	}

	rc := connectRawSession(t, addr, "durable", false, true)
	for i := range 10 {
		p, ok := rc.read().(*packets.Publish)
		if !ok || p.Topic != fmt.Sprintf("jobs/%d", i) || p.QoS != 1 {
			t.Fatalf("queued message %d: %+v; want jobs/%d at QoS 1, in publish order", i, p, i)
		}
		rc.send(&packets.Puback{PacketID: p.PacketID})
	}
	if extra := rc.ping(); len(extra) != 0 {
		t.Errorf("after the queue: %+v; the offline QoS 0 message must not be kept", extra)
	}
}

// TestQueueFillsWindowOnReturn checks that a client coming back to more
// queued messages than its window gets a whole window without answering,
// in order across the pump's runs (64 entries each), and the next message
// only for an acknowledgement.
func TestQueueFillsWindowOnReturn(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	_, addr := startServer(t, mqttd.Options{Registerer: reg})
	sub := pahoConnect(t, addr, "durable", func(o *paho.ClientOptions) { o.SetCleanSession(false) })
	wait(t, sub.Subscribe("jobs/+", 1, nil))
	sub.Disconnect(100)
	waitFor(t, "the broker to see the client go", func() bool {
		return metricValue(t, reg, "mqttd_connections") == 0
	})
	const window, queued = mqttd.DefaultMaxInflight, mqttd.DefaultMaxInflight + 50
	pub := pahoConnect(t, addr, "pub", nil)
	for i := range queued {
		wait(t, pub.Publish(fmt.Sprintf("jobs/%d", i), 1, false, fmt.Sprint(i)))
	}

	rc := connectRawSession(t, addr, "durable", false, true)
	var first uint16
	for i := range window {
		p, ok := rc.read().(*packets.Publish)
		if !ok || p.Topic != fmt.Sprintf("jobs/%d", i) {
			t.Fatalf("queued message %d: %+v; want jobs/%d, the window sent unacknowledged in order", i, p, i)
		}
		if i == 0 {
			first = p.PacketID
		}
	}
	if extra := rc.ping(); len(extra) != 0 {
		t.Fatalf("%d packets past a full window of %d: %+v", len(extra), window, extra)
	}
	rc.send(&packets.Puback{PacketID: first})
	if p, ok := rc.read().(*packets.Publish); !ok || p.Topic != fmt.Sprintf("jobs/%d", window) {
		t.Fatalf("after one acknowledgement: %+v; want jobs/%d", p, window)
	}
}

// TestUnacknowledgedResentWithDupOnReconnect runs on both readers.
func TestUnacknowledgedResentWithDupOnReconnect(t *testing.T) {
	t.Parallel()
	bothReaders(t, testUnacknowledgedResentWithDupOnReconnect)
}

func testUnacknowledgedResentWithDupOnReconnect(t *testing.T, on ...serverOption) {
	srv, addr := startServer(t, mqttd.Options{}, on...)
	sub := connectRawSession(t, addr, "flaky", false, false)
	sub.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "f/#", Options: packets.SubOptions{QoS: 2}}}})
	sub.read()
	pub := pahoConnect(t, addr, "pub", nil)
	wait(t, pub.Publish("f/1", 1, false, "one"))
	wait(t, pub.Publish("f/2", 2, false, "two"))
	wait(t, pub.Publish("f/3", 2, false, "three"))
	first := make([]*packets.Publish, 3)
	for i := range first {
		first[i] = sub.read().(*packets.Publish)
	}
	sub.send(&packets.Pubrec{PacketID: first[2].PacketID}) // f/3 reaches the PUBREL step
	if rel, ok := sub.read().(*packets.Pubrel); !ok || rel.PacketID != first[2].PacketID {
		t.Fatalf("want PUBREL %d, got %+v", first[2].PacketID, rel)
	}
	sub.nc.Close()

	again := connectRawSession(t, addr, "flaky", false, true)
	for i := range 2 {
		p, ok := again.read().(*packets.Publish)
		if !ok || !p.Dup || p.PacketID != first[i].PacketID || p.Topic != first[i].Topic || p.QoS != first[i].QoS {
			t.Fatalf("resend %d: %+v; want %s again with DUP and packet id %d", i, p, first[i].Topic, first[i].PacketID)
		}
	}
	if rel, ok := again.read().(*packets.Pubrel); !ok || rel.PacketID != first[2].PacketID {
		t.Fatalf("want the PUBREL for %d resent, got %+v", first[2].PacketID, rel)
	}
	// Three PUBLISHes and two sent again; a PUBREL is not a PUBLISH.
	if n := srv.Stats().MessagesSent; n != 5 {
		t.Errorf("messages sent %d, want 5", n)
	}
	again.send(&packets.Puback{PacketID: first[0].PacketID})
	again.send(&packets.Pubrec{PacketID: first[1].PacketID})
	if rel, ok := again.read().(*packets.Pubrel); !ok || rel.PacketID != first[1].PacketID {
		t.Fatalf("want PUBREL %d, got %+v", first[1].PacketID, rel)
	}
	again.send(&packets.Pubcomp{PacketID: first[1].PacketID})
	again.send(&packets.Pubcomp{PacketID: first[2].PacketID})
	if extra := again.ping(); len(extra) != 0 {
		t.Fatalf("unexpected after completing every flow: %+v", extra)
	}
	again.nc.Close()
	last := connectRawSession(t, addr, "flaky", false, true)
	if extra := last.ping(); len(extra) != 0 {
		t.Fatalf("completed messages resent: %+v", extra)
	}
}

func TestCleanSessionDiscardsState(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, mqttd.Options{})
	rc := connectRawSession(t, addr, "c", false, false)
	rc.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "x", Options: packets.SubOptions{QoS: 1}}}})
	rc.read()
	rc.nc.Close()
	clean := connectRawSession(t, addr, "c", true, false)
	pub := pahoConnect(t, addr, "pub", nil)
	wait(t, pub.Publish("x", 1, false, "m"))
	if got := clean.ping(); len(got) != 0 {
		t.Fatalf("clean session inherited a subscription: %+v", got)
	}
	clean.send(&packets.Disconnect{})
	clean.expectClosed()
	// A clean session ends with its connection: nothing is present next time.
	connectRawSession(t, addr, "c", false, false)
}

// TestSessionExpiry checks that offline sessions are dropped, with their
// subscriptions and queue, once their expiry interval has passed: a 5.0
// Session Expiry Interval, the one a 5.0 DISCONNECT changes it to, the
// 3.1.1 persistent session expiry; and not when the client came back in
// time, nor early. A session that expires serves as the clock for the
// others, so the test waits on events, not on time.
func TestSessionExpiry(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{
		MaxSessionExpiry: time.Hour, PersistentSessionExpiry: 2 * time.Second}})
	expired := func() uint64 { return srv.Stats().SessionsExpired }

	// 1 s, and a session of 2 s that the client comes back to in time.
	short, _ := reconnect5(t, addr, "short", 1)
	subscribe(short, packets.Subscription{Filter: "s", Options: packets.SubOptions{QoS: 1}})
	short.send(&packets.Disconnect{})
	back, _ := reconnect5(t, addr, "back", 2)
	back.send(&packets.Disconnect{})
	back.expectClosed()
	back, present := reconnect5(t, addr, "back", 2)
	if !present {
		t.Fatal("a 2 s session was gone at once")
	}
	waitFor(t, "the 1 s session to expire", func() bool { return expired() == 1 })
	if st := srv.Stats(); st.Sessions != 1 || st.Subscriptions != 0 {
		t.Errorf("after the expiry: %d sessions, %d subscriptions; want 1, 0", st.Sessions, st.Subscriptions)
	}
	if _, present := reconnect5(t, addr, "short", 0); present {
		t.Error("the expired session was present")
	}

	// A DISCONNECT that shortens the interval, one that ends the session,
	// and a 3.1.1 persistent session (2 s here); the session kept online
	// above has not expired meanwhile.
	shortened, _ := reconnect5(t, addr, "shortened", 3600)
	d := &packets.Disconnect{}
	d.Properties.SessionExpiry = 1
	d.Properties.Set(packets.PropSessionExpiry)
	shortened.send(d)
	ended, _ := reconnect5(t, addr, "ended", 3600)
	d = &packets.Disconnect{}
	d.Properties.Set(packets.PropSessionExpiry) // 0
	ended.send(d)
	ended.expectClosed()
	v3 := connectRawSession(t, addr, "v3", false, false)
	v3.send(&packets.Disconnect{})
	v3.expectClosed()
	waitFor(t, "the shortened and the 3.1.1 sessions to expire", func() bool { return expired() == 3 })
	if _, present := reconnect5(t, addr, "ended", 0); present {
		t.Error("a session ended by DISCONNECT with expiry 0 was present")
	}
	if _, present := reconnect5(t, addr, "back", 2); !present {
		t.Error("the session online all along expired")
	}
	back.nc.Close()
}

// TestSessionExpiryCapped checks a 5.0 client asking for more than
// limits.max_session_expiry is told the cap in CONNACK and held to it.
func TestSessionExpiryCapped(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxSessionExpiry: time.Second}})
	rc, ack := connectReply(t, addr, packets.V5, expiringConnect("greedy", 0xFFFFFFFF))
	if !ack.Properties.Has(packets.PropSessionExpiry) || ack.Properties.SessionExpiry != 1 {
		t.Errorf("CONNACK Session Expiry Interval %d (present %v), want 1", ack.Properties.SessionExpiry,
			ack.Properties.Has(packets.PropSessionExpiry))
	}
	rc.send(&packets.Disconnect{})
	waitFor(t, "the capped session to expire", func() bool { return srv.Stats().SessionsExpired == 1 })
}

// TestReceiveMaximumAfterReconnect checks that a 5.0 client is never sent
// more unacknowledged QoS 1/2 messages than its Receive Maximum, also when
// it comes back to its session with a lower one: the messages in flight
// are sent again two at a time, one more for each acknowledgement
// [MQTT-3.3.4-9].
func TestReceiveMaximumAfterReconnect(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, mqttd.Options{})
	connect := func(receiveMax uint16, clean bool) *rawConn {
		props := sessionExpiryProps(3600)
		props.ReceiveMaximum = receiveMax
		props.Set(packets.PropReceiveMaximum)
		return connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "rm", CleanStart: clean, Properties: props})
	}
	first := connect(10, true)
	subscribe(first, packets.Subscription{Filter: "rm", Options: packets.SubOptions{QoS: 1}})
	pub := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "pub", CleanStart: true})
	for i := range 12 {
		pub.send(&packets.Publish{Topic: "rm", QoS: 1, PacketID: uint16(i + 1), Payload: []byte(fmt.Sprint(i))})
		pub.read()
	}
	if got := first.ping(); len(got) != 10 {
		t.Fatalf("%d messages before any acknowledgement, want the Receive Maximum of 10", len(got))
	}
	dropAndWait(t, srv, first)

	back := connect(2, false)
	got := back.ping()
	if len(got) != 2 {
		t.Fatalf("%d messages sent again, want the new Receive Maximum of 2", len(got))
	}
	for _, p := range got {
		if pub, ok := p.(*packets.Publish); !ok || !pub.Dup {
			t.Fatalf("got %+v, want a PUBLISH sent again with DUP", p)
		}
	}
	received := len(got)
	for len(got) > 0 {
		back.send(&packets.Puback{PacketID: got[0].(*packets.Publish).PacketID})
		more := back.ping()
		received += len(more)
		if got = append(got[1:], more...); len(got) > 2 {
			t.Fatalf("%d messages unacknowledged, past the Receive Maximum of 2", len(got))
		}
	}
	if received != 12 {
		t.Errorf("%d messages received in all, want 12", received)
	}
}

// worker connects a 3.1.1 member of share group g on jobs/#, at QoS 1.
func worker(t *testing.T, addr, id string, clean bool) *rawConn {
	t.Helper()
	rc := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: id, CleanStart: clean})
	if codes := subscribe(rc, packets.Subscription{Filter: "$share/g/jobs/#", Options: packets.SubOptions{QoS: 1}}); codes[0] != 1 {
		t.Fatalf("SUBACK %v", codes)
	}
	return rc
}

func payloads(ps []packets.Packet) []string {
	var out []string
	for _, p := range ps {
		out = append(out, string(p.(*packets.Publish).Payload))
	}
	sort.Strings(out)
	return out
}

// TestSharedHandOff checks that the messages a member of a share group had
// not acknowledged when its connection ended go to another member, for a
// clean and for a persistent member (which does not get them again when
// it comes back).
func TestSharedHandOff(t *testing.T) {
	t.Parallel()
	for _, clean := range []bool{true, false} {
		t.Run(fmt.Sprintf("clean-%v", clean), func(t *testing.T) {
			srv, addr := startServer(t, mqttd.Options{})
			a := worker(t, addr, "a", clean)
			b := worker(t, addr, "b", true)
			pub := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "pub", CleanStart: true})
			for i := range 4 {
				pub.send(&packets.Publish{Topic: "jobs/x", QoS: 1, PacketID: uint16(i + 1), Payload: []byte(fmt.Sprint(i))})
				pub.read()
			}
			gotA, gotB := a.ping(), b.ping()
			if len(gotA) != 2 || len(gotB) != 2 {
				t.Fatalf("a got %d, b got %d; want 2 each", len(gotA), len(gotB))
			}
			dropAndWait(t, srv, a)
			handed := b.ping()
			if got, want := payloads(handed), payloads(gotA); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("b was handed %v, want a's %v", got, want)
			}
			if n := srv.Stats().SharedHandedOff; n != 2 {
				t.Errorf("%d handed off, want 2", n)
			}
			if !clean {
				back := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "a", CleanStart: false})
				expectNothing(back) // handed on, not sent again
			}

		})
	}
}

// TestSharedLastMemberKeeps checks that a persistent member with no other
// member to hand on to keeps what it had not acknowledged, and gets it
// again (DUP) when it comes back; so does a member that holds the
// message through a plain subscription of its own too.
func TestSharedLastMemberKeeps(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, mqttd.Options{})
	solo := worker(t, addr, "solo", false)
	both := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "both", CleanStart: false})
	subscribe(both, packets.Subscription{Filter: "$share/h/mine/#", Options: packets.SubOptions{QoS: 1}},
		packets.Subscription{Filter: "mine/#", Options: packets.SubOptions{QoS: 1}})
	peer := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "peer", CleanStart: true})
	subscribe(peer, packets.Subscription{Filter: "$share/h/mine/#", Options: packets.SubOptions{QoS: 1}})
	pub := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "pub", CleanStart: true})
	pub.send(&packets.Publish{Topic: "jobs/z", QoS: 1, PacketID: 1, Payload: []byte("z")})
	pub.read()
	pub.send(&packets.Publish{Topic: "mine/m", QoS: 1, PacketID: 2, Payload: []byte("m")})
	pub.read()
	expectPublish(solo, "jobs/z")
	expectPublish(both, "mine/m")
	dropAndWait(t, srv, solo)
	dropAndWait(t, srv, both)
	if n := srv.Stats().SharedHandedOff; n != 0 {
		t.Errorf("%d handed off, want none", n)
	}
	for _, id := range []string{"solo", "both"} {
		back := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: id, CleanStart: false})
		if p, ok := back.read().(*packets.Publish); !ok || !p.Dup {
			t.Errorf("%s: got %+v, want its message again with DUP", id, p)
		}
	}
}

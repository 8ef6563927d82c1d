package mqttd_test

import (
	"fmt"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"

	"mqttd"
	"mqttd/packets"
)

func TestRetainedSetReplaceClear(t *testing.T) {
	_, addr := startServer(t, mqttd.Options{})
	pub := pahoConnect(t, addr, "pub", nil)
	wait(t, pub.Publish("home/temp", 1, true, "20"))
	wait(t, pub.Publish("home/temp", 1, true, "21")) // replaces
	wait(t, pub.Publish("home/hum", 1, true, "40"))
	wait(t, pub.Publish("home/hum", 1, true, "")) // clears [MQTT-3.3.1-10]

	sub := connectRaw(t, addr, &packets.Connect{ClientID: "sub", CleanStart: true})
	sub.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "home/#", Options: packets.SubOptions{QoS: 1}}}})
	if ack, ok := sub.read().(*packets.Suback); !ok || ack.ReasonCodes[0] != 1 {
		t.Fatalf("SUBACK: %+v", ack)
	}
	got := sub.ping()
	if len(got) != 1 {
		t.Fatalf("got %d retained messages, want exactly home/temp: %+v", len(got), got)
	}
	p := got[0].(*packets.Publish)
	if p.Topic != "home/temp" || string(p.Payload) != "21" || !p.Retain || p.QoS != 1 {
		t.Errorf("retained delivery %+v: want home/temp=21 with retain set at QoS 1", p)
	}
	sub.send(&packets.Puback{PacketID: p.PacketID})

	// A live publish to a subscribed topic carries retain 0 [MQTT-3.3.1-9].
	wait(t, pub.Publish("home/temp", 0, true, "22"))
	live := sub.read().(*packets.Publish)
	if live.Retain || string(live.Payload) != "22" {
		t.Errorf("live delivery %+v: want payload 22 with retain 0", live)
	}
}

func TestWillOnAbnormalCloseNotOnDisconnect(t *testing.T) {
	_, addr := startServer(t, mqttd.Options{})
	var wills collector
	watcher := pahoConnect(t, addr, "watcher", nil)
	wait(t, watcher.Subscribe("wills/#", 1, wills.handler))

	withWill := func(id string) *rawConn {
		return connectRaw(t, addr, &packets.Connect{ClientID: id, CleanStart: true, WillFlag: true,
			WillTopic: "wills/" + id, WillPayload: []byte(id + " gone"), WillQoS: 1})
	}
	polite := withWill("polite")
	polite.send(&packets.Disconnect{})
	polite.expectClosed()
	rude := withWill("rude")
	rude.nc.Close()

	waitFor(t, "the will of the abruptly closed client", func() bool { return wills.len() >= 1 })
	// A marker published after both closes proves the polite will never came.
	wait(t, watcher.Publish("wills/marker", 1, false, "marker"))
	waitFor(t, "the marker", func() bool { return wills.len() >= 2 })
	for i := range wills.len() {
		if m := wills.get(i); m.Topic() == "wills/polite" {
			t.Errorf("will published after a clean DISCONNECT")
		}
	}
	if m := wills.get(0); m.Topic() != "wills/rude" || string(m.Payload()) != "rude gone" {
		t.Errorf("will %s=%q, want wills/rude=%q", m.Topic(), m.Payload(), "rude gone")
	}
}

func TestTakeoverClosesOldConnection(t *testing.T) {
	_, addr := startServer(t, mqttd.Options{})
	lost := make(chan error, 1)
	first := pahoConnect(t, addr, "same", func(o *paho.ClientOptions) {
		o.SetConnectionLostHandler(func(_ paho.Client, err error) { lost <- err })
	})
	second := pahoConnect(t, addr, "same", nil)
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the first connection was not closed by the takeover")
	}
	if first.IsConnectionOpen() || !second.IsConnectionOpen() {
		t.Fatalf("after takeover: first open %v, second open %v", first.IsConnectionOpen(), second.IsConnectionOpen())
	}
	// The new connection owns the session: it can still subscribe and receive.
	var got collector
	wait(t, second.Subscribe("t", 1, got.handler))
	wait(t, second.Publish("t", 1, false, "x"))
	waitFor(t, "delivery to the new connection", func() bool { return got.len() == 1 })
}

func TestPersistentSessionQueuesWhileOffline(t *testing.T) {
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

func TestOverlappingSubscriptionsDeliverOnceAtMaxQoS(t *testing.T) {
	_, addr := startServer(t, mqttd.Options{})
	rc := connectRawSession(t, addr, "o", true, false)
	rc.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{
		{Filter: "a/+", Options: packets.SubOptions{QoS: 0}},
		{Filter: "a/#", Options: packets.SubOptions{QoS: 2}},
		{Filter: "a/b", Options: packets.SubOptions{QoS: 1}},
	}})
	rc.read()
	pub := pahoConnect(t, addr, "pub", nil)
	wait(t, pub.Publish("a/b", 2, false, "m"))
	got := rc.ping()
	if len(got) != 1 {
		t.Fatalf("got %d copies, want 1: %+v", len(got), got)
	}
	if p := got[0].(*packets.Publish); p.QoS != 2 {
		t.Errorf("delivered at QoS %d, want 2 (the highest matching)", p.QoS)
	}
}

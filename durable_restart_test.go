package mqttd_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mqttd"
	"mqttd/packets"
	"mqttd/persistence/bolt"
)

// TestLongKeysSurviveRestart stops a broker holding what is keyed by
// strings longer than a bbolt key may hold whole, all acknowledged: a
// retained QoS 1 message on a 20,000-byte topic, a persistent session's
// subscription to a 20,000-byte filter, and the persistent session of a
// client with a 20,000-byte id with a message queued for it. A broker on
// the same data dir has them all: they were once kept in memory only.
func TestLongKeysSurviveRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opts := mqttd.Options{DataDir: dir, Limits: mqttd.Limits{MaxClientIDLength: 65535, MaxFilterLength: 65535}}
	a := startBroker(t, opts)
	topic := "ret/" + strings.Repeat("t", 20000-len("ret/"))
	filter := "long/" + strings.Repeat("f", 20000-len("long/"))
	longID := strings.Repeat("c", 20000)

	keeper := connectRawSession(t, a.addr, "keeper", false, false)
	if codes := subscribe(keeper, packets.Subscription{Filter: filter, Options: qos(1)}); codes[0] != 1 {
		t.Fatalf("SUBACK %v for the long filter", codes)
	}
	keeper.send(&packets.Disconnect{})
	keeper.expectClosed()
	long := connectRawSession(t, a.addr, longID, false, false)
	subscribe(long, packets.Subscription{Filter: "q/#", Options: qos(1)})
	long.send(&packets.Disconnect{})
	long.expectClosed()

	pub := connectRaw(t, a.addr, &packets.Connect{ClientID: "pub", CleanStart: true})
	for i, p := range []*packets.Publish{
		{QoS: 1, Retain: true, Topic: topic, Payload: []byte("retained")},
		{QoS: 1, Topic: "q/1", Payload: []byte("queued")},
	} {
		p.PacketID = uint16(i + 1)
		pub.send(p)
		if ack, ok := pub.read().(*packets.Puback); !ok || ack.PacketID != p.PacketID || ack.ReasonCode != 0 {
			t.Fatalf("got %+v, want PUBACK %d", ack, p.PacketID)
		}
	}
	a.stop()

	b := startBroker(t, opts)
	if st := b.srv.Stats(); st.Sessions != 2 || st.Retained != 1 || st.Subscriptions != 2 {
		t.Errorf("restored %d sessions, %d retained, %d subscriptions; want 2, 1, 2", st.Sessions, st.Retained, st.Subscriptions)
	}
	long = connectRawSession(t, b.addr, longID, false, true)
	if p := expectPublish(long, "q/1"); string(p.Payload) != "queued" {
		t.Errorf("the long id's session got %q", p.Payload)
	}
	keeper = connectRawSession(t, b.addr, "keeper", false, true)
	pub = connectRaw(t, b.addr, &packets.Connect{ClientID: "pub", CleanStart: true})
	pub.send(&packets.Publish{QoS: 1, PacketID: 3, Topic: filter, Payload: []byte("through")})
	pub.read()
	if p := expectPublish(keeper, filter); string(p.Payload) != "through" {
		t.Errorf("the long subscription got %q", p.Payload)
	}
	reader := connectRaw(t, b.addr, &packets.Connect{ClientID: "reader", CleanStart: true})
	subscribe(reader, packets.Subscription{Filter: "ret/#", Options: qos(1)})
	if p := expectPublish(reader, topic); !p.Retain || string(p.Payload) != "retained" {
		t.Errorf("the long topic's retained message: retain %v, %q", p.Retain, p.Payload)
	}
}

// TestRestartRestoresState stops a broker with persistent sessions in
// every state and starts another on its data dir: sessions come back
// present with their subscriptions (options and identifiers included),
// queued messages in order, a QoS 1 message in flight again with DUP
// under its packet id, a QoS 2 message past PUBREC as PUBREL (not as a
// new PUBLISH), an inbound QoS 2 id still awaiting PUBREL, and retained
// messages; what expired while the broker was down does not come back.
func TestRestartRestoresState(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := startBroker(t, mqttd.Options{DataDir: dir})
	v5 := func(id string, expiry uint32) *packets.Connect {
		cp := &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V5, ClientID: id}
		cp.Properties.SessionExpiry = expiry
		cp.Properties.Set(packets.PropSessionExpiry)
		return cp
	}
	// Offline with a queue.
	off := connectSubscribed(t, &packets.Connect{ClientID: "off"}, a.addr, packets.Subscription{Filter: "q/#", Options: qos(2)})
	off.send(&packets.Disconnect{})
	off.expectClosed()
	// 5.0, offline, with a subscription identifier and No Local.
	id5 := connectRaw(t, a.addr, v5("id5", 3600))
	withID := &packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "id/#", Options: packets.SubOptions{QoS: 1, NoLocal: true}}}}
	withID.Properties.SubscriptionIDs = []uint32{5}
	withID.Properties.Set(packets.PropSubscriptionID)
	id5.send(withID)
	id5.read()
	id5.send(&packets.Disconnect{})
	id5.expectClosed()
	// 5.0 with a one-second expiry: gone after the downtime.
	short := connectSubscribed(t, v5("short", 1), a.addr, packets.Subscription{Filter: "q/#", Options: qos(1)})
	short.send(&packets.Disconnect{})
	short.expectClosed()
	// Online, with a QoS 1 message unacknowledged and a QoS 2 message
	// past PUBREC.
	on := connectSubscribed(t, &packets.Connect{ClientID: "on"}, a.addr,
		packets.Subscription{Filter: "one/#", Options: qos(1)}, packets.Subscription{Filter: "two/#", Options: qos(2)})

	pub := connectRaw(t, a.addr, &packets.Connect{ClientID: "pub"})
	pub5 := connectRaw(t, a.addr, v5("pub5", 0))
	publish := func(c *rawConn, p *packets.Publish) {
		t.Helper()
		c.send(p)
		switch ack := c.read().(type) {
		case *packets.Puback:
		case *packets.Pubrec:
			c.send(&packets.Pubrel{PacketID: ack.PacketID})
			c.read()
		default:
			t.Fatalf("got %+v for %s", ack, p.Topic)
		}
	}
	publish(pub, &packets.Publish{QoS: 1, PacketID: 1, Topic: "q/1", Payload: []byte("first")})
	publish(pub, &packets.Publish{QoS: 2, PacketID: 2, Topic: "q/2", Payload: []byte("second")})
	expiring := &packets.Publish{QoS: 1, PacketID: 3, Topic: "q/3", Payload: []byte("expires")}
	expiring.Properties.MessageExpiry = 1
	expiring.Properties.Set(packets.PropMessageExpiry)
	publish(pub5, expiring)
	publish(pub, &packets.Publish{QoS: 1, PacketID: 4, Topic: "q/4", Payload: []byte("fourth")})
	publish(pub, &packets.Publish{QoS: 1, PacketID: 5, Topic: "id/x", Payload: []byte("to id5")})
	publish(pub, &packets.Publish{QoS: 1, PacketID: 6, Topic: "ret/keep", Payload: []byte("kept"), Retain: true})
	gone := &packets.Publish{QoS: 1, PacketID: 7, Topic: "ret/gone", Payload: []byte("gone"), Retain: true}
	gone.Properties.MessageExpiry = 1
	gone.Properties.Set(packets.PropMessageExpiry)
	publish(pub5, gone)
	publish(pub, &packets.Publish{QoS: 1, PacketID: 8, Topic: "one/a", Payload: []byte("unacked")})
	publish(pub, &packets.Publish{QoS: 2, PacketID: 9, Topic: "two/a", Payload: []byte("released")})
	inflight := on.read().(*packets.Publish)
	released := on.read().(*packets.Publish)
	if inflight.Topic != "one/a" || released.Topic != "two/a" {
		t.Fatalf("online subscriber got %s and %s", inflight.Topic, released.Topic)
	}
	on.send(&packets.Pubrec{PacketID: released.PacketID})
	if rel, ok := on.read().(*packets.Pubrel); !ok || rel.PacketID != released.PacketID {
		t.Fatalf("got %+v, want PUBREL %d", rel, released.PacketID)
	}
	// An inbound QoS 2 message whose PUBREL has not come.
	pubq2 := connectRaw(t, a.addr, &packets.Connect{ClientID: "pubq2"})
	pubq2.send(&packets.Publish{QoS: 2, PacketID: 40, Topic: "q/5", Payload: []byte("fifth")})
	if rec, ok := pubq2.read().(*packets.Pubrec); !ok || rec.PacketID != 40 {
		t.Fatalf("got %+v, want PUBREC 40", rec)
	}
	expiresAt := time.Now().Add(time.Second)
	a.stop()

	// The broker is down past the one-second expiries.
	waitFor(t, "the one-second expiries to pass", func() bool { return time.Now().After(expiresAt.Add(100 * time.Millisecond)) })
	b := startBroker(t, mqttd.Options{DataDir: dir})
	st := b.srv.Stats()
	if st.Sessions != 5 || st.Retained != 1 || st.Subscriptions != 4 {
		t.Errorf("restored %d sessions, %d retained, %d subscriptions; want 5 (short expired), 1 (ret/gone expired), 4",
			st.Sessions, st.Retained, st.Subscriptions)
	}

	cp := &packets.Connect{ClientID: "off"}
	off = dialRaw(t, b.addr)
	off.send(cp)
	if ack, ok := off.read().(*packets.Connack); !ok || !ack.SessionPresent {
		t.Fatalf("CONNACK %+v, want session present", ack)
	}
	var got []string
	pending := map[uint16]bool{} // QoS 2 ids waiting for their PUBREL, which waits for a commit
	for len(got) < 4 || len(pending) > 0 {
		switch p := off.read().(type) {
		case *packets.Publish:
			got = append(got, p.Topic+"="+string(p.Payload))
			if p.QoS == 1 {
				off.send(&packets.Puback{PacketID: p.PacketID})
			} else {
				off.send(&packets.Pubrec{PacketID: p.PacketID})
				pending[p.PacketID] = true
			}
		case *packets.Pubrel:
			off.send(&packets.Pubcomp{PacketID: p.PacketID})
			delete(pending, p.PacketID)
		default:
			t.Fatalf("offline subscriber got %+v", p)
		}
	}
	if want := "q/1=first q/2=second q/4=fourth q/5=fifth"; strings.Join(got, " ") != want {
		t.Errorf("offline subscriber got %v, want %s (q/3 expired)", got, want)
	}
	if extra := off.ping(); len(extra) != 0 {
		t.Errorf("offline subscriber got more: %+v", extra)
	}

	id5 = dialRaw(t, b.addr)
	id5.v = packets.V5
	id5.send(v5("id5", 3600))
	if ack, ok := id5.read().(*packets.Connack); !ok || !ack.SessionPresent {
		t.Fatalf("CONNACK %+v, want session present", ack)
	}
	if p, ok := id5.read().(*packets.Publish); !ok || p.Topic != "id/x" || len(p.Properties.SubscriptionIDs) != 1 || p.Properties.SubscriptionIDs[0] != 5 {
		t.Fatalf("id5 got %+v, want id/x with subscription identifier 5", p)
	}

	on = dialRaw(t, b.addr)
	on.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, ClientID: "on"})
	if ack, ok := on.read().(*packets.Connack); !ok || !ack.SessionPresent {
		t.Fatalf("CONNACK %+v, want session present", ack)
	}
	var pubrel *packets.Pubrel
	var again *packets.Publish
	for range 2 {
		switch p := on.read().(type) {
		case *packets.Pubrel:
			pubrel = p
		case *packets.Publish:
			again = p
		default:
			t.Fatalf("online subscriber got %+v", p)
		}
	}
	if pubrel == nil || pubrel.PacketID != released.PacketID {
		t.Errorf("released QoS 2 message came back as %+v, want PUBREL %d", pubrel, released.PacketID)
	}
	if again == nil || again.Topic != "one/a" || !again.Dup || again.PacketID != inflight.PacketID {
		t.Errorf("unacknowledged QoS 1 came back as %+v, want one/a with DUP under id %d", again, inflight.PacketID)
	}

	pubq2 = dialRaw(t, b.addr)
	pubq2.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, ClientID: "pubq2"})
	pubq2.read()
	pubq2.send(&packets.Publish{QoS: 2, PacketID: 40, Dup: true, Topic: "q/5", Payload: []byte("fifth")})
	pubq2.read()
	pubq2.send(&packets.Pubrel{PacketID: 40})
	if comp, ok := pubq2.read().(*packets.Pubcomp); !ok || comp.PacketID != 40 {
		t.Fatalf("got %+v, want PUBCOMP 40", comp)
	}
	if extra := off.ping(); len(extra) != 0 {
		for _, p := range extra {
			t.Errorf("the QoS 2 message sent again before PUBREL was routed twice: %T %+v", p, p)
		}
	}

	short5 := dialRaw(t, b.addr)
	short5.v = packets.V5
	short5.send(v5("short", 1))
	if ack, ok := short5.read().(*packets.Connack); !ok || ack.SessionPresent {
		t.Errorf("CONNACK %+v: the session expired while the broker was down", ack)
	}
	ret := connectSubscribed(t, &packets.Connect{ClientID: "ret", CleanStart: true}, b.addr, packets.Subscription{Filter: "ret/#", Options: qos(1)})
	if p, ok := ret.read().(*packets.Publish); !ok || p.Topic != "ret/keep" || !p.Retain {
		t.Errorf("got %+v, want the retained ret/keep", p)
	}
	if extra := ret.ping(); len(extra) != 0 {
		t.Errorf("an expired retained message came back: %+v", extra)
	}
}

// TestStoreFileErrors: a second broker on the same data dir, and a
// damaged store file, fail at New with an error naming the file; with
// MoveAsideBadStore the damaged file is kept aside and the broker starts
// empty.
func TestStoreFileErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := startBroker(t, mqttd.Options{DataDir: dir})
	_, err := mqttd.New(mqttd.Options{DataDir: dir})
	if !errors.Is(err, bolt.ErrLocked) || !strings.Contains(err.Error(), filepath.Join(dir, mqttd.StoreFile)) {
		t.Errorf("second broker on the data dir: %v, want ErrLocked naming the file", err)
	}
	a.stop()

	path := filepath.Join(dir, mqttd.StoreFile)
	if err := os.WriteFile(path, []byte(strings.Repeat("not a database ", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = mqttd.New(mqttd.Options{DataDir: dir})
	if !errors.Is(err, bolt.ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("damaged file: %v, want ErrCorrupt naming it", err)
	}
	b := startBroker(t, mqttd.Options{DataDir: dir, MoveAsideBadStore: true})
	if st := b.srv.Stats(); st.Sessions != 0 {
		t.Errorf("%d sessions after starting empty", st.Sessions)
	}
	aside, _ := filepath.Glob(path + ".corrupt-*")
	if len(aside) != 1 {
		t.Errorf("damaged file not kept aside: %v", aside)
	}
}

package mqttd_test

import (
	"strings"
	"testing"

	"mqttd"
	"mqttd/packets"
)

// TestLongKeysSurviveRestart stops a broker holding what is keyed by
// strings longer than a bbolt key may hold whole, all acknowledged: a
// retained QoS 1 message on a 20,000-byte topic, a persistent session's
// subscription to a 20,000-byte filter, and the persistent session of a
// client with a 20,000-byte id with a message queued for it. A broker on
// the same data dir has them all: they were once kept in memory only.
func TestLongKeysSurviveRestart(t *testing.T) {
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

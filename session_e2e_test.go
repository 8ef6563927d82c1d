package mqttd_test

import (
	"testing"

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

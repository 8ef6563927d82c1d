package mqttd_test

import (
	"strings"
	"sync"
	"testing"

	"mqttd"
	"mqttd/auth"
	"mqttd/packets"
)

// recordingAuthz records every request and refuses those whose topic
// starts with "secret". It keeps a copy of each topic, which may point
// into the packet being read (auth.Request).
type recordingAuthz struct {
	mu   sync.Mutex
	seen []auth.Request
}

func (a *recordingAuthz) Authorize(_ auth.ClientInfo, r auth.Request) bool {
	a.mu.Lock()
	r.Topic = strings.Clone(r.Topic)
	a.seen = append(a.seen, r)
	a.mu.Unlock()
	return !strings.HasPrefix(r.Topic, "secret")
}

func (a *recordingAuthz) requests() []auth.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]auth.Request(nil), a.seen...)
}

// TestAuthorizerRequests checks what the Authorizer is asked: a publish
// with its QoS and retain flag, a shared subscription by the filter it
// would receive with the group apart (so `$share/g/secret/#` is refused
// where `secret/#` is), and a will before the client is accepted (refused:
// CONNACK 0x87 for 5.0, 5 for 3.1.1).
func TestAuthorizerRequests(t *testing.T) {
	az := &recordingAuthz{}
	_, addr := startServer(t, mqttd.Options{Authorizer: az})

	rc := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "c", CleanStart: true})
	codes := subscribe(rc, packets.Subscription{Filter: "$share/g/secret/#", Options: packets.SubOptions{QoS: 1}},
		packets.Subscription{Filter: "$share/g/open/#", Options: packets.SubOptions{QoS: 2}})
	if codes[0] != packets.NotAuthorized || codes[1] != 2 {
		t.Errorf("SUBACK codes %v, want [0x87 2]", codes)
	}
	rc.send(&packets.Publish{Topic: "pub/x", QoS: 1, PacketID: 7, Retain: true, Payload: []byte("p")})
	if ack, ok := rc.read().(*packets.Puback); !ok || ack.ReasonCode != packets.NoMatchingSubscribers {
		t.Errorf("PUBACK %+v, want 0x10: accepted, nobody subscribed", ack)
	}
	rc.send(&packets.Publish{Topic: "secret/x", QoS: 1, PacketID: 8})
	if ack, ok := rc.read().(*packets.Puback); !ok || ack.ReasonCode != packets.NotAuthorized {
		t.Errorf("PUBACK %+v, want 0x87", ack)
	}
	want := []auth.Request{
		{Action: auth.Subscribe, Topic: "secret/#", Group: "g", QoS: 1},
		{Action: auth.Subscribe, Topic: "open/#", Group: "g", QoS: 2},
		{Action: auth.Publish, Topic: "pub/x", QoS: 1, Retain: true},
		{Action: auth.Publish, Topic: "secret/x", QoS: 1},
	}
	if got := az.requests(); len(got) != len(want) {
		t.Fatalf("requests %+v, want %+v", got, want)
	} else {
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("request %d: %+v, want %+v", i, got[i], want[i])
			}
		}
	}

	for _, v := range []packets.Version{packets.V311, packets.V5} {
		cp := &packets.Connect{ClientID: "w", CleanStart: true}
		setWill(cp, "secret/will")
		cp.WillRetain = true
		_, ack := connectReply(t, addr, v, cp)
		want := packets.ConnRefusedNotAuthorized
		if v == packets.V5 {
			want = packets.NotAuthorized
		}
		if ack.ReasonCode != want {
			t.Errorf("%s: CONNACK %#x for a denied will, want %#x", versionName(v), byte(ack.ReasonCode), byte(want))
		}
		last := az.requests()[len(az.requests())-1]
		if (last != auth.Request{Action: auth.Will, Topic: "secret/will", QoS: cp.WillQoS, Retain: true}) {
			t.Errorf("%s: last request %+v, want the will", versionName(v), last)
		}
	}
}

// TestSysIsReadOnly checks that clients cannot publish, retain or leave a
// will under $SYS, which is the broker's: 5.0 gets 0x87, 3.1.1 an
// acknowledgement and nothing published; a $SYS will refuses the CONNECT.
// The broker itself still publishes there through the inline API. Its
// own $SYS tree is off, so that the watcher sees only what this test
// publishes.
func TestSysIsReadOnly(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{SysInterval: -1})
	watch := watchTopic(t, addr, "$SYS/#")
	for _, v := range []packets.Version{packets.V311, packets.V5} {
		rc := connectAs(t, addr, v, &packets.Connect{ClientID: "sys-" + versionName(v), CleanStart: true})
		rc.send(&packets.Publish{Topic: "$SYS/broker/uptime", QoS: 1, PacketID: 1, Retain: true, Payload: []byte("forged")})
		want := packets.Success
		if v == packets.V5 {
			want = packets.NotAuthorized
		}
		if ack, ok := rc.read().(*packets.Puback); !ok || ack.ReasonCode != want {
			t.Errorf("%s: PUBACK %+v, want reason %#x", versionName(v), ack, byte(want))
		}
		rc.send(&packets.Publish{Topic: "$SYS", Payload: []byte("forged")})
		rc.ping()

		cp := &packets.Connect{ClientID: "sys-will", CleanStart: true}
		setWill(cp, "$SYS/broker/will")
		_, ack := connectReply(t, addr, v, cp)
		refused := packets.ConnRefusedNotAuthorized
		if v == packets.V5 {
			refused = packets.NotAuthorized
		}
		if ack.ReasonCode != refused {
			t.Errorf("%s: CONNACK %#x for a $SYS will, want %#x", versionName(v), byte(ack.ReasonCode), byte(refused))
		}
	}
	expectNothing(watch)
	if srv.Stats().Retained != 0 {
		t.Errorf("%d retained messages: a client retained under $SYS", srv.Stats().Retained)
	}
	if err := srv.Publish("$SYS/broker/version", []byte("mqttd"), 0, false, nil); err != nil {
		t.Fatal(err)
	}
	expectPublish(watch, "$SYS/broker/version")
}

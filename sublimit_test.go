package mqttd_test

import (
	"fmt"
	"testing"

	"mqttd"
	"mqttd/packets"
)

// TestSubscriptionLimit checks limits.max_subscriptions_per_client at its
// edge: the subscription reaching it is granted, a new one past it is
// refused (5.0 0x97, 3.1.1 0x80) and counted, while replacing a held
// filter still works and unsubscribing makes room.
func TestSubscriptionLimit(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxSubscriptionsPerClient: 2}})
	for _, v := range []packets.Version{packets.V311, packets.V5} {
		rc := connectAs(t, addr, v, &packets.Connect{ClientID: "subs-" + versionName(v), CleanStart: true})
		sub := func(filter string) packets.ReasonCode {
			t.Helper()
			return subscribe(rc, packets.Subscription{Filter: filter, Options: packets.SubOptions{QoS: 1}})[0]
		}
		refused := packets.SubackFailure
		if v == packets.V5 {
			refused = packets.QuotaExceeded
		}
		if a, b := sub("a"), sub("b"); a != 1 || b != 1 {
			t.Fatalf("%s: the first two: %#x %#x, want granted", versionName(v), byte(a), byte(b))
		}
		if c := sub("c"); c != refused {
			t.Errorf("%s: a third: %#x, want %#x", versionName(v), byte(c), byte(refused))
		}
		if a := sub("a"); a != 1 {
			t.Errorf("%s: replacing a at the limit: %#x, want granted", versionName(v), byte(a))
		}
		rc.send(&packets.Unsubscribe{PacketID: 2, Filters: []string{"b"}})
		rc.read()
		if c := sub("c"); c != 1 {
			t.Errorf("%s: after an unsubscribe: %#x, want granted", versionName(v), byte(c))
		}
	}
	if n := srv.Stats().SubscriptionsRefused; n != 2 {
		t.Errorf("SubscriptionsRefused = %d, want 2", n)
	}
}

// TestRepeatedFilterSendsRetainedOnce checks that a filter listed many
// times in one SUBSCRIBE gets one SUBACK code per listing but its
// retained messages once: each listing replaces the one before it.
func TestRepeatedFilterSendsRetainedOnce(t *testing.T) {
	_, addr := startServer(t, mqttd.Options{})
	pub := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "pub", CleanStart: true})
	for i := range 3 {
		pub.send(&packets.Publish{Topic: fmt.Sprintf("r/%d", i), Retain: true, Payload: []byte("x")})
	}
	pub.ping()
	rc := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "greedy", CleanStart: true})
	subs := make([]packets.Subscription, 50)
	for i := range subs {
		subs[i] = packets.Subscription{Filter: "#"}
	}
	if codes := subscribe(rc, subs...); len(codes) != 50 {
		t.Fatalf("%d SUBACK codes for 50 filters", len(codes))
	}
	if got := rc.ping(); len(got) != 3 {
		t.Errorf("%d retained messages sent, want 3", len(got))
	}
}

// TestSessionLimit checks limits.max_sessions at its edge: the session
// reaching it is created, a client needing one more is refused (5.0
// 0x97, 3.1.1 3) and counted, while a client whose session exists may
// still connect, and a session that ends makes room.
func TestSessionLimit(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxSessions: 2}})
	kept := connectRawSession(t, addr, "kept", false, false)
	kept.send(&packets.Disconnect{})
	kept.expectClosed()
	online := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "online", CleanStart: true})
	for _, v := range []packets.Version{packets.V311, packets.V5} {
		_, ack := connectReply(t, addr, v, &packets.Connect{ClientID: "third", CleanStart: true})
		want := packets.ConnRefusedServerUnavailable
		if v == packets.V5 {
			want = packets.QuotaExceeded
		}
		if ack.ReasonCode != want {
			t.Errorf("%s: a third session: CONNACK %#x, want %#x", versionName(v), byte(ack.ReasonCode), byte(want))
		}
	}
	connectRawSession(t, addr, "kept", false, true) // exists: no new session needed
	online.send(&packets.Disconnect{})
	online.expectClosed()
	waitFor(t, "the clean session to end", func() bool { return srv.Stats().Sessions == 1 })
	connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "third", CleanStart: true})
	if n := srv.Stats().SessionsRefused; n != 2 {
		t.Errorf("SessionsRefused = %d, want 2", n)
	}
}

// userProps returns n user properties.
func userProps(n int) packets.Properties {
	var p packets.Properties
	for i := range n {
		p.User = append(p.User, packets.UserProperty{Key: "k", Value: fmt.Sprint(i)})
	}
	p.Set(packets.PropUserProperty)
	return p
}

// TestUserPropertyLimit checks limits.max_user_properties at its edge: a
// PUBLISH with as many is delivered; one more is refused with 0x97 and
// not delivered, and a will with one more refuses the CONNECT.
func TestUserPropertyLimit(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxUserProperties: 3}})
	sub := watchTopic(t, addr, "t")
	pub := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "pub", CleanStart: true})
	for n, want := range map[int]packets.ReasonCode{3: packets.Success, 4: packets.QuotaExceeded} {
		pub.send(&packets.Publish{Topic: "t", QoS: 1, PacketID: uint16(n), Properties: userProps(n)})
		ack, ok := pub.read().(*packets.Puback)
		if !ok || ack.ReasonCode != want {
			t.Errorf("%d user properties: PUBACK %+v, want %#x", n, ack, byte(want))
		}
	}
	if got := sub.ping(); len(got) != 1 {
		t.Errorf("the subscriber got %d messages, want the one with 3 user properties", len(got))
	}
	cp := &packets.Connect{ClientID: "will", CleanStart: true}
	setWill(cp, "w")
	cp.WillProperties = userProps(4)
	if _, ack := connectReply(t, addr, packets.V5, cp); ack.ReasonCode != packets.QuotaExceeded {
		t.Errorf("a will with 4 user properties: CONNACK %#x, want 0x97", byte(ack.ReasonCode))
	}
	if n := srv.Stats().UserPropertiesRefused; n != 2 {
		t.Errorf("UserPropertiesRefused = %d, want 2", n)
	}
}

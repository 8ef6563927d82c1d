package mqttd_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"mqttd"
	"mqttd/auth"
	"mqttd/packets"
)

// aclServer runs a broker with testACL (anonymous clients and any
// username are let in on its loopback listener) and returns it, its
// address and the ACL file's path.
func aclServer(t *testing.T, opts mqttd.Options) (*mqttd.Server, string, string) {
	t.Helper()
	aclFile := writeFile(t, t.TempDir(), "acl", testACL)
	opts.Auth.ACLFile = aclFile
	b := startBroker(t, opts)
	return b.srv, b.addr, aclFile
}

// TestACLPublishAndSubscribe checks the ACL on PUBLISH and SUBSCRIBE in
// both versions: a denied publish gets 0x87 in 5.0 and is acknowledged
// and dropped in 3.1.1; a denied filter gets 0x87 in 5.0 and 0x80 in
// 3.1.1, a shared subscription is decided on its filter, and # is not
// granted to a client that may read only part of the tree.
func TestACLPublishAndSubscribe(t *testing.T) {
	t.Parallel()
	_, addr, _ := aclServer(t, mqttd.Options{})
	spy := connectAs(t, addr, packets.V311, as("spy", "spy", ""))
	if codes := subscribe(spy, packets.Subscription{Filter: "#"}); codes[0] != 0 {
		t.Fatalf("spy SUBACK %v", codes)
	}
	for _, v := range versions {
		alice := connectAs(t, addr, v, as("alice-"+versionName(v), "alice", ""))
		if code := publishQoS1(alice, 1, "sensors/temp", false); code != packets.Success {
			t.Errorf("%s: allowed publish: PUBACK %#x", versionName(v), byte(code))
		}
		expectPublish(spy, "sensors/temp")
		want := packets.Success // 3.1.1: acknowledged, dropped
		if v == packets.V5 {
			want = packets.NotAuthorized
		}
		for i, topic := range []string{"sensors/secret", "other/x"} {
			if code := publishQoS1(alice, uint16(2+i), topic, false); code != want {
				t.Errorf("%s: denied publish to %s: PUBACK %#x, want %#x", versionName(v), topic, byte(code), byte(want))
			}
		}
		alice.send(&packets.Publish{Topic: "other/qos0", Payload: []byte("x")})
		expectNothing(spy)

		denied := packets.SubackFailure
		if v == packets.V5 {
			denied = packets.NotAuthorized
		}
		codes := subscribe(alice, packets.Subscription{Filter: "sensors/#", Options: packets.SubOptions{QoS: 1}},
			packets.Subscription{Filter: "cmd/#"}, packets.Subscription{Filter: "$share/g/cmd/#"},
			packets.Subscription{Filter: "#"}, packets.Subscription{Filter: "$share/g/#"},
			packets.Subscription{Filter: "sensors/secret"}, packets.Subscription{Filter: "devices/alice/#"})
		wantCodes := []packets.ReasonCode{1, denied, denied, denied, denied, denied, 0}
		for i := range wantCodes {
			if codes[i] != wantCodes[i] {
				t.Errorf("%s: SUBACK codes %v, want %v", versionName(v), codes, wantCodes)
				break
			}
		}
	}
}

// TestACLDeliveries checks that each message is checked against the
// receiver's read access, not only its filter: retained messages sent on
// SUBSCRIBE, messages routed live, and those queued for a persistent
// session while it was away. $SYS topics reach nobody through # or
// $share/g/#.
func TestACLDeliveries(t *testing.T) {
	t.Parallel()
	srv, addr, _ := aclServer(t, mqttd.Options{})
	writer := connectAs(t, addr, packets.V5, as("writer", "writer", ""))
	for i, topic := range []string{"sensors/secret", "sensors/a"} {
		publishQoS1(writer, uint16(1+i), topic, true)
	}
	alice := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "alice", UsernameFlag: true, Username: "alice"})
	subscribe(alice, packets.Subscription{Filter: "sensors/#", Options: packets.SubOptions{QoS: 1}})
	if p := expectPublish(alice, "sensors/a"); !p.Retain {
		t.Errorf("retained message sent without retain: %+v", p)
	}
	alice.send(&packets.Puback{PacketID: 1})
	expectNothing(alice)

	publishQoS1(writer, 3, "sensors/secret", false)
	publishQoS1(writer, 4, "sensors/b", false)
	p := expectPublish(alice, "sensors/b")
	alice.send(&packets.Puback{PacketID: p.PacketID})
	expectNothing(alice)

	alice.send(&packets.Disconnect{})
	alice.expectClosed()
	publishQoS1(writer, 5, "sensors/secret", false)
	publishQoS1(writer, 6, "sensors/c", false)
	back := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "alice", UsernameFlag: true, Username: "alice"})
	p = expectPublish(back, "sensors/c")
	back.send(&packets.Puback{PacketID: p.PacketID})
	expectNothing(back)

	spy := connectAs(t, addr, packets.V5, as("spy", "spy", ""))
	codes := subscribe(spy, packets.Subscription{Filter: "#", Options: packets.SubOptions{RetainHandling: 2}},
		packets.Subscription{Filter: "$share/g/#"},
		packets.Subscription{Filter: "$SYS/#"})
	if codes[0] != 0 || codes[1] != 0 || codes[2] != packets.NotAuthorized {
		t.Errorf("spy SUBACK %v, want [0 0 0x87]: # does not cover $SYS", codes)
	}
	if err := srv.Publish("$SYS/broker/secret", []byte("x"), 0, false, nil); err != nil {
		t.Fatal(err)
	}
	expectNothing(spy)
	if n := srv.Stats().ReadDenied; n < 3 {
		t.Errorf("%d deliveries denied counted, want at least 3", n)
	}
}

// TestACLIdentitiesDoNotWiden checks that a username or client id with
// +, # or / cannot turn the pattern devices/%u/# into a wider one: such a
// client gets nothing from the patterns, and what others publish under
// devices/ does not reach it.
func TestACLIdentitiesDoNotWiden(t *testing.T) {
	t.Parallel()
	_, addr, _ := aclServer(t, mqttd.Options{})
	writer := connectAs(t, addr, packets.V5, as("writer", "writer", ""))
	var watchers []*rawConn
	for i, name := range []string{"#", "+", "a/#", "bob/x"} {
		for _, cp := range []*packets.Connect{as("u"+string(rune('0'+i)), name, ""), as(name, "bob", "")} {
			rc := connectAs(t, addr, packets.V5, cp)
			codes := subscribe(rc, packets.Subscription{Filter: "devices/#"}, packets.Subscription{Filter: "devices/+/t"},
				packets.Subscription{Filter: "#"}, packets.Subscription{Filter: "$share/g/devices/#"})
			for j, code := range codes {
				if code != packets.NotAuthorized {
					t.Errorf("username %q client id %q: filter %d granted (%#x)", cp.Username, cp.ClientID, j, byte(code))
				}
			}
			watchers = append(watchers, rc)
		}
	}
	publishQoS1(writer, 1, "devices/bob/t", false)
	for _, rc := range watchers {
		expectNothing(rc)
	}
}

// TestACLWill checks a will against the ACL at CONNECT: one to a topic
// the client may not write refuses the client (3.1.1 5, 5.0 0x87), one it
// may write is accepted.
func TestACLWill(t *testing.T) {
	t.Parallel()
	_, addr, _ := aclServer(t, mqttd.Options{})
	for _, v := range versions {
		cp := as("w", "alice", "")
		setWill(cp, "other/will")
		expectRefused(t, addr, v, cp, refusedCode(v, false))
		cp = as("w", "alice", "")
		setWill(cp, "sensors/will")
		connectAs(t, addr, v, cp).ping()
	}
}

// TestACLReload checks SIGHUP's reload (Server.Reload) of an ACL file:
// rules taken away revoke the subscriptions they granted, online and
// offline, and what was queued under the old rules is not delivered; a
// file that no longer parses keeps the rules in force.
func TestACLReload(t *testing.T) {
	t.Parallel()
	srv, addr, aclFile := aclServer(t, mqttd.Options{})
	writer := connectAs(t, addr, packets.V5, as("writer", "writer", ""))
	online := connectAs(t, addr, packets.V5, as("online", "alice", ""))
	subscribe(online, packets.Subscription{Filter: "sensors/#", Options: packets.SubOptions{QoS: 1}})
	away := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "away", UsernameFlag: true, Username: "alice"})
	subscribe(away, packets.Subscription{Filter: "sensors/#", Options: packets.SubOptions{QoS: 1}})
	away.send(&packets.Disconnect{})
	away.expectClosed()
	publishQoS1(writer, 1, "sensors/queued", false)
	p := expectPublish(online, "sensors/queued")
	online.send(&packets.Puback{PacketID: p.PacketID})

	os.WriteFile(aclFile, []byte("user alice\ntopic \n"), 0o600) // "topic" without a filter: a parse error
	if err := srv.Reload(); err == nil || !strings.Contains(err.Error(), aclFile) {
		t.Fatalf("Reload of a broken ACL file: %v, want an error naming it", err)
	}
	publishQoS1(writer, 2, "sensors/still", false)
	p = expectPublish(online, "sensors/still")
	online.send(&packets.Puback{PacketID: p.PacketID})

	writeFile(t, filepath.Dir(aclFile), "acl", strings.Replace(testACL, "topic readwrite sensors/#", "topic write sensors/#", 1))
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if n := srv.Stats().SubscriptionsRevoked; n != 2 {
		t.Errorf("%d subscriptions revoked, want 2", n)
	}
	publishQoS1(writer, 3, "sensors/after", false)
	expectNothing(online)
	back := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "away", UsernameFlag: true, Username: "alice"})
	expectNothing(back)
	if codes := subscribe(back, packets.Subscription{Filter: "sensors/#"}); codes[0] != packets.SubackFailure {
		t.Errorf("SUBACK %v after the rule went, want 0x80", codes)
	}
}

// TestACLShareGroupPicksAReader: a share group whose members have
// different read access gives each message to a member that may read it,
// not to the one the round robin reached; with no such member, nobody.
func TestACLShareGroupPicksAReader(t *testing.T) {
	t.Parallel()
	_, addr, _ := aclServer(t, mqttd.Options{})
	writer := connectAs(t, addr, packets.V5, as("writer", "writer", ""))
	group := packets.Subscription{Filter: "$share/g/sensors/#", Options: packets.SubOptions{QoS: 1}}
	alice := connectAs(t, addr, packets.V5, as("alice", "alice", "")) // denied sensors/secret
	spy := connectAs(t, addr, packets.V5, as("spy", "spy", ""))       // reads everything
	for _, rc := range []*rawConn{alice, spy} {
		if codes := subscribe(rc, group); codes[0] != 1 {
			t.Fatalf("SUBACK %v", codes)
		}
	}
	for i := range 4 {
		publishQoS1(writer, uint16(1+i), "sensors/secret", false)
		p := expectPublish(spy, "sensors/secret")
		spy.send(&packets.Puback{PacketID: p.PacketID})
	}
	expectNothing(alice)

	spy.send(&packets.Disconnect{})
	spy.expectClosed()
	publishQoS1(writer, 9, "sensors/secret", false)
	expectNothing(alice)
}

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
	t.Parallel()
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
	t.Parallel()
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

package mqttd_test

import (
	"fmt"
	"runtime"
	"testing"

	"mqttd"
	"mqttd/packets"
)

// TestSharedSubscription checks a share group gets each message once,
// spread over its members, while a normal subscriber gets every one.
func TestSharedSubscription(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, mqttd.Options{})
	const members, messages = 3, 30
	var group [members]collector
	for i := range group {
		c := pahoConnect(t, addr, fmt.Sprintf("worker-%d", i), nil)
		wait(t, c.Subscribe("$share/workers/jobs/+", 1, group[i].handler))
	}
	var all collector
	watcher := pahoConnect(t, addr, "watcher", nil)
	wait(t, watcher.Subscribe("jobs/#", 1, all.handler))
	pub := pahoConnect(t, addr, "pub", nil)
	for i := range messages {
		wait(t, pub.Publish(fmt.Sprintf("jobs/%d", i), 1, false, fmt.Sprint(i)))
	}
	waitFor(t, "every message at the watcher", func() bool { return all.len() == messages })
	total := func() int {
		n := 0
		for i := range group {
			n += group[i].len()
		}
		return n
	}
	waitFor(t, "every message in the group", func() bool { return total() == messages })
	seen := map[string]bool{}
	for i := range group {
		if n := group[i].len(); n != messages/members {
			t.Errorf("member %d got %d messages, want %d (round robin)", i, n, messages/members)
		}
		for j := range group[i].len() {
			p := string(group[i].get(j).Payload())
			if seen[p] {
				t.Errorf("message %s delivered to the group twice", p)
			}
			seen[p] = true
		}
	}
}

// TestRepeatedTopicFollowsSubscriptions checks deliveries of one
// publisher's messages to one topic while the subscriptions to it change
// between them: a new subscriber gets the next message, one that left
// does not, a subscription made again with another QoS gets that QoS,
// and the members of a share group take the messages in turn. On one P,
// so that each message is routed with the router the one before it was
// (they are pooled per P), which keeps the last topic's matches.
func TestRepeatedTopicFollowsSubscriptions(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	_, addr := startServer(t, mqttd.Options{})
	a := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "a", CleanStart: true})
	subscribe(a, packets.Subscription{Filter: "t/+", Options: packets.SubOptions{QoS: 1}})
	pub := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "pub", CleanStart: true})
	id := uint16(0)
	publish := func(payload string) {
		t.Helper()
		id++
		pub.send(&packets.Publish{Topic: "t/x", QoS: 1, PacketID: id, Payload: []byte(payload)})
		expectAck(pub, packets.TypePuback, id, packets.Success)
	}
	receive := func(rc *rawConn, payload string, qos byte) {
		t.Helper()
		p := expectPublish(rc, "t/x")
		if string(p.Payload) != payload || p.QoS != qos {
			t.Fatalf("got %q at QoS %d, want %q at QoS %d", p.Payload, p.QoS, payload, qos)
		}
		if qos > 0 {
			rc.send(&packets.Puback{PacketID: p.PacketID})
		}
	}
	publish("1")
	receive(a, "1", 1)
	publish("1b") // nothing changed: the matches of "1" again
	receive(a, "1b", 1)

	b := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "b", CleanStart: true})
	subscribe(b, packets.Subscription{Filter: "t/x", Options: packets.SubOptions{QoS: 1}})
	for _, p := range []string{"2", "2b"} {
		publish(p)
		receive(a, p, 1)
		receive(b, p, 1)
	}

	b.send(&packets.Unsubscribe{PacketID: 2, Filters: []string{"t/x"}})
	if _, ok := b.read().(*packets.Unsuback); !ok {
		t.Fatal("no UNSUBACK")
	}
	for _, p := range []string{"3", "3b"} {
		publish(p)
		receive(a, p, 1)
	}
	expectNothing(b)

	subscribe(a, packets.Subscription{Filter: "t/+", Options: packets.SubOptions{QoS: 0}})
	publish("4")
	receive(a, "4", 0)

	s1 := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "s1", CleanStart: true})
	subscribe(s1, packets.Subscription{Filter: "$share/g/t/x", Options: packets.SubOptions{QoS: 1}})
	s2 := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "s2", CleanStart: true})
	subscribe(s2, packets.Subscription{Filter: "$share/g/t/x", Options: packets.SubOptions{QoS: 1}})
	for _, p := range []string{"5", "6", "7", "8"} {
		publish(p)
		receive(a, p, 0)
	}
	got := map[string]bool{}
	for _, rc := range []*rawConn{s1, s2} {
		n := 0
		for _, p := range rc.ping() {
			if pp, ok := p.(*packets.Publish); ok {
				got[string(pp.Payload)] = true
				rc.send(&packets.Puback{PacketID: pp.PacketID})
				n++
			}
		}
		if n != 2 { // round robin, the default
			t.Errorf("a member of the share group got %d of 4 messages, want 2", n)
		}
	}
	if len(got) != 4 {
		t.Fatalf("the share group got %v, want each of 5-8 once", got)
	}
	expectNothing(b)
}

func TestOverlappingSubscriptionsDeliverOnceAtMaxQoS(t *testing.T) {
	t.Parallel()
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

package mqttd_test

import (
	"strings"
	"testing"

	"mqttd"
	"mqttd/packets"
)

// TestTopicAliasInbound checks a 5.0 client's topic aliases: one set with
// a topic stands for it in later PUBLISHes with an empty topic, is
// replaced by a new topic under the same alias, and is per connection;
// the subscriber receives the full topic and no alias. An empty topic
// without an alias is a protocol error (0x82), and aliases keeping more
// than 16 KiB of topics are refused (0x97).
func TestTopicAliasInbound(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, mqttd.Options{})
	sub := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "sub", CleanStart: true})
	subscribe(sub, packets.Subscription{Filter: "a/#"})
	pub := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "pub", CleanStart: true})
	for _, step := range []struct{ topic, want string }{
		{"a/one", "a/one"}, {"", "a/one"}, {"a/two", "a/two"}, {"", "a/two"},
	} {
		pub.write(aliasPublish(t, step.topic, 1))
		p := expectPublish(sub, step.want)
		if p.Properties.Has(packets.PropTopicAlias) {
			t.Errorf("delivered with the publisher's alias %d", p.Properties.TopicAlias)
		}
	}
	other := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "other", CleanStart: true})
	other.write(aliasPublish(t, "", 1)) // aliases are per connection
	expectServerClose(other, packets.ProtocolError)

	empty := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "empty", CleanStart: true})
	empty.send(&packets.Publish{Topic: "", QoS: 1, PacketID: 1, Payload: []byte("x")})
	expectServerClose(empty, packets.ProtocolError)

	long := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "long", CleanStart: true})
	topic := "a/" + strings.Repeat("x", 6000)
	for alias := uint16(1); alias <= 2; alias++ {
		long.write(aliasPublish(t, topic, alias))
	}
	expectNothing(long)
	long.write(aliasPublish(t, topic, 3)) // 18 KiB of topics
	expectServerClose(long, packets.QuotaExceeded)
	if n := srv.Stats().Disconnects["protocol_error"]; n != 3 { // the alias quota's too
		t.Errorf("disconnects[protocol_error] = %d, want 3", n)
	}
}

// aliasReader resolves the topic aliases the broker sends, as a client
// library does, and counts the PUBLISHes that came with an alias only.
type aliasReader struct {
	rc        *rawConn
	topics    map[uint16]string
	aliasOnly int
}

func (ar *aliasReader) next(t *testing.T) (*packets.Publish, string) {
	t.Helper()
	p, ok := ar.rc.read().(*packets.Publish)
	if !ok {
		t.Fatalf("got %+v, want a PUBLISH", p)
	}
	topic := p.Topic
	if p.Properties.Has(packets.PropTopicAlias) {
		alias := p.Properties.TopicAlias
		if topic == "" {
			topic = ar.topics[alias]
			ar.aliasOnly++
			if topic == "" {
				t.Fatalf("alias %d used before it was set", alias)
			}
		} else {
			ar.topics[alias] = topic
		}
	}
	return p, topic
}

// TestTopicAliasOutbound checks the aliases the broker gives a 5.0 client
// that takes them: within its Topic Alias Maximum, a topic sent again goes
// with its alias only, the least recently used alias goes to a new topic
// when all are taken, QoS 0 and 1 alike; a client that takes none gets
// full topics only.
func TestTopicAliasOutbound(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, mqttd.Options{})
	props := packets.Properties{TopicAliasMaximum: 2}
	props.Set(packets.PropTopicAliasMaximum)
	sub := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "sub", CleanStart: true, Properties: props})
	subscribe(sub, packets.Subscription{Filter: "a/#", Options: packets.SubOptions{QoS: 1}})
	plain := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "plain", CleanStart: true})
	subscribe(plain, packets.Subscription{Filter: "a/#"})
	pub := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "pub", CleanStart: true})
	sent := []string{"a/1", "a/1", "a/2", "a/1", "a/3", "a/2", "a/3", "a/3"}
	for i, topic := range sent {
		pub.send(&packets.Publish{Topic: topic, QoS: byte(i % 2), PacketID: uint16(i + 1), Payload: []byte(topic)})
		if i%2 == 1 {
			pub.read()
		}
	}
	ar := &aliasReader{rc: sub, topics: map[uint16]string{}}
	for i, want := range sent {
		p, topic := ar.next(t)
		if topic != want || string(p.Payload) != want {
			t.Fatalf("message %d: topic %q (payload %q), want %q", i, topic, p.Payload, want)
		}
		if p.Properties.TopicAlias > 2 {
			t.Fatalf("alias %d past the client's maximum of 2", p.Properties.TopicAlias)
		}
		if p.QoS == 1 {
			sub.send(&packets.Puback{PacketID: p.PacketID})
		}
	}
	// a/1 set, a/1 alias, a/2 set, a/1 alias, a/3 takes a/2's, a/2 takes a/1's, a/3 alias, a/3 alias.
	if ar.aliasOnly != 4 {
		t.Errorf("%d PUBLISHes with an alias only, want 4", ar.aliasOnly)
	}
	for i := range sent {
		p := plain.read().(*packets.Publish)
		if p.Topic != sent[i] || p.Properties.Has(packets.PropTopicAlias) {
			t.Fatalf("client taking no aliases got %+v", p)
		}
	}
}

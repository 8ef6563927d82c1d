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

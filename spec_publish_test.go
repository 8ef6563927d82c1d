package mqttd_test

import (
	"strings"
	"testing"

	"mqttd"
	"mqttd/packets"
)

// subscribeAs connects a client in version v subscribed to filter at QoS 0.
func subscribeAs(t *testing.T, addr string, v packets.Version, id, filter string) *rawConn {
	t.Helper()
	rc := connectAs(t, addr, v, &packets.Connect{ClientID: id, CleanStart: true})
	if codes := subscribe(rc, packets.Subscription{Filter: filter}); codes[0] != 0 {
		t.Fatalf("SUBACK 0x%02X for %q", byte(codes[0]), filter)
	}
	return rc
}

// publishBarrier publishes at QoS 0 and then pings, so that when it
// returns the server has routed every message.
func publishBarrier(rc *rawConn, msgs ...*packets.Publish) {
	rc.t.Helper()
	for _, m := range msgs {
		rc.send(m)
	}
	expectNothing(rc)
}

// Rows 15 and 16: a BOM inside a topic is an ordinary character and is
// kept [MQTT-1.5.3-3]; control characters MAY be refused (§1.5.4), and
// the broker's policy is to accept them (it has no strict mode).
func specRow15BOMKept(t *testing.T, on ...serverOption) {
	deliverTopicAsIs(t, "a/\uFEFFb", on...)
}

func specRow16ControlCharacters(t *testing.T, on ...serverOption) {
	deliverTopicAsIs(t, "a/\x01\x1F\x7F\u0085", on...)
}

// deliverTopicAsIs publishes on topic and checks that a subscriber to it
// gets the topic byte for byte.
func deliverTopicAsIs(t *testing.T, topic string, on ...serverOption) {
	t.Helper()
	for _, v := range versions {
		t.Run(versionName(v), func(t *testing.T) {
			_, addr := startServer(t, mqttd.Options{}, on...)
			sub := subscribeAs(t, addr, v, "sub", topic)
			pub := connectAs(t, addr, v, &packets.Connect{ClientID: "pub", CleanStart: true})
			pub.send(&packets.Publish{Topic: topic, Payload: []byte("x")})
			expectPublish(sub, topic)
		})
	}
}

// Row 29: the broker advertises limits.max_topic_alias as Topic Alias
// Maximum; alias 0 (the row's fixture) and one above it get DISCONNECT
// 0x94 (§3.3.2.3.4), the maximum itself is used.
func specRow29TopicAlias(t *testing.T, on ...serverOption) {
	t.Run("v5-above-maximum", func(t *testing.T) {
		_, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxTopicAlias: 3}}, on...)
		rc, ack := connectReply(t, addr, packets.V5, &packets.Connect{ClientID: "c", CleanStart: true})
		if ack.ReasonCode != packets.Success || !ack.Properties.Has(packets.PropTopicAliasMaximum) || ack.Properties.TopicAliasMaximum != 3 {
			t.Fatalf("CONNACK %+v, want success with Topic Alias Maximum 3", ack)
		}
		rc.write(aliasPublish(t, "t", 3))
		expectNothing(rc)
		rc.write(aliasPublish(t, "t", 4))
		expectServerClose(rc, packets.TopicAliasInvalid)
	})
}

// Row 30: an alias never set, with an empty topic: 0x82 (§3.3.2.3.4).
func specRow30UnknownAliasEmptyTopic(t *testing.T, on ...serverOption) {
	t.Run("v5", func(t *testing.T) {
		_, addr := startServer(t, mqttd.Options{}, on...)
		expectRejected(t, addr, packets.V5, aliasPublish(t, "", 5), packets.ProtocolError)
	})
}

// Row 33: the broker advertises its limit of QoS 2 messages awaiting
// PUBREL as Receive Maximum and refuses one more with 0x93 (§3.3.4);
// 3.1.1 cannot say why, so the connection is closed.
func specRow33ReceiveMaximum(t *testing.T, on ...serverOption) {
	for _, v := range versions {
		t.Run(versionName(v), func(t *testing.T) {
			_, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxAwaitingRel: 2}}, on...)
			if v == packets.V5 {
				rc, ack := connectReply(t, addr, v, &packets.Connect{ClientID: "probe", CleanStart: true})
				if !ack.Properties.Has(packets.PropReceiveMaximum) || ack.Properties.ReceiveMaximum != 2 {
					t.Fatalf("CONNACK %+v, want Receive Maximum 2", ack)
				}
				rc.send(&packets.Disconnect{})
			}
			var frames []byte
			for id := uint16(1); id <= 3; id++ {
				frames = append(frames, encode(t, &packets.Publish{QoS: 2, PacketID: id, Topic: "t"}, v)...)
			}
			watcher := watchTopic(t, addr, "will")
			cp := &packets.Connect{ClientID: "c", CleanStart: true}
			setWill(cp, "will")
			rc := connectAs(t, addr, v, cp)
			rc.write(frames)
			for id := uint16(1); id <= 2; id++ {
				if p, ok := rc.read().(*packets.Pubrec); !ok || p.PacketID != id {
					t.Fatalf("got %T %+v, want PUBREC %d", p, p, id)
				}
			}
			expectServerClose(rc, packets.ReceiveMaximumExceeded)
			expectPublish(watcher, "will")
		})
	}
}

// Row 34: a client must not send a Subscription Identifier [MQTT-3.3.4-6].
func specRow34SubscriptionIDFromClient(t *testing.T, on ...serverOption) {
	t.Run("v5", func(t *testing.T) {
		_, addr := startServer(t, mqttd.Options{}, on...)
		raw := validFixture(t, "row34-v5-publish-subscription-ids").Raw
		expectRejected(t, addr, packets.V5, raw, packets.ProtocolError)
	})
}

// Row 37: a payload that is not UTF-8 under Payload Format Indicator 1
// MAY be refused; the broker's policy is to forward it, with the
// indicator, unaltered [MQTT-3.3.2-4].
func specRow37PayloadFormat(t *testing.T, on ...serverOption) {
	t.Run("v5-forwarded", func(t *testing.T) {
		_, addr := startServer(t, mqttd.Options{}, on...)
		sub := subscribeAs(t, addr, packets.V5, "sub", "t")
		pub := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "pub", CleanStart: true})
		m := &packets.Publish{QoS: 1, PacketID: 1, Topic: "t", Payload: []byte{0xFF, 0xFE}}
		m.Properties.PayloadFormat = 1
		m.Properties.Set(packets.PropPayloadFormat)
		pub.send(m)
		if ack, ok := pub.read().(*packets.Puback); !ok || ack.ReasonCode != packets.Success {
			t.Fatalf("got %T %+v, want PUBACK 0x00", ack, ack)
		}
		got := expectPublish(sub, "t")
		if string(got.Payload) != string(m.Payload) || !got.Properties.Has(packets.PropPayloadFormat) || got.Properties.PayloadFormat != 1 {
			t.Fatalf("delivered %+v, want the payload and indicator unaltered", got)
		}
	})
}

// Row 45: PUBREL for an unknown packet id is still answered with PUBCOMP;
// 5.0 says 0x92 Packet Identifier not found (§4.3.3).
func specRow45PubrelUnknownID(t *testing.T, on ...serverOption) {
	want := map[packets.Version]packets.ReasonCode{packets.V311: packets.Success, packets.V5: packets.PacketIDNotFound}
	for _, v := range versions {
		t.Run(versionName(v), func(t *testing.T) {
			_, addr := startServer(t, mqttd.Options{}, on...)
			rc := connectAs(t, addr, v, &packets.Connect{ClientID: "c", CleanStart: true})
			rc.send(&packets.Pubrel{PacketID: 9})
			p, ok := rc.read().(*packets.Pubcomp)
			if !ok || p.PacketID != 9 || p.ReasonCode != want[v] {
				t.Fatalf("got %T %+v, want PUBCOMP 9 with 0x%02X", p, p, byte(want[v]))
			}
			expectNothing(rc)
		})
	}
}

// Row 44: an MQTT 3.1 client may set DUP on a PUBREL it sends again
// (flags 1010): it is released and completed like any PUBREL, where from
// 3.1.1 on the same frame closes the connection (the row's fixtures).
func specRow44Pubrel31Dup(t *testing.T, on ...serverOption) {
	_, addr := startServer(t, mqttd.Options{}, on...)
	sub := subscribeAs(t, addr, packets.V311, "sub", "q")
	pub, _ := connect31(t, addr, &packets.Connect{ClientID: "pub", CleanStart: true})
	pub.send(&packets.Publish{QoS: 2, PacketID: 7, Topic: "q", Payload: []byte("once")})
	if p, ok := pub.read().(*packets.Pubrec); !ok || p.PacketID != 7 {
		t.Fatalf("got %T %+v, want PUBREC 7", p, p)
	}
	for range 2 { // the first PUBCOMP taken as lost: the PUBREL sent again
		pub.write([]byte{0x6A, 0x02, 0x00, 0x07}) // PUBREL, flags 1010 (DUP, QoS 1), packet id 7
		if p, ok := pub.read().(*packets.Pubcomp); !ok || p.PacketID != 7 {
			t.Fatalf("got %T %+v, want PUBCOMP 7", p, p)
		}
	}
	expectPublish(sub, "q")
	expectNothing(sub)
	expectNothing(pub)
}

// Row 46: a QoS 2 PUBLISH repeated before PUBREL, with or without DUP, is
// answered with PUBREC again but delivered once (§4.3.3, CVE-2023-28366).
func specRow46QoS2Duplicate(t *testing.T, on ...serverOption) {
	for _, v := range versions {
		t.Run(versionName(v), func(t *testing.T) {
			_, addr := startServer(t, mqttd.Options{}, on...)
			sub := subscribeAs(t, addr, packets.V311, "sub", "q")
			pub := connectAs(t, addr, v, &packets.Connect{ClientID: "pub", CleanStart: true})
			for _, dup := range []bool{false, false, true} {
				pub.send(&packets.Publish{QoS: 2, Dup: dup, PacketID: 7, Topic: "q", Payload: []byte("once")})
				if p, ok := pub.read().(*packets.Pubrec); !ok || p.PacketID != 7 || p.ReasonCode != packets.Success {
					t.Fatalf("got %T %+v, want PUBREC 7", p, p)
				}
			}
			expectPublish(sub, "q")
			expectNothing(sub)
			pub.send(&packets.Pubrel{PacketID: 7})
			if p, ok := pub.read().(*packets.Pubcomp); !ok || p.PacketID != 7 || p.ReasonCode != packets.Success {
				t.Fatalf("got %T %+v, want PUBCOMP 7", p, p)
			}
		})
	}
}

// Row 54: wildcards at the first level do not match topics starting with
// $ [MQTT-4.7.2-1]; a $SYS/# subscription does. $SYS/x comes from the
// broker (clients may not publish there), $app/x from a client. The
// broker's own $SYS tree is off, so that $SYS/x is all there is.
func specRow54SysTopics(t *testing.T, on ...serverOption) {
	srv, addr := startServer(t, mqttd.Options{SysInterval: -1}, on...)
	wild := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "wild", CleanStart: true})
	if codes := subscribe(wild, packets.Subscription{Filter: "#"}, packets.Subscription{Filter: "+/x"}); codes[0] != 0 || codes[1] != 0 {
		t.Fatalf("SUBACK %v", codes)
	}
	sys := subscribeAs(t, addr, packets.V311, "sys", "$SYS/#")
	if err := srv.Publish("$SYS/x", nil, 0, false, nil); err != nil {
		t.Fatal(err)
	}
	pub := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "pub", CleanStart: true})
	publishBarrier(pub, &packets.Publish{Topic: "$app/x"}, &packets.Publish{Topic: "a/x"})
	expectPublish(sys, "$SYS/x")
	expectPublish(wild, "a/x")
	expectNothing(wild)
}

// Row 55: a topic of 10,001 levels is refused at once, as a topic name
// (closed; 5.0 0x90) and as a filter (SUBACK 0x80 / 0x8F), without a
// deep recursion (CVE-2019-11779).
func specRow55ManyLevels(t *testing.T, on ...serverOption) {
	deep := strings.Repeat("/", 10000)
	refused := map[packets.Version]packets.ReasonCode{packets.V311: packets.SubackFailure, packets.V5: packets.TopicFilterInvalid}
	for _, v := range versions {
		t.Run(versionName(v)+"-publish", func(t *testing.T) {
			_, addr := startServer(t, mqttd.Options{}, on...)
			expectRejected(t, addr, v, encode(t, &packets.Publish{Topic: deep}, v), packets.TopicNameInvalid)
		})
		t.Run(versionName(v)+"-subscribe", func(t *testing.T) {
			_, addr := startServer(t, mqttd.Options{}, on...)
			rc := connectAs(t, addr, v, &packets.Connect{ClientID: "c", CleanStart: true})
			if codes := subscribe(rc, packets.Subscription{Filter: deep}); codes[0] != refused[v] {
				t.Fatalf("SUBACK 0x%02X, want 0x%02X", byte(codes[0]), byte(refused[v]))
			}
			expectNothing(rc)
		})
	}
}

// Row 41: each bad filter gets its own failure code, 0x80 in 3.1.1 and
// 0x8F in 5.0 [MQTT-4.7.1-2/-3], [MQTT-4.7.3-1]; good filters in the same
// SUBSCRIBE are granted and the connection stays open.
func specRow41BadFilters(t *testing.T, on ...serverOption) {
	bad := []string{"a/#/b", "a#", "#/", "a+/b", "+a", ""}
	refused := map[packets.Version]packets.ReasonCode{packets.V311: packets.SubackFailure, packets.V5: packets.TopicFilterInvalid}
	for _, v := range versions {
		t.Run(versionName(v), func(t *testing.T) {
			_, addr := startServer(t, mqttd.Options{}, on...)
			rc := connectAs(t, addr, v, &packets.Connect{ClientID: "c", CleanStart: true})
			subs := []packets.Subscription{{Filter: "ok/+", Options: packets.SubOptions{QoS: 1}}}
			for _, f := range bad {
				subs = append(subs, packets.Subscription{Filter: f})
			}
			codes := subscribe(rc, subs...)
			if codes[0] != 1 {
				t.Errorf("good filter ok/+: SUBACK 0x%02X, want 0x01", byte(codes[0]))
			}
			for i, f := range bad {
				if codes[i+1] != refused[v] {
					t.Errorf("filter %q: SUBACK 0x%02X, want 0x%02X", f, byte(codes[i+1]), byte(refused[v]))
				}
			}
			expectNothing(rc)
		})
	}
}

// Row 42: malformed shared subscriptions get 0x8F [MQTT-4.8.2-1/-2]; No
// Local on a shared subscription is a Protocol Error [MQTT-3.8.3-4].
func specRow42SharedSubscriptions(t *testing.T, on ...serverOption) {
	t.Run("v5-bad-share", func(t *testing.T) {
		_, addr := startServer(t, mqttd.Options{}, on...)
		rc := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "c", CleanStart: true})
		for _, f := range []string{"$share//t", "$share/a+b/t", "$share/g"} {
			if codes := subscribe(rc, packets.Subscription{Filter: f}); codes[0] != packets.TopicFilterInvalid {
				t.Errorf("filter %q: SUBACK 0x%02X, want 0x8F", f, byte(codes[0]))
			}
		}
		expectNothing(rc)
	})
	t.Run("v5-no-local-shared", func(t *testing.T) {
		_, addr := startServer(t, mqttd.Options{}, on...)
		sub := &packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{
			{Filter: "$share/g/t", Options: packets.SubOptions{NoLocal: true}}}}
		expectRejected(t, addr, packets.V5, encode(t, sub, packets.V5), packets.ProtocolError)
	})
}

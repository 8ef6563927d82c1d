package mqttd_test

import (
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mqttd"
	"mqttd/packets"
	"mqttd/session"
)

// TestConnectionLimits checks the admission limits at their boundary: the
// connection at the limit is served, the one over it is closed before
// anything is read and counted under its reason, and closing one makes
// room again. Loopback addresses are not limited per address.
func TestConnectionLimits(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	from := make(chan net.Addr, 1)
	srv, addr := startServer(t, mqttd.Options{Registerer: reg,
		Limits: mqttd.Limits{MaxConnections: 4, MaxConnectionsPerAddress: 2}}, fromChan(from))
	deviceA := &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 40000}
	deviceB := &net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 40000}
	local := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 40000}
	dial := func(src net.Addr, id string, admitted bool) *rawConn {
		t.Helper()
		from <- src
		if admitted {
			return connectRaw(t, addr, &packets.Connect{ClientID: id, CleanStart: true})
		}
		rc := dialRaw(t, addr)
		rc.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, ClientID: id, CleanStart: true})
		rc.expectClosed()
		return nil
	}
	a1 := dial(deviceA, "a1", true)
	dial(deviceA, "a2", true)
	dial(deviceA, "a3", false) // a third from one address
	if got := srv.Stats().Rejected["max_connections_per_address"]; got != 1 {
		t.Errorf("max_connections_per_address rejections: %d, want 1", got)
	}
	dial(local, "l1", true)
	dial(deviceB, "b1", true) // the fourth connection: at the global limit
	dial(local, "l2", false)  // over it, whatever its address
	if got := metricValue(t, reg, "mqttd_connections_rejected_total"); got != 2 {
		t.Errorf("mqttd_connections_rejected_total: %v, want 2", got)
	}
	a1.nc.Close()
	waitFor(t, "a1's connection to close", func() bool { return srv.Stats().Connections == 3 })
	dial(deviceA, "a4", true) // room again, globally and for device A
}

// TestConnectionLimitPerIPv6Prefix checks that IPv6 sources are counted
// by their /64, which one holder fills with addresses at will: a third
// connection from another address of the same /64 is over a limit of
// two, one from another /64 is not.
func TestConnectionLimitPerIPv6Prefix(t *testing.T) {
	t.Parallel()
	from := make(chan net.Addr, 1)
	srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxConnectionsPerAddress: 2}}, fromChan(from))
	dial := func(ip, id string, admitted bool) {
		t.Helper()
		from <- &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}
		if admitted {
			connectRaw(t, addr, &packets.Connect{ClientID: id, CleanStart: true})
			return
		}
		rc := dialRaw(t, addr)
		rc.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, ClientID: id, CleanStart: true})
		rc.expectClosed()
	}
	dial("2001:db8:1:1::1", "a1", true)
	dial("2001:db8:1:1::2", "a2", true)
	dial("2001:db8:1:1:ffff::3", "a3", false) // the same /64
	dial("2001:db8:1:2::1", "b1", true)       // another /64
	if got := srv.Stats().Rejected["max_connections_per_address"]; got != 1 {
		t.Errorf("max_connections_per_address rejections: %d, want 1", got)
	}
}

// publishFrame encodes a 3.1.1 QoS 1 PUBLISH with a payload of size bytes.
func publishFrame(t *testing.T, topic string, size int) []byte {
	t.Helper()
	b, err := (&packets.Publish{Topic: topic, QoS: 1, PacketID: 1, Payload: bytes.Repeat([]byte("p"), size)}).Append(nil, packets.V311)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFrameTimeout checks limits.frame_timeout: a packet that has started
// to arrive must be complete within it, even for a client that asked for
// no keepalive, while one that arrives in parts in time is handled.
func TestFrameTimeout(t *testing.T) {
	bothReaders(t, func(t *testing.T, on ...serverOption) {
		srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{FrameTimeout: 300 * time.Millisecond}}, on...)
		rc := connectRaw(t, addr, &packets.Connect{ClientID: "slow", CleanStart: true})
		frame := publishFrame(t, "t", 100)
		rc.write(frame[:50])
		rc.write(frame[50:])
		if ack, ok := rc.read().(*packets.Puback); !ok || ack.PacketID != 1 {
			t.Fatalf("got %+v, want the PUBACK of a packet sent in two parts", ack)
		}
		rc.write(frame[:len(frame)-10])
		rc.expectClosed()
		if got := srv.Stats().Disconnects["frame_timeout"]; got != 1 {
			t.Errorf("disconnects[frame_timeout] = %d, want 1", got)
		}
	})
}

// TestIncomingBytesLimit checks limits.max_incoming_bytes_total: packets
// over 64 KiB that have started to arrive on several connections cannot
// hold more than it together (a connection that would pass it is
// closed), small packets are not held back, and the bytes are given back
// when the connections close.
func TestIncomingBytesLimit(t *testing.T) {
	t.Parallel()
	bothReaders(t, func(t *testing.T, on ...serverOption) {
		const limit, size = 200_000, 100_000
		srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxIncomingBytesTotal: limit}}, on...)
		frame := publishFrame(t, "big", size)
		partial := frame[:90_000]
		var conns []*rawConn
		for i := 0; srv.Stats().Disconnects["incoming_limit"] == 0; i++ {
			if i == 5 {
				t.Fatalf("%d partial packets of %d bytes held; incoming bytes %d", i, len(partial), srv.Stats().IncomingBytes)
			}
			rc := connectRaw(t, addr, &packets.Connect{ClientID: "big" + string(rune('a'+i)), CleanStart: true})
			conns = append(conns, rc)
			sent := srv.Stats().BytesReceived + uint64(len(partial))
			rc.write(partial)
			waitFor(t, "the broker to read the partial packet", func() bool {
				st := srv.Stats()
				return st.BytesReceived >= sent || st.Disconnects["incoming_limit"] > 0
			})
			if got := srv.Stats().IncomingBytes; got > limit+size {
				t.Fatalf("incoming bytes %d, want at most %d and one packet", got, limit)
			}
		}
		conns[len(conns)-1].expectClosed()

		small := connectRaw(t, addr, &packets.Connect{ClientID: "small", CleanStart: true})
		small.write(publishFrame(t, "small", 1000))
		if ack, ok := small.read().(*packets.Puback); !ok || ack.PacketID != 1 {
			t.Fatalf("got %+v, want the PUBACK of a small packet", ack)
		}
		for _, rc := range conns {
			rc.nc.Close()
		}
		waitFor(t, "the incoming bytes to be given back", func() bool { return srv.Stats().IncomingBytes == 0 })
	})
}

// TestSubscriptionLimit checks limits.max_subscriptions_per_client at its
// edge: the subscription reaching it is granted, a new one past it is
// refused (5.0 0x97, 3.1.1 0x80) and counted, while replacing a held
// filter still works and unsubscribing makes room.
func TestSubscriptionLimit(t *testing.T) {
	t.Parallel()
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

// TestSessionLimit checks limits.max_sessions at its edge: the session
// reaching it is created, a client needing one more is refused (5.0
// 0x97, 3.1.1 3) and counted, while a client whose session exists may
// still connect, and a session that ends makes room.
func TestSessionLimit(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// TestQueueByteLimits checks the queued bytes are bounded per session
// (limits.max_queued_bytes) and for all sessions together
// (limits.max_queued_bytes_total), not only counted in messages: past
// either, messages for an offline session are dropped and counted, and
// what was queued is delivered when the client comes back.
func TestQueueByteLimits(t *testing.T) {
	t.Parallel()
	// Each entry counts session.EntryCost besides its 200 bytes.
	const entry = 200 + session.EntryCost
	srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxQueuedBytes: 5 * entry, MaxQueuedBytesTotal: 7*entry + entry/2}})
	offlineSubscriber(t, addr, "a", "a")
	offlineSubscriber(t, addr, "b", "b")
	pub := connectRawSession(t, addr, "pub", true, false)
	payload := bytes.Repeat([]byte("x"), 199) // 200 bytes with the topic
	for _, topic := range []string{"a", "b"} {
		for i := range 8 {
			pub.send(&packets.Publish{Topic: topic, QoS: 1, PacketID: uint16(i + 1), Payload: payload})
			pub.read()
		}
	}
	// a takes 5 entries, its own limit; b takes what the total of 7.5
	// leaves: 2 messages.
	if st := srv.Stats(); st.Queued != 7 || st.QueuedBytes != 7*entry || st.Dropped["queue_full"] != 9 {
		t.Errorf("%d messages, %d bytes queued, %d dropped; want 7, %d, 9", st.Queued, st.QueuedBytes, st.Dropped["queue_full"], 7*entry)
	}
	back := connectRawSession(t, addr, "a", false, true)
	for i := range 5 {
		p := expectPublish(back, "a")
		back.send(&packets.Puback{PacketID: p.PacketID})
		if len(p.Payload) != len(payload) {
			t.Fatalf("message %d: %d bytes", i, len(p.Payload))
		}
	}
	expectNothing(back)
}

// TestOfflineFloodBounded runs the attack the byte limit is for, at the
// default settings: 40 QoS 1 messages of 1 MiB for one offline session
// grow the broker's heap by about limits.max_queued_bytes (16 MiB), not
// by 40 MiB, and an ordinary client is served throughout.
func TestOfflineFloodBounded(t *testing.T) {
	_, addr := startServer(t, mqttd.Options{})
	offlineSubscriber(t, addr, "victim", "flood")
	before := heapInUse()
	pub := connectRawSession(t, addr, "flooder", true, false)
	payload := bytes.Repeat([]byte("x"), 1<<20-64)
	for i := range 40 {
		pub.send(&packets.Publish{Topic: "flood", QoS: 1, PacketID: uint16(i + 1), Payload: payload})
		pub.read()
	}
	growth := int64(heapInUse()) - int64(before)
	t.Logf("heap growth: %d bytes", growth)
	if limit := int64(mqttd.DefaultMaxQueuedBytes + 4<<20); growth > limit {
		t.Errorf("heap grew by %d bytes, over %d", growth, limit)
	}
	other := connectRawSession(t, addr, "ordinary", true, false)
	subscribe(other, packets.Subscription{Filter: "ok"})
	other.send(&packets.Publish{Topic: "ok", Payload: []byte("still served")})
	expectPublish(other, "ok")
}

// TestSharedMessageCountsOnce checks that a message queued for many
// offline sessions counts once against limits.max_queued_bytes_total: it
// is shared, so fanning a large message out to many sleeping devices does
// not exhaust the total. Each session's entry counts its own cost.
func TestSharedMessageCountsOnce(t *testing.T) {
	t.Parallel()
	const once, entries = 1008, 10 * session.EntryCost
	srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxQueuedBytesTotal: 1500 + entries}})
	for i := range 10 {
		offlineSubscriber(t, addr, fmt.Sprintf("device-%d", i), "firmware")
	}
	pub := connectRawSession(t, addr, "pub", true, false)
	pub.send(&packets.Publish{Topic: "firmware", QoS: 1, PacketID: 1, Payload: bytes.Repeat([]byte("f"), 1000)})
	pub.read()
	if st := srv.Stats(); st.Queued != 10 || st.QueuedBytes != once+entries || st.Dropped["queue_full"] != 0 {
		t.Errorf("%d queued, %d bytes, %d dropped; want 10, %d (the message once), 0", st.Queued, st.QueuedBytes, st.Dropped["queue_full"], once+entries)
	}
	back := connectRawSession(t, addr, "device-3", false, true)
	p := expectPublish(back, "firmware")
	back.send(&packets.Puback{PacketID: p.PacketID})
	back.ping()
	if st := srv.Stats(); st.Queued != 9 || st.QueuedBytes != once+9*session.EntryCost {
		t.Errorf("after one device took it: %d queued, %d bytes; want 9, %d", st.Queued, st.QueuedBytes, once+9*session.EntryCost)
	}
}

package mqttd_test

import (
	"bytes"
	"fmt"
	"testing"

	"mqttd"
	"mqttd/packets"
	"mqttd/session"
)

// TestQueueByteLimits checks the queued bytes are bounded per session
// (limits.max_queued_bytes) and for all sessions together
// (limits.max_queued_bytes_total), not only counted in messages: past
// either, messages for an offline session are dropped and counted, and
// what was queued is delivered when the client comes back.
func TestQueueByteLimits(t *testing.T) {
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

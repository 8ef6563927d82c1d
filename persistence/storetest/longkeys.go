package storetest

import (
	"strings"
	"testing"

	"mqttd/packets"
	"mqttd/persistence"
)

// longKey is n bytes ending in last, so that keys of one length differ
// only in their last byte.
func longKey(n int, last byte) string { return strings.Repeat("k", n-1) + string(last) }

// testLongKeys checks that session IDs, filters and retained topics of
// any length MQTT allows (65,535 bytes) are kept whole and deleted: a
// store refuses or shortens none of them, and two long keys that differ
// only at the end stay apart.
func testLongKeys(t *testing.T, h *harness) {
	ids := []string{longKey(16000, 'a'), longKey(16001, 'a'), longKey(16001, 'b'), longKey(65535, 'a')}
	var states []persistence.SessionState
	var msgs []*persistence.Message
	longSubs := []persistence.Subscription{
		{Filter: longKey(16001, 'a'), Options: packets.SubOptions{QoS: 1}, ID: 3},
		{Filter: longKey(16001, 'b'), Options: packets.SubOptions{QoS: 2, NoLocal: true}},
		{Filter: longKey(65535, '#'), Options: packets.SubOptions{QoS: 0, RetainHandling: 2}, ID: 5},
		{Filter: "\xff/short", Options: packets.SubOptions{QoS: 1}},
	}
	topics := []string{longKey(16000, 'a'), longKey(16001, 'a'), longKey(16001, 'b'), longKey(65535, 'a'), "\xff/t"}
	retained := map[string]uint64{}
	h.do(func(b *persistence.Batch) {
		for i, id := range ids {
			m := message(uint64(i+1), id)
			fill, st := fullSession(id, m, uint64(i+1))
			fill(b)
			states = append(states, st)
			msgs = append(msgs, m)
		}
		b.PutSession(session("s"))
		for _, sub := range longSubs {
			b.PutSubscription("s", sub)
		}
		for i, topic := range topics {
			m := message(uint64(100+i), topic)
			b.PutMessage(m)
			b.PutRetained(topic, m.ID)
			msgs = append(msgs, m)
			retained[topic] = m.ID
		}
	})
	short := persistence.SessionState{Session: session("s"), Subscriptions: longSubs}
	h.check(snap(retained, messages(msgs...), append(states, short)...))

	// Deleted by the same long keys: a session with what it holds (its
	// message goes with it), a subscription, a retained topic.
	h.do(func(b *persistence.Batch) {
		b.DeleteSession(ids[3])
		b.DeleteSubscription(ids[1], states[1].Subscriptions[0].Filter)
		b.DeleteWill(ids[2])
		b.DeleteSubscription("s", longSubs[1].Filter)
		b.DeleteRetained(topics[2])
		b.DeleteRetained(topics[4])
	})
	states[1].Subscriptions = nil
	states[2].Will = nil
	short.Subscriptions = []persistence.Subscription{longSubs[0], longSubs[2], longSubs[3]}
	delete(retained, topics[2])
	delete(retained, topics[4])
	left := []*persistence.Message{msgs[0], msgs[1], msgs[2]}
	for _, id := range retained {
		left = append(left, msgs[len(ids)+int(id-100)])
	}
	h.check(snap(retained, messages(left...), states[0], states[1], states[2], short))
}

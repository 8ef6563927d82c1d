package mqttd_test

import (
	"fmt"
	"testing"

	"mqttd"
)

// TestPubSubQoSDowngrade checks every publish QoS against every
// subscription QoS on both readers.
func TestPubSubQoSDowngrade(t *testing.T) { bothReaders(t, testPubSubQoSDowngrade) }

func testPubSubQoSDowngrade(t *testing.T, on ...serverOption) {
	checkGoroutines(t)
	_, addr := startServer(t, mqttd.Options{}, on...)
	for _, subQoS := range []byte{0, 1, 2} {
		t.Run(fmt.Sprintf("sub_qos%d", subQoS), func(t *testing.T) {
			var got collector
			sub := pahoConnect(t, addr, "sub", nil)
			topic := fmt.Sprintf("q/%d", subQoS)
			wait(t, sub.Subscribe(topic, subQoS, got.handler))
			pub := pahoConnect(t, addr, "pub", nil)
			for pubQoS := byte(0); pubQoS <= 2; pubQoS++ {
				wait(t, pub.Publish(topic, pubQoS, false, fmt.Sprintf("m%d", pubQoS)))
			}
			waitFor(t, "three messages", func() bool { return got.len() == 3 })
			seen := map[string]bool{}
			for i := range 3 {
				m := got.get(i)
				var pubQoS byte
				if _, err := fmt.Sscanf(string(m.Payload()), "m%d", &pubQoS); err != nil || seen[string(m.Payload())] {
					t.Fatalf("unexpected or repeated payload %q", m.Payload())
				}
				seen[string(m.Payload())] = true
				if want := min(pubQoS, subQoS); m.Qos() != want || m.Retained() {
					t.Errorf("%s: qos %d retained %v; want qos %d, not retained", m.Payload(), m.Qos(), m.Retained(), want)
				}
			}
			pub.Disconnect(100)
			sub.Disconnect(100)
		})
	}
}

// TestSharedSubscription checks a share group gets each message once,
// spread over its members, while a normal subscriber gets every one.
func TestSharedSubscription(t *testing.T) {
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

package mqttd_test

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"mqttd"
	"mqttd/bridge"
	"mqttd/packets"
)

// A bridge's queue policies, with the remote down: what a full queue
// keeps, and whom it refuses.

// remoteAt runs a remote broker on addr until the test ends, with an
// inline subscriber to filter in place before any bridge connects; it
// returns what the subscriber receives.
func remoteAt(t *testing.T, addr, filter string) <-chan mqttd.Message {
	t.Helper()
	srv, err := mqttd.New(mqttd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan mqttd.Message, 1000)
	if _, err := srv.Subscribe(filter, func(m mqttd.Message) { got <- m }); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.AddListener("test", l); err != nil {
		t.Fatal(err)
	}
	serveForTest(t, srv)
	return got
}

// expectPayloads takes len(want) messages from got, which must carry the
// payloads of want in order, on topic, and no more once the bridge's
// queue is drained.
func expectPayloads(t *testing.T, gw *mqttd.Server, got <-chan mqttd.Message, topic string, want []string) {
	t.Helper()
	for _, w := range want {
		select {
		case m := <-got:
			if m.Topic != topic || string(m.Payload) != w {
				t.Fatalf("remote got %s %q, want %s %q", m.Topic, m.Payload, topic, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("remote got nothing, want %q; bridge %+v", w, gw.Bridges()[0])
		}
	}
	waitFor(t, "the bridge's queue to drain", func() bool {
		st := gw.Bridges()[0]
		return st.Connected && st.Queued == 0 && st.Inflight == 0
	})
	select {
	case m := <-got:
		t.Errorf("remote got %s %q more", m.Topic, m.Payload)
	default:
	}
}

func numbers(from, to int) []string {
	var s []string
	for i := from; i < to; i++ {
		s = append(s, fmt.Sprint(i))
	}
	return s
}

// TestBridgeQueueDrops: with the remote down, drop_oldest keeps the
// newest max_queued_messages and drop_new the oldest, each drop counted;
// what was kept arrives, in order, when the remote comes back.
func TestBridgeQueueDrops(t *testing.T) {
	const bound, n = 20, 30
	for _, tc := range []struct {
		policy, reason string
		kept           []string
	}{
		{bridge.DropOldest, "queue_full_oldest", numbers(n-bound, n)},
		{bridge.DropNew, "queue_full_new", numbers(0, bound)},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			raddr := freeAddr(t)
			cfg := bridgeTo(raddr, "5", rule("q/#", bridge.Out, 1, "", "gw1/"))
			cfg.MaxQueuedMessages, cfg.QueuePolicy = bound, tc.policy
			gw, gaddr := startServer(t, mqttd.Options{DataDir: t.TempDir(), Bridges: []bridge.Config{cfg}})
			pub := pahoConnect(t, gaddr, "sensor", nil)
			for i := range n {
				wait(t, pub.Publish("q/t", 1, false, fmt.Sprint(i)))
			}
			st := gw.Bridges()[0]
			if st.Connected || st.Queued != bound || st.Dropped[tc.reason] != n-bound {
				t.Errorf("connected %v, %d queued, dropped %v; want down, %d queued, %d %s",
					st.Connected, st.Queued, st.Dropped, bound, n-bound, tc.reason)
			}
			expectPayloads(t, gw, remoteAt(t, raddr, "gw1/#"), "gw1/q/t", tc.kept)
		})
	}
}

// TestBridgeBlockPublishers: with the remote down and the queue full,
// block_publishers answers a 5.0 QoS 1 publisher PUBACK 0x97 and
// disconnects a 3.1.1 one, having lost nothing it acknowledged; once the
// remote is back and the queue drained, both publish again.
func TestBridgeBlockPublishers(t *testing.T) {
	const bound = 20
	raddr := freeAddr(t)
	cfg := bridgeTo(raddr, "5", rule("q/#", bridge.Out, 1, "", "gw1/"))
	cfg.MaxQueuedMessages, cfg.QueuePolicy = bound, bridge.BlockPublishers
	gw, gaddr := startServer(t, mqttd.Options{DataDir: t.TempDir(), Bridges: []bridge.Config{cfg}})
	p5 := connect5(t, gaddr, &paho.Connect{ClientID: "pub5", CleanStart: true}, nil)
	publish5 := func(topic, payload string) byte {
		t.Helper()
		r := p5.publish(t, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(payload)})
		return r.ReasonCode
	}
	accepted := 0
	for ; accepted < 3*bound; accepted++ {
		if code := publish5("q/t", fmt.Sprint(accepted)); code != 0 {
			if code != 0x97 {
				t.Fatalf("PUBACK 0x%02X, want 0x97", code)
			}
			break
		}
	}
	if accepted != bound {
		t.Errorf("%d messages accepted before the first refusal, want %d (max_queued_messages)", accepted, bound)
	}
	if code := publish5("other/t", "not bridged"); code >= 0x80 {
		t.Errorf("a topic no bridge takes: PUBACK 0x%02X, want success", code)
	}

	old := connectRaw(t, gaddr, &packets.Connect{ClientID: "pub311", CleanStart: true})
	old.send(&packets.Publish{QoS: 1, Topic: "q/t", PacketID: 1, Payload: []byte("311")})
	old.expectClosed()
	waitFor(t, "the 3.1.1 publisher's disconnect counted", func() bool { return gw.Stats().Disconnects["bridge_full"] == 1 })
	if st := gw.Bridges()[0]; st.Queued != bound || st.Dropped["publisher_refused"] < 2 {
		t.Errorf("%d queued, dropped %v; want %d queued, 2 publishers refused", st.Queued, st.Dropped, bound)
	}

	got := remoteAt(t, raddr, "gw1/#")
	expectPayloads(t, gw, got, "gw1/q/t", numbers(0, accepted))
	if code := publish5("q/t", "again"); code != 0 {
		t.Errorf("after the drain: PUBACK 0x%02X, want 0", code)
	}
	again := connectRaw(t, gaddr, &packets.Connect{ClientID: "pub311", CleanStart: true})
	again.send(&packets.Publish{QoS: 1, Topic: "q/t", PacketID: 1, Payload: []byte("311 again")})
	if ack, ok := again.read().(*packets.Puback); !ok || ack.PacketID != 1 {
		t.Errorf("3.1.1 publisher after the drain: %+v, want PUBACK", ack)
	}
	expectPayloads(t, gw, got, "gw1/q/t", []string{"again", "311 again"})
}

package mqttd_test

import (
	"runtime"
	"runtime/metrics"
	"testing"

	"mqttd"
	"mqttd/packets"
)

// liveHeap is what the broker's memory watch reads.
func liveHeap() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// TestMemoryPressure checks what the broker does when the live heap
// passes 7/8 of limits.max_memory, with real memory: the test holds a
// large allocation. New connections are closed at accept, a new retained
// message is refused (5.0 PUBACK 0x97), a QoS 0 message for a client that
// already has a backlog is dropped rather than stalled for, while
// clients already connected go on; once the allocation is freed and the
// heap is below 3/4 of the budget, new connections are accepted again.
func TestMemoryPressure(t *testing.T) {
	const hogSize = 96 << 20
	runtime.GC()
	srv, l := startPipeServer(t, mqttd.Options{Limits: mqttd.Limits{MaxMemory: liveHeap() + 64<<20}})
	connect := func(id string, v packets.Version) *rawConn {
		rc := l.dial(t)
		rc.v = v
		rc.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: v, ClientID: id, CleanStart: true})
		if ack, ok := rc.read().(*packets.Connack); !ok || ack.ReasonCode != 0 {
			t.Fatalf("%s: CONNACK %+v", id, ack)
		}
		return rc
	}
	pub := connect("pub", packets.V5)
	slow := connect("slow", packets.V311)
	subscribe(slow, packets.Subscription{Filter: "q0"})
	fast := connect("fast", packets.V311)
	subscribe(fast, packets.Subscription{Filter: "fast"})

	hog := make([]byte, hogSize)
	waitFor(t, "memory pressure", func() bool {
		runtime.GC()
		return srv.Stats().MemoryPressure
	})

	refused := l.dial(t)
	if _, err := refused.tryRead(); err == nil {
		t.Error("a new connection was served under memory pressure")
	}
	if got := srv.Stats().Rejected["memory_pressure"]; got != 1 {
		t.Errorf("rejected[memory_pressure] = %d, want 1", got)
	}

	pub.send(&packets.Publish{Topic: "r", QoS: 1, PacketID: 1, Retain: true, Payload: []byte("kept?")})
	if ack, ok := pub.read().(*packets.Puback); !ok || ack.ReasonCode != packets.QuotaExceeded {
		t.Errorf("retained PUBLISH under memory pressure: %+v, want PUBACK 0x97", ack)
	}
	if st := srv.Stats(); st.Retained != 0 || st.RetainedRefused != 1 {
		t.Errorf("retained %d, refused %d; want 0, 1", st.Retained, st.RetainedRefused)
	}

	if codes := subscribe(pub, packets.Subscription{Filter: "new/+"}, packets.Subscription{Filter: "fast"}); codes[0] != packets.QuotaExceeded {
		t.Errorf("SUBSCRIBE under memory pressure: %#x, want 0x97", codes)
	}
	if codes := subscribe(fast, packets.Subscription{Filter: "more"}, packets.Subscription{Filter: "fast", Options: packets.SubOptions{QoS: 1}}); codes[0] != packets.SubackFailure || codes[1] != 1 {
		t.Errorf("3.1.1 SUBSCRIBE under memory pressure: %#x, want 0x80 for a new filter, QoS 1 for the one held", codes)
	}

	// slow reads nothing: the first message waits in its outbox, the
	// second finds a backlog and is dropped at once.
	pub.send(&packets.Publish{Topic: "q0", Payload: []byte("first")})
	pub.send(&packets.Publish{Topic: "q0", Payload: []byte("second")})
	pub.send(&packets.Publish{Topic: "fast", Payload: []byte("on")})
	if p := expectPublish(fast, "fast"); string(p.Payload) != "on" {
		t.Errorf("fast got %q", p.Payload)
	}
	waitFor(t, "the QoS 0 drop", func() bool { return srv.Stats().Dropped["memory_pressure"] == 1 })
	if p := expectPublish(slow, "q0"); string(p.Payload) != "first" {
		t.Errorf("slow got %q, want first", p.Payload)
	}

	runtime.KeepAlive(hog)
	waitFor(t, "the pressure to end", func() bool {
		runtime.GC()
		return !srv.Stats().MemoryPressure
	})
	connect("after", packets.V311)
	if got := srv.Stats().MemoryPressureEvents; got != 1 {
		t.Errorf("memory pressure events = %d, want 1", got)
	}
}

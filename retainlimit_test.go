package mqttd_test

import (
	"bytes"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"mqttd"
	"mqttd/packets"
)

// TestRetainedLimits checks the retained store's bounds at their edge: at
// the count limit a new topic is refused while replacing one is not; a
// message that would pass the byte limit is refused; clearing makes room.
// A 5.0 QoS 1 publisher is told 0x97 and its message is not published; a
// 3.1.1 publisher's message still reaches the subscribers but is not
// kept. Each refusal is counted.
func TestRetainedLimits(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv, addr := startServer(t, mqttd.Options{Registerer: reg,
		Limits: mqttd.Limits{MaxRetained: 2, MaxRetainedBytes: 1000}})
	live := watchTopic(t, addr, "r/#")
	v3 := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "v3", CleanStart: true})
	v5 := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "v5", CleanStart: true})
	publish := func(rc *rawConn, topic string, payload []byte) packets.ReasonCode {
		t.Helper()
		rc.send(&packets.Publish{Topic: topic, QoS: 1, PacketID: 1, Retain: true, Payload: payload})
		ack, ok := rc.read().(*packets.Puback)
		if !ok {
			t.Fatalf("no PUBACK for %s", topic)
		}
		return ack.ReasonCode
	}
	retainedNow := func() []string {
		t.Helper()
		rc := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "probe", CleanStart: true})
		defer rc.nc.Close()
		subscribe(rc, packets.Subscription{Filter: "r/#"})
		var topics []string
		for _, p := range rc.ping() {
			topics = append(topics, p.(*packets.Publish).Topic)
		}
		return topics
	}

	publish(v3, "r/1", []byte("one"))
	publish(v3, "r/2", []byte("two"))
	if code := publish(v5, "r/3", []byte("three")); code != packets.QuotaExceeded {
		t.Errorf("5.0 retained message over the count limit: %#x, want 0x97", byte(code))
	}
	if code := publish(v3, "r/3", []byte("three")); code != packets.Success {
		t.Errorf("3.1.1: %#x, want an acknowledgement", byte(code))
	}
	if code := publish(v5, "r/1", []byte("uno")); code != packets.Success {
		t.Errorf("replacing at the count limit: %#x, want success", byte(code))
	}
	if code := publish(v5, "r/2", bytes.Repeat([]byte("x"), 1000)); code != packets.QuotaExceeded {
		t.Errorf("5.0 retained message over the byte limit: %#x, want 0x97", byte(code))
	}
	for _, want := range []string{"r/1", "r/2", "r/3", "r/1"} { // the refused 5.0 ones never came
		if p := expectPublish(live, want); want == "r/1" && len(p.Payload) == 0 {
			t.Errorf("live delivery of %s is empty", want)
		}
	}
	if got := retainedNow(); len(got) != 2 {
		t.Errorf("retained topics %v, want r/1 and r/2", got)
	}
	if n := metricValue(t, reg, "mqttd_retained_refused_total"); n != 3 {
		t.Errorf("mqttd_retained_refused_total = %v, want 3", n)
	}
	want := int64(len("r/1") + len("uno") + len("r/2") + len("two"))
	if st := srv.Stats(); st.Retained != 2 || st.RetainedBytes != want {
		t.Errorf("Stats: %d retained of %d bytes, want 2 of %d", st.Retained, st.RetainedBytes, want)
	}

	publish(v3, "r/2", nil) // clear
	if code := publish(v5, "r/3", []byte("three")); code != packets.Success {
		t.Errorf("after a clear: %#x, want success", byte(code))
	}
	if got := retainedNow(); len(got) != 2 {
		t.Errorf("retained topics %v after the clear, want r/1 and r/3", got)
	}
}

package mqttd_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mqttd"
	"mqttd/packets"
)

func TestRetainedSetReplaceClear(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, mqttd.Options{})
	pub := pahoConnect(t, addr, "pub", nil)
	wait(t, pub.Publish("home/temp", 1, true, "20"))
	wait(t, pub.Publish("home/temp", 1, true, "21")) // replaces
	wait(t, pub.Publish("home/hum", 1, true, "40"))
	wait(t, pub.Publish("home/hum", 1, true, "")) // clears [MQTT-3.3.1-10]

	sub := connectRaw(t, addr, &packets.Connect{ClientID: "sub", CleanStart: true})
	sub.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "home/#", Options: packets.SubOptions{QoS: 1}}}})
	if ack, ok := sub.read().(*packets.Suback); !ok || ack.ReasonCodes[0] != 1 {
		t.Fatalf("SUBACK: %+v", ack)
	}
	got := sub.ping()
	if len(got) != 1 {
		t.Fatalf("got %d retained messages, want exactly home/temp: %+v", len(got), got)
	}
	p := got[0].(*packets.Publish)
	if p.Topic != "home/temp" || string(p.Payload) != "21" || !p.Retain || p.QoS != 1 {
		t.Errorf("retained delivery %+v: want home/temp=21 with retain set at QoS 1", p)
	}
	sub.send(&packets.Puback{PacketID: p.PacketID})

	// A live publish to a subscribed topic carries retain 0 [MQTT-3.3.1-9].
	wait(t, pub.Publish("home/temp", 0, true, "22"))
	live := sub.read().(*packets.Publish)
	if live.Retain || string(live.Payload) != "22" {
		t.Errorf("live delivery %+v: want payload 22 with retain 0", live)
	}
}

// TestRetainedLimits checks the retained store's bounds at their edge: at
// the count limit a new topic is refused while replacing one is not; a
// message that would pass the byte limit is refused; clearing makes room.
// A 5.0 QoS 1 publisher is told 0x97 and its message is not published; a
// 3.1.1 publisher's message still reaches the subscribers but is not
// kept. Each refusal is counted.
func TestRetainedLimits(t *testing.T) {
	t.Parallel()
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

// TestRetainedPerSubscribeBound checks that one SUBSCRIBE is sent at most
// what the session can hold (limits.max_inflight + limits.max_queued) of
// retained messages, however many of its filters match how many: the
// CPU a SUBSCRIBE costs is bounded with them. Each filter cut short is
// counted.
func TestRetainedPerSubscribeBound(t *testing.T) {
	t.Parallel()
	const inflight, queued, stored = 5, 10, 40
	srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxInflight: inflight, MaxQueued: queued}})
	pub := connectRaw(t, addr, &packets.Connect{ClientID: "pub", CleanStart: true})
	for i := range stored {
		pub.send(&packets.Publish{Topic: fmt.Sprintf("r/%d", i), Retain: true, Payload: []byte("x")})
	}
	waitFor(t, "the retained messages", func() bool { return srv.Stats().Retained == stored })

	sub := connectRaw(t, addr, &packets.Connect{ClientID: "sub", CleanStart: true})
	if codes := subscribe(sub, packets.Subscription{Filter: "r/#"}, packets.Subscription{Filter: "+/+"}); codes[0] != 0 || codes[1] != 0 {
		t.Fatalf("SUBACK %v", codes)
	}
	got := sub.ping()
	if len(got) != inflight+queued {
		t.Errorf("%d retained messages sent, want %d", len(got), inflight+queued)
	}
	for _, p := range got {
		if pub, ok := p.(*packets.Publish); !ok || !pub.Retain {
			t.Fatalf("got %T %+v, want a retained PUBLISH", p, p)
		}
	}
	if n := srv.Stats().RetainedTruncated; n != 2 {
		t.Errorf("retained truncated = %d, want 2 (both filters)", n)
	}

	few := connectRaw(t, addr, &packets.Connect{ClientID: "few", CleanStart: true})
	subscribe(few, packets.Subscription{Filter: "r/1"}, packets.Subscription{Filter: "r/+/x"})
	if got := few.ping(); len(got) != 1 {
		t.Errorf("%d retained messages for r/1, want 1", len(got))
	}
	if n := srv.Stats().RetainedTruncated; n != 2 {
		t.Errorf("retained truncated = %d after a SUBSCRIBE within the bound, want still 2", n)
	}
}

// retainedSentTo subscribes rc to filter and returns how many retained
// messages it was sent for it.
func retainedSentTo(rc *rawConn, filter string) int {
	rc.t.Helper()
	if codes := subscribe(rc, packets.Subscription{Filter: filter}); codes[0] != 0 {
		rc.t.Fatalf("SUBACK %v", codes)
	}
	n := 0
	for _, p := range rc.ping() {
		if pub, ok := p.(*packets.Publish); ok && pub.Retain {
			n++
		}
	}
	rc.send(&packets.Unsubscribe{PacketID: 2, Filters: []string{filter}})
	if _, ok := rc.read().(*packets.Unsuback); !ok {
		rc.t.Fatal("no UNSUBACK")
	}
	return n
}

// TestRetainedSendAllowance checks the bound over time on the retained
// messages sent to a client (limits.retained_send_refill): a client is
// sent one session's worth (limits.max_inflight + limits.max_queued), then
// nothing more until it comes back, and reconnecting under the same
// client id does not start it afresh; another client id has its own.
func TestRetainedSendAllowance(t *testing.T) {
	const inflight, queued, stored = 5, 10, 12
	srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxInflight: inflight, MaxQueued: queued,
		RetainedSendRefill: time.Hour}})
	pub := connectRaw(t, addr, &packets.Connect{ClientID: "pub", CleanStart: true})
	for i := range stored {
		pub.send(&packets.Publish{Topic: fmt.Sprintf("r/%d", i), Retain: true, Payload: []byte("x")})
	}
	waitFor(t, "the retained messages", func() bool { return srv.Stats().Retained == stored })

	sub := connectRaw(t, addr, &packets.Connect{ClientID: "dashboard", CleanStart: true})
	if n := retainedSentTo(sub, "#"); n != stored {
		t.Fatalf("first SUBSCRIBE: %d retained messages, want all %d", n, stored)
	}
	if n := retainedSentTo(sub, "#"); n != inflight+queued-stored {
		t.Errorf("second SUBSCRIBE: %d retained messages, want the %d left of the allowance", n, inflight+queued-stored)
	}
	if n := retainedSentTo(sub, "r/1"); n != 0 {
		t.Errorf("third SUBSCRIBE: %d retained messages, want none", n)
	}
	if n := srv.Stats().RetainedSendsLimited; n != 2 {
		t.Errorf("retained sends limited = %d, want 2", n)
	}
	if n := srv.Stats().RetainedTruncated; n != 0 {
		t.Errorf("retained truncated = %d, want 0: the allowance cut them, not one SUBSCRIBE", n)
	}
	sub.send(&packets.Disconnect{})
	sub.expectClosed()

	again := connectRaw(t, addr, &packets.Connect{ClientID: "dashboard", CleanStart: true})
	if n := retainedSentTo(again, "#"); n != 0 {
		t.Errorf("after reconnecting under the same client id: %d retained messages, want none", n)
	}
	other := connectRaw(t, addr, &packets.Connect{ClientID: "other", CleanStart: true})
	if n := retainedSentTo(other, "#"); n != stored {
		t.Errorf("another client id: %d retained messages, want all %d", n, stored)
	}
}

// TestRetainedSendAllowanceRefills checks that the allowance comes back
// over limits.retained_send_refill: the loop polls, with a deadline, until
// a SUBSCRIBE is sent retained messages again.
func TestRetainedSendAllowanceRefills(t *testing.T) {
	const stored = 20
	srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxInflight: 5, MaxQueued: 5,
		RetainedSendRefill: 200 * time.Millisecond}})
	pub := connectRaw(t, addr, &packets.Connect{ClientID: "pub", CleanStart: true})
	for i := range stored {
		pub.send(&packets.Publish{Topic: fmt.Sprintf("r/%d", i), Retain: true, Payload: []byte("x")})
	}
	waitFor(t, "the retained messages", func() bool { return srv.Stats().Retained == stored })
	sub := connectRaw(t, addr, &packets.Connect{ClientID: "dashboard", CleanStart: true})
	if n := retainedSentTo(sub, "#"); n != 10 {
		t.Fatalf("first SUBSCRIBE: %d retained messages, want the allowance, 10", n)
	}
	total := 0
	waitFor(t, "the allowance to come back", func() bool {
		n := retainedSentTo(sub, "#")
		if n > 10 {
			t.Fatalf("%d retained messages for one SUBSCRIBE, over the allowance", n)
		}
		total += n
		return total >= 10
	})
}

// TestRepeatedFilterSendsRetainedOnce checks that a filter listed many
// times in one SUBSCRIBE gets one SUBACK code per listing but its
// retained messages once: each listing replaces the one before it.
func TestRepeatedFilterSendsRetainedOnce(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, mqttd.Options{})
	pub := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "pub", CleanStart: true})
	for i := range 3 {
		pub.send(&packets.Publish{Topic: fmt.Sprintf("r/%d", i), Retain: true, Payload: []byte("x")})
	}
	pub.ping()
	rc := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "greedy", CleanStart: true})
	subs := make([]packets.Subscription, 50)
	for i := range subs {
		subs[i] = packets.Subscription{Filter: "#"}
	}
	if codes := subscribe(rc, subs...); len(codes) != 50 {
		t.Fatalf("%d SUBACK codes for 50 filters", len(codes))
	}
	if got := rc.ping(); len(got) != 3 {
		t.Errorf("%d retained messages sent, want 3", len(got))
	}
}

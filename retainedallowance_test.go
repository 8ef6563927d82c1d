package mqttd_test

import (
	"fmt"
	"testing"
	"time"

	"mqttd"
	"mqttd/packets"
)

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

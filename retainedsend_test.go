package mqttd_test

import (
	"fmt"
	"testing"

	"mqttd"
	"mqttd/packets"
)

// TestRetainedPerSubscribeBound checks that one SUBSCRIBE is sent at most
// what the session can hold (limits.max_inflight + limits.max_queued) of
// retained messages, however many of its filters match how many: the
// CPU a SUBSCRIBE costs is bounded with them. Each filter cut short is
// counted.
func TestRetainedPerSubscribeBound(t *testing.T) {
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

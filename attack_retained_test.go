package mqttd_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"mqttd"
	"mqttd/packets"
)

// retainedResidue is the most of the heap growth that may stay once the
// retained messages are cleared: what the store and the reader keep for
// the next burst, not a copy of the burst.
const retainedResidue = 8 << 20

// TestAttackRetainedStoreDurable is TestAttackRetainedStore with the
// bbolt store the mqttd command keeps by default (a DataDir, durability
// sync): 200 retained messages of 1 MiB, then cleared. The store's log
// applier read its whole log into one buffer, kept up to 16 MiB of it,
// and gave bbolt the log in one transaction: the heap stayed 10 MB up
// after the messages were cleared.
func TestAttackRetainedStoreDurable(t *testing.T) {
	const messages = 200
	start := time.Now()
	srv, addr := startServer(t, mqttd.Options{DataDir: t.TempDir()})
	payload, buf := payloadOf(bigPayload), encodeBuf()
	heap := attackBaseline(t, addr)
	base := srv.Stats()

	pub := newPublisher(t, addr, packets.V5, "retainer", buf)
	codes := map[packets.ReasonCode]int{}
	for i := range messages {
		code := pub.publish(&packets.Publish{Topic: fmt.Sprintf("big/%03d", i), QoS: 1, Retain: true, Payload: payload})
		switch code {
		case packets.Success, packets.NoMatchingSubscribers, packets.QuotaExceeded:
			codes[code]++
		default:
			t.Fatalf("retained message %d: PUBACK %#x", i, byte(code))
		}
	}
	st := srv.Stats()
	t.Logf("at the peak: %d retained (%.1f MB counted), %d refused; PUBACK codes %v",
		st.Retained, mb(st.RetainedBytes), st.RetainedRefused-base.RetainedRefused, codes)
	heap.check("200 retained messages of 1 MiB, bbolt store", attackHeapBound)

	ordinaryExchange(t, addr, "during")
	for i := range messages {
		pub.publish(&packets.Publish{Topic: fmt.Sprintf("big/%03d", i), QoS: 1, Retain: true})
	}
	pub.rc.nc.Close()
	waitConnections(t, srv, base.Connections)
	if st := srv.Stats(); st.Retained != base.Retained {
		t.Errorf("%d retained after clearing, want %d", st.Retained, base.Retained)
	}
	ordinaryExchange(t, addr, "after")
	heap.check("after the retained messages were cleared, bbolt store", retainedResidue)
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
	runtime.KeepAlive(payload)
	runtime.KeepAlive(pub)
}

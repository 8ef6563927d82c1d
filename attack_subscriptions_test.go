package mqttd_test

import (
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mqttd"
	"mqttd/packets"
	"mqttd/session"
)

// The attacks here grow what subscriptions make the broker hold: many
// overlapping filters of one client (a subscription identifier per match
// in every queued copy, and CPU on every publish), long filters, and
// offline sessions that share one topic (an entry per session per
// message). Each runs at the default settings and checks the heap, as
// attack_test.go's do.

// overlappingFilters returns n distinct filters that all match topic
// o/o/.../o of levels levels: each level is o or +.
func overlappingFilters(n, levels int) (topic string, filters []string) {
	topic = strings.TrimSuffix(strings.Repeat("o/", levels), "/")
	for i := range n {
		l := make([]string, levels)
		for j := range l {
			l[j] = "o"
			if i>>j&1 == 1 {
				l[j] = "+"
			}
		}
		filters = append(filters, strings.Join(l, "/"))
	}
	return topic, filters
}

// subscribeAll sends one SUBSCRIBE per filter, each with the subscription
// identifier i+1 in 5.0, in one write, and returns the SUBACK codes.
func subscribeAll(t *testing.T, rc *rawConn, filters []string) []packets.ReasonCode {
	t.Helper()
	var out []byte
	for i, f := range filters {
		p := &packets.Subscribe{PacketID: uint16(i%65535 + 1), Subscriptions: []packets.Subscription{{Filter: f, Options: packets.SubOptions{QoS: 1}}}}
		if rc.v == packets.V5 {
			p.Properties.SubscriptionIDs = []uint32{uint32(i + 1)}
			p.Properties.Set(packets.PropSubscriptionID)
		}
		var err error
		if out, err = p.Append(out, rc.v); err != nil {
			t.Fatal(err)
		}
	}
	rc.write(out)
	codes := make([]packets.ReasonCode, 0, len(filters))
	for range filters {
		ack, ok := rc.read().(*packets.Suback)
		if !ok || len(ack.ReasonCodes) != 1 {
			t.Fatalf("got %+v, want a SUBACK for one filter", ack)
		}
		codes = append(codes, ack.ReasonCodes[0])
	}
	return codes
}

// publishAll sends n QoS 1 PUBLISHes of payload to topic in one write
// and reads their PUBACKs.
func publishAll(t *testing.T, pub *rawPublisher, topic string, payload []byte, n int) {
	t.Helper()
	var out []byte
	for i := range n {
		out, _ = (&packets.Publish{Topic: topic, QoS: 1, PacketID: uint16(i%65535 + 1), Payload: payload}).Append(out, pub.rc.v)
	}
	pub.rc.write(out)
	for i := range n {
		if ack, ok := pub.rc.read().(*packets.Puback); !ok || ack.PacketID != uint16(i%65535+1) {
			t.Fatalf("publish %d: got %+v, want its PUBACK", i+1, ack)
		}
	}
}

// TestAttackOverlappingSubscriptions: one 5.0 session with 10,000
// filters that all match one topic, each with a subscription identifier,
// offline, and 2,000 one-byte messages on that topic. Every match would
// add its identifier to every queued copy (40 KB a copy) and its share of
// CPU to every publish: the broker takes only
// limits.max_overlapping_subscriptions of them, and the copies' identifiers
// count against the queue bounds.
func TestAttackOverlappingSubscriptions(t *testing.T) {
	const subscriptions, messages = 10000, 2000
	srv, addr := startServer(t, mqttd.Options{})
	topic, filters := overlappingFilters(subscriptions, 14)
	heap := attackBaseline(t, addr)
	base := srv.Stats()

	cp := &packets.Connect{ClientID: "overlapper"}
	cp.Properties.SessionExpiry = 3600
	cp.Properties.Set(packets.PropSessionExpiry)
	victim := connectAs(t, addr, packets.V5, cp)
	granted := 0
	for _, code := range subscribeAll(t, victim, filters) {
		switch code {
		case 1:
			granted++
		case packets.QuotaExceeded:
		default:
			t.Fatalf("SUBACK %#x, want 1 or 0x97", byte(code))
		}
	}
	// The first filter has no wildcard: a topic matches one such filter
	// at most, besides the wildcard ones.
	if granted != mqttd.DefaultMaxOverlappingSubscriptions+1 {
		t.Errorf("%d of %d overlapping filters granted, want limits.max_overlapping_subscriptions and one, %d",
			granted, subscriptions, mqttd.DefaultMaxOverlappingSubscriptions+1)
	}
	if got := srv.Stats().SubscriptionsRefused - base.SubscriptionsRefused; got != uint64(subscriptions-granted) {
		t.Errorf("mqttd_subscriptions_refused_total rose by %d, want %d", got, subscriptions-granted)
	}
	victim.send(&packets.Disconnect{})
	victim.expectClosed()

	pub := newPublisher(t, addr, packets.V311, "flooder", nil)
	publishAll(t, pub, topic, []byte("x"), messages)
	st := srv.Stats()
	t.Logf("at the peak: %d queued (%.1f MB counted), %d dropped as queue_full", st.Queued, mb(st.QueuedBytes),
		st.Dropped["queue_full"]-base.Dropped["queue_full"])
	heap.check("10,000 overlapping subscriptions with identifiers, 2,000 messages", attackHeapBound)
	ordinaryExchange(t, addr, "during")

	back := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "overlapper", CleanStart: false})
	p, ok := back.read().(*packets.Publish)
	if !ok || p.Topic != topic || len(p.Properties.SubscriptionIDs) != granted {
		t.Fatalf("the first queued message: %+v, want one on %s with %d subscription identifiers", p, topic, granted)
	}
	back.nc.Close()
	pub.rc.nc.Close()
	waitConnections(t, srv, base.Connections)
	ordinaryExchange(t, addr, "after")
}

// TestAttackSubscriptionBytes: filters of the longest length the
// protocol allows, then clients each subscribing hundreds of filters of
// the most levels the broker takes, each under a first level of its own,
// so that every level is a trie node of its own: some 17 KB of heap for a
// filter of 260 bytes. What one client's subscriptions and all clients'
// hold is bounded by what they cost, not only by their count.
func TestAttackSubscriptionBytes(t *testing.T) {
	const clients, each = 8, 600
	srv, addr := startServer(t, mqttd.Options{})
	heap := attackBaseline(t, addr)
	base := srv.Stats()

	rc := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "longest", CleanStart: true})
	longest := strings.Repeat("l", 65000)
	if codes := subscribeAll(t, rc, []string{longest + "/1", longest + "/2"}); codes[0] != packets.TopicFilterInvalid || codes[1] != packets.TopicFilterInvalid {
		t.Errorf("65,000-byte filters: SUBACK %#x, want 0x8F (limits.max_filter_length)", codes)
	}
	rc.nc.Close()

	deep := strings.Repeat("/d", mqttd.DefaultMaxTopicLevels-1)
	cost := session.SubscriptionCost("0-000" + deep)
	var mu sync.Mutex
	var granted []int
	var wg sync.WaitGroup
	conns := make([]net.Conn, clients)
	for c := range clients {
		rc := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: fmt.Sprintf("deep-%d", c), CleanStart: true})
		conns[c] = rc.nc
		filters := make([]string, each)
		for i := range filters {
			filters[i] = fmt.Sprintf("%d-%03d%s", c, i, deep)
		}
		wg.Go(func() {
			n := 0
			for _, code := range subscribeAllNoFatal(rc, filters) {
				if code == 1 {
					n++
				}
			}
			mu.Lock()
			granted = append(granted, n)
			mu.Unlock()
		})
		if c == 0 {
			// The first alone: its own bound bites.
			wg.Wait()
			if max := mqttd.DefaultMaxSubscriptionBytesPerClient / cost; int64(granted[0]) != max {
				t.Errorf("a client alone was granted %d filters costing %d each, want limits.max_subscription_bytes_per_client's worth, %d",
					granted[0], cost, max)
			}
		}
	}
	wg.Wait()
	st := srv.Stats()
	t.Logf("granted per client %v; %d subscriptions costing %.1f MB counted", granted, st.Subscriptions-base.Subscriptions, mb(st.SubscriptionBytes))
	if len(granted) != clients {
		t.Fatalf("%d of %d clients got their SUBACKs", len(granted), clients)
	}
	limit := mqttd.DeriveFromMemory(mqttd.DefaultMaxMemory()).MaxSubscriptionBytesTotal
	if st.SubscriptionBytes > limit+limit/8 {
		t.Errorf("the subscriptions cost %d bytes together, past limits.max_subscription_bytes_total (%d) and its reserve", st.SubscriptionBytes, limit)
	}
	heap.check(fmt.Sprintf("%d clients x %d filters of %d levels", clients, each, mqttd.DefaultMaxTopicLevels), attackHeapBound)
	ordinaryExchange(t, addr, "during")

	// Sessions taken one after another for the floor past the total, which
	// their subscriptions outlive: the reserve bounds them.
	const floors = 300
	refused := 0
	for i := range floors {
		cp := &packets.Connect{ClientID: fmt.Sprintf("floor-%d", i)}
		cp.Properties.SessionExpiry = 3600
		cp.Properties.Set(packets.PropSessionExpiry)
		rc := connectAs(t, addr, packets.V5, cp)
		if codes := subscribeAll(t, rc, []string{fmt.Sprintf("f%d%s", i, deep)}); codes[0] != 1 {
			refused++
		}
		rc.nc.Close()
	}
	if st := srv.Stats(); refused == 0 || st.SubscriptionBytes > limit+limit/8 {
		t.Errorf("%d sessions took a floor's filter each past the total: %d refused, %d bytes held; want some refused, at most %d",
			floors, refused, st.SubscriptionBytes, limit+limit/8)
	}
	closeAll(conns)
	for i := range floors {
		rc := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: fmt.Sprintf("floor-%d", i), CleanStart: true})
		rc.send(&packets.Disconnect{})
		rc.expectClosed()
	}
	waitFor(t, "the subscriptions dropped", func() bool {
		return srv.Stats().SubscriptionBytes <= base.SubscriptionBytes
	})
	ordinaryExchange(t, addr, "after")
}

// subscribeAllNoFatal is subscribeAll for a worker goroutine: it returns
// what it read, which a failure leaves short.
func subscribeAllNoFatal(rc *rawConn, filters []string) []packets.ReasonCode {
	var out []byte
	for i, f := range filters {
		out, _ = (&packets.Subscribe{PacketID: uint16(i%65535 + 1), Subscriptions: []packets.Subscription{{Filter: f, Options: packets.SubOptions{QoS: 1}}}}).Append(out, rc.v)
	}
	if _, err := rc.nc.Write(out); err != nil {
		return nil
	}
	var codes []packets.ReasonCode
	for range filters {
		p, err := rc.tryRead()
		ack, ok := p.(*packets.Suback)
		if err != nil || !ok || len(ack.ReasonCodes) != 1 {
			return codes
		}
		codes = append(codes, ack.ReasonCodes[0])
	}
	return codes
}

// TestAttackOfflineFanOut: 500 offline persistent sessions subscribed to
// one topic and 2,000 one-byte QoS 1 messages on it. A message is held
// once, but every session holds an entry for it: the entries count
// against the queue bounds.
func TestAttackOfflineFanOut(t *testing.T) {
	const sessions, messages = 500, 2000
	start := time.Now()
	srv, addr := startServer(t, mqttd.Options{})
	heap := attackBaseline(t, addr)
	base := srv.Stats()
	offlineSessions(t, srv, addr, "fan", "fan/#", sessions, 3600)

	pub := newPublisher(t, addr, packets.V311, "fanner", nil)
	for sent := 0; sent < messages; sent += 100 {
		publishAll(t, pub, "fan/x", []byte("x"), 100)
	}
	st := srv.Stats()
	t.Logf("at the peak (%v): %d entries queued (%.1f MB counted), %d dropped as queue_full",
		time.Since(start).Round(time.Millisecond), st.Queued, mb(st.QueuedBytes), st.Dropped["queue_full"]-base.Dropped["queue_full"])
	if st.Dropped["queue_full"] == base.Dropped["queue_full"] {
		t.Errorf("all %d x %d entries were queued: the entries are not bounded", sessions, messages)
	}
	heap.check(fmt.Sprintf("%d offline sessions x %d messages", sessions, messages), attackHeapBound)
	ordinaryExchange(t, addr, "during")
	pub.rc.nc.Close()
	ordinaryExchange(t, addr, "after")
	runtime.KeepAlive(pub)
}

// TestStoreBackpressurePerMessage: one write of 200 messages for 200
// stored sessions adds 80,000 operations for the store, most of them
// taken by one read. The reader waits for a commit once more than 16,384
// wait, between one message and the next, not only at the end of its
// read: no commit holds much more.
func TestStoreBackpressurePerMessage(t *testing.T) {
	const sessions, messages = 200, 200
	reg := prometheus.NewRegistry()
	srv, addr := startServer(t, mqttd.Options{DataDir: t.TempDir(), Registerer: reg})
	offlineSessions(t, srv, addr, "stored", "stored/#", sessions, 3600)
	count0, _, before := histogramOf(t, reg, "mqttd_store_commit_operations")

	pub := newPublisher(t, addr, packets.V311, "fanner", nil)
	publishAll(t, pub, "stored/x", []byte("x"), messages)
	count, _, after := histogramOf(t, reg, "mqttd_store_commit_operations")
	if big := (count - after[32768]) - (count0 - before[32768]); big != 0 {
		t.Errorf("%d commits held more than 32,768 operations: the reader did not wait between messages", big)
	}
	if st := srv.Stats(); st.Queued != sessions*messages {
		t.Errorf("%d entries queued, want %d", st.Queued, sessions*messages)
	}
}

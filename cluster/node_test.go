package cluster

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"mqttd/internal/natstest"
	"mqttd/internal/testutil"
)

func testLogger(t testing.TB) zerolog.Logger {
	t.Helper()
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
}

// recorder is a node's deliver: it keeps what arrives, in order (a
// copy: the node reuses m).
type recorder struct{ ch chan *Message }

func newRecorder() *recorder { return &recorder{ch: make(chan *Message, 4096)} }

func (r *recorder) deliver(m *Message) {
	c := *m
	r.ch <- &c
}

// until returns the messages received up to and including the first on
// topic marker, skipping those on topics starting with one of skip
// (probes, which may arrive more than once), failing the test after 10 s.
func (r *recorder) until(t *testing.T, marker string, skip ...string) []*Message {
	t.Helper()
	var got []*Message
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-r.ch:
			if slices.ContainsFunc(skip, func(p string) bool { return p != "" && strings.HasPrefix(m.Topic, p) }) {
				continue
			}
			got = append(got, m)
			if m.Topic == marker {
				return got
			}
		case <-deadline:
			t.Fatalf("no message on %s within 10s; got %s", marker, topics(got))
		}
	}
}

func topics(ms []*Message) string {
	var s []string
	for _, m := range ms {
		s = append(s, m.Topic)
	}
	return strings.Join(s, " ")
}

// startNode starts a node of cluster "c1" on the given NATS URLs and
// closes it at the test's end.
func startNode(t *testing.T, name string, r *recorder, log zerolog.Logger, urls ...string) *Node {
	t.Helper()
	n, err := Start(Config{Name: "c1", NodeName: name, NATS: NATSConfig{URL: strings.Join(urls, ",")}}, log, r.deliver)
	if err != nil {
		t.Fatal(err)
	}
	// Its subscriptions are at its server before a test's own connection
	// publishes to it: two connections' packets are not ordered.
	if err := n.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("Close %s: %v", name, err)
		}
	})
	return n
}

// logOnFailure logs, when the test has failed, what the servers and the
// nodes counted.
func logOnFailure(t *testing.T, s *natstest.Servers, nodes ...*Node) {
	t.Helper()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for i := range len(s.URLs()) {
			v, _ := s.Server(i).Varz(nil)
			t.Logf("server %d: routes %d, messages in %d out %d", i, s.Server(i).NumRoutes(), v.InMsgs, v.OutMsgs)
		}
		for _, n := range nodes {
			t.Logf("%s: %+v", n.Name(), n.Stats())
		}
	})
}

// probe publishes on topic from node from until to has received one: a
// node's interest is then on from's server. Call it before anything
// else is published to to: it discards what to receives.
func probe(t *testing.T, from *Node, topic string, to *recorder) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := from.Publish(&Message{Topic: topic}); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case m := <-to.ch:
				if m.Topic == topic {
					return
				}
				continue
			case <-tick.C:
			case <-deadline:
				t.Fatalf("no probe on %s from %s within 10s", topic, from.Name())
			}
			break
		}
	}
}

// routed reports whether n's route table sends topic to node peer.
func routed(n *Node, topic, peer string) bool {
	rt := &n.routes
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	var dst peerSet
	rt.trie.match(topic, &dst)
	dst.union(&rt.everything)
	p := rt.peers[peer]
	return p != nil && dst.has(p.slot)
}

// waitRoute waits until n's route table sends topic to node peer (or
// not), as it does once peer's Want (or Unwant) has reached n.
func waitRoute(t *testing.T, n *Node, topic, peer string, want bool) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("route of %s to %s %v on %s", truncate(topic, 80), peer, want, n.Name()), func() bool {
		return routed(n, topic, peer) == want
	})
}

func TestCrossNodeDelivery(t *testing.T) {
	s := natstest.Start(t, 3)
	urls := s.URLs()
	ra, rb, rc := newRecorder(), newRecorder(), newRecorder()
	a := startNode(t, "A", ra, testLogger(t), urls[0])
	b := startNode(t, "B", rb, testLogger(t), urls[1])
	c := startNode(t, "C", rc, testLogger(t), urls[2])
	a.Want("#")
	c.Want("a/+/c")
	c.Want("probe/C")
	// B's filters overlap: each message must still reach B once.
	for _, f := range []string{"#", "a/#", "a/+/c", "$share/g/a/+/c", "$SYS/#", "probe/B"} {
		b.Want(f)
	}
	logOnFailure(t, s, a, b, c)
	// Interest crosses a route in the order of the node's SUBs: a probe
	// on the last one received means all are there. B's "#" comes first,
	// and with it B wants every topic.
	probe(t, a, "probe/C", rc)
	probe(t, a, "probe/B", rb)
	probe(t, b, "probe/A", ra)

	outBefore := a.Stats().MessagesOut
	sent := &Message{Topic: "a/b/c", Payload: []byte("hello"), QoS: 2, Retain: true, Origin: "pub-1", Properties: fullProps()}
	for _, m := range []*Message{sent, {Topic: "a/b/d"}, {Topic: "a"}, {Topic: "x/y"}, {Topic: "$SYS/x"}, {Topic: "a/z/c"}} {
		if err := a.Publish(m); err != nil {
			t.Fatal(err)
		}
	}
	gotC := rc.until(t, "a/z/c", "probe/")
	if topics(gotC) != "a/b/c a/z/c" {
		t.Fatalf("C got %s, want a/b/c a/z/c", topics(gotC))
	}
	if m := gotC[0]; m.QoS != 2 || !m.Retain || m.Origin != "pub-1" || string(m.Payload) != "hello" ||
		!reflect.DeepEqual(m.Properties, fullProps()) {
		t.Fatalf("C got %+v with properties %+v", m, m.Properties)
	}
	if gotB := rb.until(t, "a/z/c", "probe/"); topics(gotB) != "a/b/c a/b/d a x/y a/z/c" {
		t.Fatalf("B got %s, want a/b/c a/b/d a x/y a/z/c, each once", topics(gotB))
	}
	// A wants everything, but never gets its own: the first message it
	// gets is B's marker.
	if err := b.Publish(&Message{Topic: "from/b"}); err != nil {
		t.Fatal(err)
	}
	if gotA := ra.until(t, "from/b", "probe/"); topics(gotA) != "from/b" {
		t.Fatalf("A got %s, want only B's from/b", topics(gotA))
	}
	// A holds B's "#", "a/#", "a/+/c" (wanted twice), probe/B and C's
	// two.
	if st := a.Stats(); !st.Connected || st.MessagesOut != outBefore+5 || st.Filters != 1 || st.Routes != 6 || st.Peers != 2 {
		t.Fatalf("A's stats %+v, %d out before", st, outBefore)
	}
	if st := b.Stats(); st.MessagesIn < 5 || st.Filters != 4 || st.Malformed != 0 || st.BatchesIn == 0 {
		t.Fatalf("B's stats %+v", st)
	}
}

func TestUnwantStopsDelivery(t *testing.T) {
	s := natstest.Start(t, 2)
	urls := s.URLs()
	rp, rs := newRecorder(), newRecorder()
	p := startNode(t, "P", rp, testLogger(t), urls[0])
	n := startNode(t, "S", rs, testLogger(t), urls[1])
	n.Want("u/+")
	n.Want("u/+")
	n.Want("keep")
	n.Unwant("never/wanted")
	waitRoute(t, p, "keep", "S", true)
	publish := func(topic string) {
		t.Helper()
		if err := p.Publish(&Message{Topic: topic}); err != nil {
			t.Fatal(err)
		}
	}
	// One of two subscriptions gone: still wanted.
	n.Unwant("u/+")
	publish("u/1")
	publish("keep")
	if got := rs.until(t, "keep", ""); topics(got) != "u/1 keep" {
		t.Fatalf("after one Unwant of two got %s, want u/1 keep", topics(got))
	}
	n.Unwant("u/+")
	if st := n.Stats(); st.Filters != 1 {
		t.Fatalf("after the last Unwant: %+v", st)
	}
	waitRoute(t, p, "u/1", "S", false)
	publish("u/2")
	publish("keep")
	if got := rs.until(t, "keep", ""); topics(got) != "keep" {
		t.Fatalf("after the last Unwant got %s, want keep only", topics(got))
	}
	n.Unwant("u/+")
	if st := n.Stats(); st.Filters != 1 {
		t.Fatalf("an extra Unwant changed the stats: %+v", st)
	}
}

func TestReconnectAfterServerLoss(t *testing.T) {
	s := natstest.Start(t, 3)
	urls := s.URLs()
	var logs testutil.LockedBuffer
	rr, rp := newRecorder(), newRecorder()
	r := startNode(t, "R", rr, zerolog.New(&logs), urls...)
	r.Want("r/#")
	lost := -1
	for i, u := range urls {
		if u == r.ClientURL() {
			lost = i
		}
	}
	if lost < 0 {
		t.Fatalf("R connected to %q, none of %q", r.ClientURL(), urls)
	}
	p := startNode(t, "P", rp, testLogger(t), urls[(lost+1)%3])
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("R on %s: %+v\nP on %s: %+v", r.ClientURL(), r.Stats(), p.ClientURL(), p.Stats())
		}
	})
	s.Shutdown(lost)
	testutil.WaitFor(t, "R reconnected", func() bool {
		st := r.Stats()
		return st.Connected && st.Reconnects == 1
	})
	if r.ClientURL() == urls[lost] {
		t.Fatalf("R reconnected to the server shut down")
	}
	// Until R's subscriptions are back on the cluster publications are
	// lost: probe until one lands, then what follows must arrive.
	deadline := time.Now().Add(10 * time.Second)
	for probed := false; !probed; {
		if time.Now().After(deadline) {
			t.Fatal("no probe reached R within 10s after its reconnection")
		}
		if err := p.Publish(&Message{Topic: "r/probe"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-rr.ch:
			probed = true
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := p.Publish(&Message{Topic: "r/after", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	rr.until(t, "r/after", "r/probe")
	out := logs.String()
	if l, r := strings.Count(out, "NATS connection lost"), strings.Count(out, "NATS connection restored"); l != 1 || r != 1 {
		t.Fatalf("%d losses and %d recoveries logged, want one each; log:\n%s", l, r, out)
	}
}

func TestPublishBounds(t *testing.T) {
	urls := natstest.Cluster(t, 1)
	n := startNode(t, "N", newRecorder(), testLogger(t), urls[0])
	// A retained message is written to the replicated stream under its
	// subject, which a topic this long cannot have.
	long := strings.Repeat(strings.Repeat("a", 40)+"/", MaxSubjectLen/40)
	if err := n.Publish(&Message{Topic: long + "x", Retain: true}); err != ErrTooLong {
		t.Fatalf("Publish of a %d-byte topic: %v, want ErrTooLong", len(long), err)
	}
	// A message nobody else wants goes nowhere.
	if err := n.Publish(&Message{Topic: long + "y"}); err != nil {
		t.Fatalf("Publish of a topic nobody wants: %v", err)
	}
	n.Want(long + "#")
	if st := n.Stats(); st.TooLong != 1 || st.Filters != 1 {
		t.Fatalf("stats %+v", st)
	}
	big := bytes.Repeat([]byte{1}, OutQueueBytes+1)
	if err := n.Publish(&Message{Topic: "big", Payload: big, Retain: true}); err != ErrQueueFull {
		t.Fatalf("Publish of %d bytes: %v, want ErrQueueFull", len(big), err)
	}
	if err := n.Publish(&Message{Topic: "q", QoS: 3, Retain: true}); err == nil {
		t.Fatal("Publish of QoS 3: no error")
	}
	if st := n.Stats(); st.DroppedOut != 2 || st.MessagesOut != 0 {
		t.Fatalf("stats %+v, want two drops", st)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Publish(&Message{Topic: "a"}); err != ErrClosed {
		t.Fatalf("Publish after Close: %v", err)
	}
	n.Want("after/close")
	if st := n.Stats(); st.Connected || st.Filters != 1 {
		t.Fatalf("Want after Close changed the stats: %+v", st)
	}
}

func TestMalformedFromNetworkDropped(t *testing.T) {
	urls := natstest.Cluster(t, 1)
	r := newRecorder()
	n := startNode(t, "N", r, testLogger(t), urls[0])
	nc, err := nats.Connect(urls[0])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	rec := func(m *Message) []byte {
		t.Helper()
		b, err := appendRecord(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good := rec(&Message{Topic: "m/1", QoS: 1, Origin: "raw"})
	batch := func(parts ...[]byte) []byte { return append([]byte{batchVersion}, bytes.Join(parts, nil)...) }
	for _, data := range [][]byte{
		{},                                    // empty
		{batchVersion},                        // no record
		append([]byte{9}, good...),            // another version
		batch(good[:len(good)-1]),             // truncated
		batch(append([]byte{3}, good[1:]...)), // QoS 3
		batch(rec(&Message{Topic: "a/+"})),    // a wildcard
		batch(good, []byte{0xff}),             // a bad record after a good one: all dropped
	} {
		if err := nc.Publish(batchSubject("c1", "N"), data); err != nil {
			t.Fatal(err)
		}
	}
	for _, data := range [][]byte{
		{}, {routeSummary}, appendRouteMsg(nil, routeMsg{kind: 'x', name: "X"}),
		appendRouteMsg(nil, routeMsg{kind: routeAdd, name: "X", gen: 1, seq: 1, key: routeKey{filter: "a/#/b"}}),
	} {
		if err := nc.Publish(routesSubject("c1"), data); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Publish(batchSubject("c1", "N"), batch(rec(&Message{Topic: "m/ok", QoS: 1, Origin: "raw"}))); err != nil {
		t.Fatal(err)
	}
	got := r.until(t, "m/ok", "")
	if topics(got) != "m/ok" || got[0].Origin != "raw" || got[0].QoS != 1 {
		t.Fatalf("got %s (%+v), want only m/ok", topics(got), got[0])
	}
	testutil.WaitFor(t, "the route messages counted", func() bool { return n.Stats().Malformed == 11 })
	if st := n.Stats(); st.MessagesIn != 1 || st.Peers != 0 {
		t.Fatalf("stats %+v, want 11 malformed, 1 in, no peer", st)
	}
}

// TestLongestSubjectCrosses checks MaxSubjectLen against a NATS server's
// default max_control_line: the longest subject is subscribed and sent
// without the server closing either connection.
func TestLongestSubjectCrosses(t *testing.T) {
	s := natstest.Start(t, 2)
	urls := s.URLs()
	topic := strings.Repeat("a", MaxSubjectLen-len(prefix("c1")))
	if len(Subject("c1", topic)) != MaxSubjectLen {
		t.Fatalf("subject of %d bytes", len(Subject("c1", topic)))
	}
	r := newRecorder()
	p := startNode(t, "P", newRecorder(), testLogger(t), urls[0])
	n := startNode(t, "S", r, testLogger(t), urls[1])
	// A share group's messages travel on their own subjects.
	n.WantShared("g", topic)
	testutil.WaitFor(t, "P knows S's share group", func() bool {
		var dst peerSet
		p.routes.mu.RLock()
		defer p.routes.mu.RUnlock()
		return p.routes.trie.match(topic, &dst)
	})
	waitSubscribers(t, s.Server(0), "g", topic, 1)
	if err := p.Publish(&Message{Topic: topic}); err != nil {
		t.Fatal(err)
	}
	r.until(t, topic, "")
	if p.Stats().Reconnects != 0 || n.Stats().Reconnects != 0 || !p.Stats().Connected || !n.Stats().Connected {
		t.Fatalf("a connection was lost: %+v %+v", p.Stats(), n.Stats())
	}
}

// TestSlowDeliverDropsCounted: what a sender that ignores pauses sends
// past InQueueMessages is dropped, and counted, by the receiver.
func TestSlowDeliverDropsCounted(t *testing.T) {
	s := natstest.Start(t, 1)
	urls := s.URLs()
	release, holding := make(chan struct{}), make(chan struct{}, 1)
	var in atomic.Int64
	n, err := Start(Config{Name: "c1", NodeName: "S", NATS: NATSConfig{URL: urls[0]}}, testLogger(t), func(*Message) {
		select {
		case holding <- struct{}{}:
		default:
		}
		<-release
		in.Add(1)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	}()
	// Close waits for deliver: release it, whether the test fails or not.
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock()
	raw, err := nats.Connect(urls[0])
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	// Batches of 32 messages, as another node would send them: the
	// queue takes inBatches of them, and the one deliver holds; 20 are
	// too many.
	const per, batches = 32, inBatches + 1 + 20
	data := []byte{batchVersion}
	for range per {
		var err error
		if data, err = appendRecord(data, &Message{Topic: "slow"}); err != nil {
			t.Fatal(err)
		}
	}
	// The first batch is in deliver before the others come: had the
	// queue filled first, one more would be dropped.
	for i := range batches {
		if err := raw.Publish(batchSubject("c1", "S"), data); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			select {
			case <-holding:
			case <-time.After(10 * time.Second):
				t.Fatal("the first batch not delivered")
			}
		}
	}
	const dropped = 20 * per
	testutil.WaitFor(t, "the drops counted", func() bool { return n.Stats().DroppedIn == dropped })
	unblock()
	const delivered = (batches - 20) * per
	testutil.WaitFor(t, "the queue delivered", func() bool { return n.Stats().MessagesIn == delivered })
	if st := n.Stats(); st.DroppedIn != dropped || in.Load() != delivered || st.PausesSent == 0 || st.BatchesIn != batches {
		t.Fatalf("%+v, %d delivered", st, in.Load())
	}
}

// TestRetainedReachWantingNodes: a retained message goes live to the
// nodes that want its topic, once, in its order with the others; the
// rest find it in the replicated stream.
func TestRetainedReachWantingNodes(t *testing.T) {
	s := natstest.Start(t, 3)
	urls := s.URLs()
	ra, rb, rc := newRecorder(), newRecorder(), newRecorder()
	a := startNode(t, "A", ra, testLogger(t), urls[0])
	b := startNode(t, "B", rb, testLogger(t), urls[1])
	c := startNode(t, "C", rc, testLogger(t), urls[2])
	logOnFailure(t, s, a, b, c)
	b.Want("r/#")
	b.Want("r/+")
	c.Want("end")
	c.Want("c/probe")
	probe(t, a, "r/probe", rb)
	probe(t, a, "c/probe", rc)
	for _, m := range []*Message{
		{Topic: "r/kept", Retain: true, QoS: 1, Payload: []byte("k")},
		{Topic: "r/live", QoS: 1, Payload: []byte("l")},
		{Topic: "r/kept", Retain: true, QoS: 1, Payload: []byte("k2")},
		{Topic: "other/kept", Retain: true, Payload: []byte("o")},
		{Topic: "end", Retain: true},
	} {
		if err := a.Publish(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Publish(&Message{Topic: "r/end"}); err != nil {
		t.Fatal(err)
	}
	if got := rb.until(t, "r/end", "r/probe"); topics(got) != "r/kept r/live r/kept r/end" || string(got[2].Payload) != "k2" {
		t.Errorf("B, which wants r/#, got %s", topics(got))
	}
	if got := rc.until(t, "end", "c/probe"); topics(got) != "end" || !got[0].Retain {
		t.Errorf("C, which wants end, got %s", topics(got))
	}
}

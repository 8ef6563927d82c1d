package cluster

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"mqttd/internal/natstest"
	"mqttd/internal/testutil"
	"mqttd/persistence"
)

// TestRouteTrieMatch: the route trie matches as MQTT filters do, '#'
// taking its parent level too, and forgets what is removed.
func TestRouteTrieMatch(t *testing.T) {
	var tr routeTrie
	filters := []string{"#", "a/#", "a/+", "+/b", "a/b", "+/+/c", "a/b/c/#", "x"}
	for i, f := range filters {
		tr.add(f, i)
	}
	tr.share("s/+", 1)
	for _, c := range []struct {
		topic  string
		want   []int
		shared bool
	}{
		{"a", []int{0, 1}, false},
		{"a/b", []int{0, 1, 2, 3, 4}, false},
		{"a/b/c", []int{0, 1, 5, 6}, false},
		{"a/b/c/d", []int{0, 1, 6}, false},
		{"z/b", []int{0, 3}, false},
		{"x", []int{0, 7}, false},
		{"s/1", []int{0}, true},
		{"s/1/2", []int{0}, false},
	} {
		var dst peerSet
		shared := tr.match(c.topic, &dst)
		var got []int
		dst.each(func(i int) { got = append(got, i) })
		if fmt.Sprint(got) != fmt.Sprint(c.want) || shared != c.shared {
			t.Errorf("%s: matched %v shared %v, want %v %v", c.topic, got, shared, c.want, c.shared)
		}
	}
	for i, f := range filters {
		tr.remove(f, i)
	}
	tr.share("s/+", -1)
	if tr.root.used() {
		t.Fatalf("the trie keeps nodes after every filter went: %+v", tr.root)
	}
}

// TestRouteTableBounded: a peer announcing more than the bound is taken
// to want every topic, and the node holds none of its filters.
func TestRouteTableBounded(t *testing.T) {
	rt := &routes{peers: map[string]*peer{}, maxFilters: 10, maxBytes: 1 << 20}
	p := rt.newPeerLocked("c1", "H")
	for i := range 11 {
		rt.applyLocked(p, routeMsg{kind: routeAdd, name: "H", gen: 1, seq: uint64(i + 1), key: routeKey{filter: fmt.Sprintf("f/%d", i)}})
	}
	var dst peerSet
	rt.trie.match("any/topic", &dst)
	dst.union(&rt.everything)
	if !p.all || !dst.has(p.slot) || rt.held != 0 || len(p.filters) != 0 || rt.trie.root.used() || rt.overflows.Load() != 1 {
		t.Fatalf("past the bound: all %v, routed %v, %d held, %d filters, trie used %v", p.all, dst.has(p.slot), rt.held, len(p.filters), rt.trie.root.used())
	}
	// A snapshot within the bound brings its filters back.
	rt.replaceLocked(p, 2, 1, []routeKey{{filter: "only"}}, false)
	dst = peerSet{}
	rt.trie.match("any/topic", &dst)
	dst.union(&rt.everything)
	if p.all || !dst.empty() || rt.held != 1 {
		t.Fatalf("after a snapshot within the bound: all %v, %v, %d held", p.all, dst, rt.held)
	}
	rt.dropLocked(p)
	if rt.held != 0 || len(rt.peers) != 0 || rt.trie.root.used() {
		t.Fatalf("dropped: %d held, %d peers", rt.held, len(rt.peers))
	}
}

// TestRouteAddedAfterStart: a subscription made on C after the nodes
// started reaches A's route table and A's messages cross to C; after
// the last Unwant nothing crosses.
func TestRouteAddedAfterStart(t *testing.T) {
	urls := natstest.Cluster(t, 3)
	ra, rc := newRecorder(), newRecorder()
	a := startNode(t, "A", ra, testLogger(t), urls[0])
	startNode(t, "B", newRecorder(), testLogger(t), urls[1])
	c := startNode(t, "C", rc, testLogger(t), urls[2])
	testutil.WaitFor(t, "A knows B and C", func() bool { return a.Stats().Peers == 2 })
	c.Want("late/+")
	waitRoute(t, a, "late/1", "C", true)
	if err := a.Publish(&Message{Topic: "late/1", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if got := rc.until(t, "late/1"); topics(got) != "late/1" {
		t.Fatalf("C got %s", topics(got))
	}
	c.Unwant("late/+")
	waitRoute(t, a, "late/1", "C", false)
	out := a.Stats().MessagesOut
	if err := a.Publish(&Message{Topic: "late/2"}); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.MessagesOut != out || st.Routes != 0 {
		t.Fatalf("after C's Unwant A sent late/2 or holds routes: %+v", st)
	}
}

// TestRouteLostAnnouncementRepaired: an announcement that never reached
// the others is repaired by the next summary: they ask for a snapshot.
func TestRouteLostAnnouncementRepaired(t *testing.T) {
	urls := natstest.Cluster(t, 2)
	a := startNode(t, "A", newRecorder(), testLogger(t), urls[0])
	c := startNode(t, "C", newRecorder(), testLogger(t), urls[1])
	c.Want("seen")
	waitRoute(t, a, "seen", "C", true)
	resyncs := a.Stats().RouteResyncs
	// What announce does, but for the publication: lost on its way.
	c.routes.mu.Lock()
	c.routes.local[routeKey{filter: "lost/#"}] = 1
	c.routes.seq++
	c.routes.mu.Unlock()
	waitRoute(t, a, "lost/x", "C", true)
	if st := a.Stats(); st.RouteResyncs != resyncs+1 || st.Routes != 2 {
		t.Fatalf("after the repair: %+v, %d resyncs before", st, resyncs)
	}
}

// TestRouteRestartedNodeResyncs: a node that comes back under its name
// without saying goodbye (its process killed) is a new generation: the
// others replace its old filters with the new ones.
func TestRouteRestartedNodeResyncs(t *testing.T) {
	urls := natstest.Cluster(t, 2)
	a := startNode(t, "A", newRecorder(), testLogger(t), urls[0])
	c1, err := Start(Config{Name: "c1", NodeName: "C", NATS: NATSConfig{URL: urls[1]}}, testLogger(t), func(*Message) {})
	if err != nil {
		t.Fatal(err)
	}
	c1.Want("old/#")
	waitRoute(t, a, "old/x", "C", true)
	// Killed: its connection gone, no goodbye.
	c1.nc.Close()
	t.Cleanup(func() { _ = c1.Close() })
	c2 := startNode(t, "C", newRecorder(), testLogger(t), urls[1])
	c2.Want("new/#")
	waitRoute(t, a, "new/x", "C", true)
	waitRoute(t, a, "old/x", "C", false)
	if st := a.Stats(); st.Routes != 1 || st.Peers != 1 {
		t.Fatalf("after C's restart: %+v", st)
	}
}

// TestRouteDeadNodeDropped: a node that stops announcing has its routes
// dropped after NodeTimeout; one that closes says goodbye at once.
func TestRouteDeadNodeDropped(t *testing.T) {
	urls := natstest.Cluster(t, 2)
	a, err := Start(Config{Name: "c1", NodeName: "A", NodeTimeout: time.Second, NATS: NATSConfig{URL: urls[0]}}, testLogger(t), func(*Message) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	dead, err := Start(Config{Name: "c1", NodeName: "D", NATS: NATSConfig{URL: urls[1]}}, testLogger(t), func(*Message) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dead.Close() })
	closing := startNode(t, "E", newRecorder(), testLogger(t), urls[1])
	dead.Want("d")
	closing.Want("e")
	waitRoute(t, a, "d", "D", true)
	waitRoute(t, a, "e", "E", true)
	dead.nc.Close()
	if err := closing.Close(); err != nil {
		t.Fatal(err)
	}
	waitRoute(t, a, "e", "E", false)
	waitRoute(t, a, "d", "D", false)
	// An announcement D sent before its connection closed may come after
	// its routes were dropped, and stands as a peer without routes until
	// D has been silent for node_timeout.
	testutil.WaitFor(t, "A to hold no routes and no peers", func() bool {
		st := a.Stats()
		return st.Routes == 0 && st.Peers == 0
	})
}

// TestRouteSnapshotInParts: a table larger than a snapshot part crosses
// whole.
func TestRouteSnapshotInParts(t *testing.T) {
	urls := natstest.Cluster(t, 2)
	c := startNode(t, "C", newRecorder(), testLogger(t), urls[1])
	long := strings.Repeat("l", 1000)
	const filters = 2 * snapPart / 1000
	for i := range filters {
		c.Want(fmt.Sprintf("%s/%d", long, i))
	}
	// A starts after: it learns C's table from a snapshot.
	a := startNode(t, "A", newRecorder(), testLogger(t), urls[0])
	testutil.WaitFor(t, "A holds C's table", func() bool { return a.Stats().Routes == filters })
	if !routed(a, long+"/7", "C") || routed(a, long+"/x", "C") {
		t.Fatal("A routes C's filters wrong")
	}
}

// FuzzDecodeBatch: whatever comes from the network, decodeBatch returns
// messages or errBatch, never panics, and what it returns encodes back
// to the same batch.
func FuzzDecodeBatch(f *testing.F) {
	good, _ := appendRecord([]byte{batchVersion}, &Message{Topic: "a/b", Payload: []byte("x"), QoS: 1, Retain: true, Origin: "o", Properties: fullProps()})
	two, _ := appendRecord(append([]byte(nil), good...), &Message{Topic: "c"})
	stamped, _ := appendRecord([]byte{batchVersion}, &Message{Topic: "q", QoS: 2, Stamp: persistence.Stamp{Node: 9, Seq: 1}})
	f.Add(good)
	f.Add(two)
	f.Add(stamped)
	f.Add([]byte{batchVersion})
	f.Add([]byte{batchVersion, 3, 1, 'a', 0, 0, 0})
	f.Add([]byte{batchVersion, 0, 1, '+', 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		in := bytes.Clone(data)
		ms, err := decodeBatch(in)
		if err != nil {
			if err != errBatch || ms != nil {
				t.Fatalf("%v, %d messages", err, len(ms))
			}
			return
		}
		again := []byte{batchVersion}
		for i := range ms {
			if again, err = appendRecord(again, &ms[i]); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := decodeBatch(again); err != nil {
			t.Fatalf("re-encoded batch refused: %v", err)
		}
		for i := range in {
			in[i] ^= 0xff
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("re-encoded %x, was %x: a message shares the batch's memory, or decodes loosely", again, data)
		}
	})
}

// FuzzDecodeRoute: route messages and snapshot parts from the network
// decode or are refused, never panic.
func FuzzDecodeRoute(f *testing.F) {
	f.Add(appendRouteMsg(nil, routeMsg{kind: routeAdd, name: "n", gen: 1, seq: 2, key: routeKey{filter: "a/+", shared: true}}))
	f.Add(appendRouteMsg(nil, routeMsg{kind: routeSummary, name: "n", gen: 1, seq: 2}))
	f.Add(appendSnapPart(nil, 1, 2, true, []routeKey{{filter: "a/#"}, {filter: "b", shared: true}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		if m, err := decodeRouteMsg(data); err == nil && (m.name == "" || (m.kind == routeAdd && !validRouteFilter(m.key.filter))) {
			t.Fatalf("accepted %+v", m)
		}
		if _, _, _, keys, err := decodeSnapPart(data); err == nil {
			for _, k := range keys {
				if !validRouteFilter(k.filter) {
					t.Fatalf("accepted filter %q", k.filter)
				}
			}
		}
	})
}

//go:build linux

package crash

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"mqttd/packets"
)

// splitTimeout is the cluster's node_timeout in TestNetsplit. When the
// cut node led a bucket, JetStream elects a new leader among the others
// only after its election timeout (4 to 9 s after the last 1 s
// heartbeat), and the majority's beats fail until then: node_timeout
// must be longer, or the majority takes itself for cut off too. The
// default, 15 s, leaves 5 s to spare on a busy machine, and is what a
// deployment runs; the test is about 20 s longer for it than with the
// shortest safe value.
const splitTimeout = 15 * time.Second

// willWait bounds, from the cut, the wait for the majority to publish the
// cut node's client's will: node_timeout, plus up to about 10 s in the
// runs seen (14 to 26 s after the cut) while JetStream elects new leaders
// for the buckets the cut node led, plus a margin.
const willWait = splitTimeout + 20*time.Second

// splitScene is TestNetsplit's cluster and clients.
type splitScene struct {
	t       *testing.T
	start   time.Time
	a, b, c *nsBroker
	setter  *conn // on A: sets the retained messages
	watcher *conn // on B: subscribed to will/#
	lwt     *conn // the client with a will, on C, then on A
	wills   int   // will/lwt messages the watcher got
}

// TestNetsplit: three mqttd nodes, each with its embedded NATS server
// in a network namespace of its own, wired through a bridge; node C's
// link is cut, then healed. The documented netsplit rules hold: C cuts
// itself off (its clients disconnected with Use another server, new
// clients refused, /readyz failing), the majority publishes the will of
// C's client once, that client is served by A; after healing, C serves
// again, the client id has one owner (B takes it over from A with its
// session; C no longer holds it), the session nobody took is C's again,
// no second will comes, and C has the retained messages set before and
// during the split.
func TestNetsplit(t *testing.T) {
	l := newLab(t)
	bin := natsBinary(t)
	nets := []*labNode{l.node(0, "a"), l.node(1, "b"), l.node(2, "c")}
	var nodes []*nsBroker
	for i, name := range []string{"a", "b", "c"} {
		nodes = append(nodes, startNSNode(t, bin, nets[i], name, nets, splitTimeout))
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range nodes {
				t.Logf("node %s's last output:\n%s", n.name, n.tail())
			}
		}
	})
	s := &splitScene{t: t, start: time.Now(), a: nodes[0], b: nodes[1], c: nodes[2]}
	s.setUp()
	l.cut(s.c.net)
	s.logf("C's link cut")
	s.checkSplit()
	l.heal(s.c.net)
	s.logf("C's link healed")
	s.checkHealed()
}

func (s *splitScene) logf(format string, args ...any) {
	s.t.Helper()
	s.t.Logf("%5.1fs: %s", time.Since(s.start).Seconds(), fmt.Sprintf(format, args...))
}

// setUp connects the clients and sets the first retained message, seen
// on C before the cut.
func (s *splitScene) setUp() {
	t := s.t
	t.Helper()
	// The JetStream cluster forms first: until then every node refuses.
	s.setter, _ = served(t, s.a, packets.V311, connectPacket(packets.V311, "setter", true), 30*time.Second)
	s.watcher, _ = served(t, s.b, packets.V311, connectPacket(packets.V311, "watcher", true), 10*time.Second)
	if err := s.watcher.subscribe(1, "will/#", 0); err != nil {
		t.Fatal(err)
	}
	kept, _ := served(t, s.c, packets.V5, connectPacket(packets.V5, "kept", false), 10*time.Second)
	if err := kept.subscribe(1, "kept/x", 1); err != nil {
		t.Fatal(err)
	}
	kept.close(true)
	cp := connectPacket(packets.V5, "lwt", false)
	cp.WillFlag, cp.WillTopic, cp.WillPayload = true, "will/lwt", []byte("gone")
	s.lwt, _ = served(t, s.c, packets.V5, cp, 10*time.Second)
	awaitRoute(t, s.setter, s.watcher, "will/probe")
	p := &packets.Publish{Topic: "r/before", QoS: 1, PacketID: 1, Retain: true, Payload: []byte("before")}
	if err := s.setter.publishSync(p); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !retainedOn(t, s.c, "r/before")["r/before"] {
		if time.Now().After(deadline) {
			t.Fatal("the retained message set on A did not reach C within 10 s")
		}
	}
	s.logf("cluster up, clients connected, r/before retained on C")
}

// checkSplit checks the rules while C is cut off, and sets the second
// retained message on A.
func (s *splitScene) checkSplit() {
	t := s.t
	t.Helper()
	cutAt := time.Now()
	deadline := cutAt.Add(2 * splitTimeout)
	p, err := s.lwt.next(time.Until(deadline))
	if d, ok := p.(*packets.Disconnect); err != nil || !ok || d.ReasonCode != packets.UseAnotherServer {
		t.Fatalf("C's client: got %v, %v; want DISCONNECT 0x9C (use another server) within %v of the cut",
			p, err, 2*splitTimeout)
	}
	s.logf("C cut itself off (%.1fs after the cut)", time.Since(cutAt).Seconds())
	s.lwt.close(false)
	s.expectRefused(s.c, packets.V5, packets.ServerUnavailable)
	s.expectRefused(s.c, packets.V311, packets.ConnRefusedServerUnavailable)
	if code := s.status(s.c, "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("C's /readyz while cut off: %d, want 503", code)
	}
	s.expectWill(time.Until(cutAt.Add(willWait)))
	s.logf("C's client's will published by the majority (%.1fs after the cut)", time.Since(cutAt).Seconds())
	for _, n := range []*nsBroker{s.a, s.b} {
		if code := s.status(n, "/readyz"); code != http.StatusOK {
			t.Errorf("%s's /readyz on the majority side: %d, want 200", n.name, code)
		}
	}
	s.lwt, _ = served(t, s.a, packets.V5, connectPacket(packets.V5, "lwt", false), 10*time.Second)
	if err := s.lwt.subscribe(1, "x/lwt", 1); err != nil {
		t.Fatal(err)
	}
	p2 := &packets.Publish{Topic: "r/during", QoS: 1, PacketID: 2, Retain: true, Payload: []byte("during")}
	if err := s.setter.publishSync(p2); err != nil {
		t.Fatal(err)
	}
	s.logf("C's client served by A; r/during retained on A")
}

// checkHealed checks the rules once C's link is back.
func (s *splitScene) checkHealed() {
	t := s.t
	t.Helper()
	probe, _ := served(t, s.c, packets.V5, connectPacket(packets.V5, "probe-c", true), 45*time.Second)
	defer probe.close(true)
	s.logf("C accepts clients again")
	if code := s.status(s.c, "/readyz"); code != http.StatusOK {
		t.Errorf("C's /readyz after healing: %d, want 200", code)
	}
	onB, present := served(t, s.b, packets.V5, connectPacket(packets.V5, "lwt", false), 10*time.Second)
	defer onB.close(true)
	if !present {
		t.Error("lwt taken over by B: session present 0, want 1 (the session it had on A)")
	}
	p, err := s.lwt.next(ioTimeout)
	if d, ok := p.(*packets.Disconnect); err != nil || !ok || d.ReasonCode != packets.SessionTakenOver {
		t.Errorf("lwt's connection on A: got %v, %v; want DISCONNECT 0x8E (session taken over)", p, err)
	}
	s.lwt.close(false)
	s.expectNotHeld(s.c, "lwt", 10*time.Second)
	kept, present := served(t, s.c, packets.V5, connectPacket(packets.V5, "kept", false), 10*time.Second)
	kept.close(true)
	if !present {
		t.Error("kept back on C: session present 0; C dropped a session no other node took")
	}
	got := retainedOn(t, s.c, "r/#")
	if !got["r/before"] {
		t.Error("a new subscriber on C misses r/before, retained before the split")
	}
	// r/during is in the stream once A's keeper has its write
	// acknowledged: when the heal makes JetStream elect the stream's
	// leader again, C can accept clients a moment before its reader gets
	// it.
	for deadline := time.Now().Add(20 * time.Second); !got["r/during"] && time.Now().Before(deadline); {
		got = retainedOn(t, s.c, "r/#")
	}
	if !got["r/during"] {
		t.Error("a new subscriber on C misses r/during, retained on A during the split, 20 s after C accepted clients")
	}
	s.expectNoSecondWill(probe)
	s.logf("healed cluster checked")
}

// served connects cp to n until it is accepted, within d: a node refuses
// clients while it cannot claim their ids.
func served(t *testing.T, n *nsBroker, v packets.Version, cp *packets.Connect, d time.Duration) (*conn, bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		c, present, err := n.connect(v, cp)
		if err == nil {
			return c, present
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not served by node %s within %v: %v", cp.ClientID, n.name, d, err)
		}
		<-tick.C
	}
}

// expectRefused checks that n refuses a new client of version v with code.
func (s *splitScene) expectRefused(n *nsBroker, v packets.Version, code packets.ReasonCode) {
	s.t.Helper()
	c, _, err := n.connect(v, connectPacket(v, fmt.Sprintf("refused-%d", v), true))
	var r *refusedError
	if !errors.As(err, &r) || r.code != byte(code) {
		if err == nil {
			c.close(true)
		}
		s.t.Errorf("a new %v client on node %s: %v; want CONNACK 0x%02x", v, n.name, err, byte(code))
	}
}

// status is the HTTP status of path on n's metrics listener.
func (s *splitScene) status(n *nsBroker, path string) int {
	s.t.Helper()
	code, _, err := n.get(path)
	if err != nil {
		s.t.Fatalf("node %s %s: %v", n.name, path, err)
	}
	return code
}

// expectWill waits up to d for the will of lwt at the watcher.
func (s *splitScene) expectWill(d time.Duration) {
	s.t.Helper()
	p, err := s.watcher.next(d)
	if err != nil {
		s.t.Fatalf("the will of C's client: %v", err)
	}
	if pp, ok := p.(*packets.Publish); !ok || pp.Topic != "will/lwt" || string(pp.Payload) != "gone" {
		s.t.Fatalf("got %+v, want the will of C's client", p)
	}
	s.wills++
}

// expectNotHeld waits up to d for id to leave n's sessions.
func (s *splitScene) expectNotHeld(n *nsBroker, id string, d time.Duration) {
	t := s.t
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		code, body, err := n.get("/api/v1/clients?limit=1000")
		if err != nil || code != http.StatusOK {
			t.Fatalf("node %s /api/v1/clients: %d %v %s", n.name, code, err, body)
		}
		var page struct {
			Clients []struct {
				ID        string `json:"id"`
				Connected bool   `json:"connected"`
				Node      string `json:"node"`
			} `json:"clients"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatalf("node %s /api/v1/clients: %v", n.name, err)
		}
		held := false
		for _, c := range page.Clients {
			// The listing is the cluster's: C's own are those it names.
			held = held || c.ID == id && (c.Node == n.name || c.Node == "")
		}
		if !held {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("node %s still holds a session for %s %v after another node took it: two owners", n.name, id, d)
			return
		}
		<-tick.C
	}
}

// expectNoSecondWill publishes fences on C through from until the
// watcher gets one, and fails if another will of lwt came meanwhile.
func (s *splitScene) expectNoSecondWill(from *conn) {
	t := s.t
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for fenced := false; !fenced; {
		if err := from.send(&packets.Publish{Topic: "will/fence", Payload: []byte("fence")}); err != nil {
			t.Fatal(err)
		}
		for {
			p, err := s.watcher.next(100 * time.Millisecond)
			if err != nil {
				break
			}
			pp, ok := p.(*packets.Publish)
			switch {
			case ok && pp.Topic == "will/fence":
				fenced = true
			case ok && pp.Topic == "will/lwt":
				s.wills++
			case ok && pp.Topic == "will/probe":
			default:
				t.Fatalf("watcher: unexpected %+v", p)
			}
		}
		if !fenced && time.Now().After(deadline) {
			t.Fatal("no message from C reached B within 20 s of healing")
		}
	}
	if s.wills != 1 {
		t.Errorf("the will of C's client was published %d times, want once", s.wills)
	}
}

// retainedOn subscribes a new client on n to filter and returns the
// topics of the retained messages it gets.
func retainedOn(t *testing.T, n *nsBroker, filter string) map[string]bool {
	t.Helper()
	c, _ := served(t, n, packets.V311, connectPacket(packets.V311, "retained-reader", true), 10*time.Second)
	defer c.close(true)
	if err := c.subscribe(1, filter, 0); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for {
		// Retained messages follow the SUBACK at once, from the node's
		// own store.
		p, err := c.next(500 * time.Millisecond)
		if err != nil {
			return got
		}
		if pp, ok := p.(*packets.Publish); ok && pp.Retain {
			got[pp.Topic] = true
		}
	}
}

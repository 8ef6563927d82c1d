package cluster

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"mqttd/internal/natstest"
	"mqttd/internal/testutil"
)

// waitStore waits until each node has bound its replicated store.
func waitStore(t *testing.T, nodes ...*Node) {
	t.Helper()
	for _, n := range nodes {
		// JetStream elects its leaders first: on a loaded machine, more
		// than WaitFor's 10 s.
		testutil.WaitWithin(t, time.Minute, "node "+n.Name()+"'s store", n.StoreReady)
	}
}

// waitReleased waits until id has no owner record.
func waitReleased(t *testing.T, n *Node, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := n.store.Load().owners.Get(context.Background(), ownerKey(id))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q still owned 10s after its release (%v)", id, err)
		}
		<-tick.C
	}
}

// claimAs claims id for user "u" and returns the previous owner.
func claimAs(t *testing.T, n *Node, id string) Claim {
	t.Helper()
	c, err := n.Claim(id, "u", true)
	if err != nil {
		t.Fatalf("%s claiming %q: %v", n.Name(), id, err)
	}
	return c
}

func TestClaimMovesOwnership(t *testing.T) {
	urls := natstest.Cluster(t, 3)
	n1 := startNode(t, "n1", newRecorder(), testLogger(t), urls[0])
	n2 := startNode(t, "n2", newRecorder(), testLogger(t), urls[1])
	waitStore(t, n1, n2)
	steps := []struct {
		node *Node
		prev string
	}{{n1, ""}, {n1, "n1"}, {n2, "n1"}, {n1, "n2"}}
	var last Claim
	for i, st := range steps {
		last = claimAs(t, st.node, "dev/1 é")
		if last.Prev != st.prev {
			t.Fatalf("step %d: %s claimed: prev %q; want %q", i, st.node.Name(), last.Prev, st.prev)
		}
	}
	if !n1.Owns("dev/1 é") || !n1.Holds("dev/1 é", last.Rev) {
		t.Fatal("n1 does not hold the id it claimed last")
	}
	// Another user's session: refused, nothing claimed; or replaced.
	if _, err := n2.Claim("dev/1 é", "other", true); !errors.Is(err, ErrOtherUser) {
		t.Fatalf("another user's claim: %v, want ErrOtherUser", err)
	}
	if c := claimAs(t, n2, "dev/1 é"); c.Prev != "n1" {
		t.Fatalf("after a refused claim: prev %q, want n1", c.Prev)
	}
	if c, err := n1.Claim("dev/1 é", "other", false); err != nil || c.Prev != "n2" {
		t.Fatalf("replacing another user's session: %+v, %v", c, err)
	}
	if c, err := n2.Claim("dev/1 é", "u", false); err != nil || c.Prev != "n1" {
		t.Fatalf("replacing it back: %+v, %v", c, err)
	}
	// A release at an older claim than the id's latest takes nothing out.
	old := claimAs(t, n2, "dev/1 é")
	newer := claimAs(t, n2, "dev/1 é")
	n2.Release("dev/1 é", old.Rev)
	if !n2.Holds("dev/1 é", newer.Rev) {
		t.Fatal("a release at an older claim forgot the newer one")
	}
	if c := claimAs(t, n1, "dev/1 é"); c.Prev != "n2" {
		t.Fatalf("after a stale release: prev %q; want n2", c.Prev)
	}
	n1.Release("dev/1 é", n1.owned.ids["dev/1 é"])
	waitReleased(t, n1, "dev/1 é")
	if c := claimAs(t, n2, "dev/1 é"); c.Prev != "" {
		t.Fatalf("after the owner's release: prev %q; want none", c.Prev)
	}
	long := strings.Repeat("x", 5000)
	if c := claimAs(t, n1, long); c.Prev != "" {
		t.Fatalf("long id: prev %q", c.Prev)
	}
	if c := claimAs(t, n2, long); c.Prev != "n1" {
		t.Fatalf("long id: prev %q; want n1", c.Prev)
	}
}

// TestClaimConcurrent has three nodes claim one id at once, many times.
// Each ownership ends with exactly one claim naming its owner as the
// previous one: for each node, the claims that saw it as the owner are
// as many as its own claims (one fewer for the last owner), which fails
// if two claims ever replaced the same record.
func TestClaimConcurrent(t *testing.T) {
	urls := natstest.Cluster(t, 3)
	var nodes []*Node
	for i, name := range []string{"a", "b", "c"} {
		nodes = append(nodes, startNode(t, name, newRecorder(), testLogger(t), urls[i]))
	}
	waitStore(t, nodes...)
	const rounds = 20
	var mu sync.Mutex
	prevs, claims := map[string]int{}, map[string]int{}
	var errs []error
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				c, err := n.Claim("contended", "u", true)
				mu.Lock()
				switch {
				case err == nil:
					prevs[c.Prev]++
					claims[n.Name()]++
				case !errors.Is(err, errContended):
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("claims failed: %v", errs)
	}
	lastClaim, err := nodes[0].Claim("contended", "u", true)
	if err != nil {
		t.Fatal(err)
	}
	last := lastClaim.Prev
	claims[last]--
	if prevs[""] != 1 {
		t.Fatalf("%d claims of a free id, want 1 (previous owners %v)", prevs[""], prevs)
	}
	for _, n := range nodes {
		if prevs[n.Name()] != claims[n.Name()] {
			t.Fatalf("node %s: %d claims, %d seen replaced (last owner %s)", n.Name(), claims[n.Name()], prevs[n.Name()], last)
		}
	}
}

func TestHandover(t *testing.T) {
	urls := natstest.Cluster(t, 3)
	n1 := startNode(t, "n1", newRecorder(), testLogger(t), urls[0])
	n2 := startNode(t, "n2", newRecorder(), testLogger(t), urls[1])
	waitStore(t, n1, n2)
	state := bytes.Repeat([]byte("session "), 200_000) // 1.6 MB: several parts
	type call struct {
		id    string
		clean bool
	}
	calls := make(chan call, 4)
	if err := n1.ServeHandover(func(id string, clean, _ bool) []byte {
		calls <- call{id, clean}
		if clean {
			return nil
		}
		return state
	}); err != nil {
		t.Fatal(err)
	}
	claimAs(t, n1, "d")
	c := claimAs(t, n2, "d")
	if c.Prev != "n1" {
		t.Fatalf("claim: %+v", c)
	}
	got, err := n2.Handover(c, "d", false)
	if err != nil || !bytes.Equal(got, state) {
		t.Fatalf("handover: %d bytes, %v; want %d", len(got), err, len(state))
	}
	if c := <-calls; c != (call{"d", false}) {
		t.Fatalf("n1 asked %+v", c)
	}
	if n1.Owns("d") {
		t.Fatal("n1 still owns the id it handed over")
	}
	n1.owned.set("d", 1) // as if n1 claimed it again, before n2's claim
	got, err = n2.Handover(Claim{Prev: "n1", Rev: c.Rev}, "d", true)
	if err != nil || got != nil {
		t.Fatalf("clean handover: %d bytes, %v", len(got), err)
	}
	if c := <-calls; c != (call{"d", true}) {
		t.Fatalf("n1 asked %+v", c)
	}
	// A request older than n1's own later claim is not obeyed.
	n1.owned.set("d", c.Rev+1000)
	if got, err := n2.Handover(c, "d", false); err != nil || got != nil {
		t.Fatalf("stale handover: %d bytes, %v", len(got), err)
	}
	select {
	case c := <-calls:
		t.Fatalf("n1 obeyed a stale request: %+v", c)
	default:
	}
	if !n1.Holds("d", c.Rev+1000) {
		t.Fatal("n1 gave up its later claim for a stale request")
	}
	// A node nobody serves answers at once: no responders.
	start := time.Now()
	if got, err := n2.Handover(Claim{Prev: "gone", Rev: c.Rev}, "d", false); !errors.Is(err, ErrNoAnswer) || got != nil {
		t.Fatalf("handover from a node that is gone: %v, %v", got, err)
	}
	if d := time.Since(start); d >= handoverTimeout {
		t.Fatalf("handover from a node that is gone took %v: waited for the timeout", d)
	}
	if st := n2.Stats(); st.Takeovers != 4 || !st.StoreReady {
		t.Fatalf("n2 stats %+v", st)
	}
	if st := n1.Stats(); st.HandedOver != 2 {
		t.Fatalf("n1 stats %+v", st)
	}
}

// TestClaimWithoutJetStream: a node whose NATS has no JetStream serves
// nobody: every claim fails with ErrNoStore, and Close does not hang on
// the store's retries.
func TestClaimWithoutJetStream(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	n, err := Start(Config{Name: "c1", NodeName: "solo", NATS: NATSConfig{URL: srv.ClientURL()}}, testLogger(t), newRecorder().deliver)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Claim("x", "", true); !errors.Is(err, ErrNoStore) {
		t.Fatalf("claim without JetStream: %v", err)
	}
	if n.Stats().StoreReady {
		t.Fatal("store ready without JetStream")
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestAdopt: a node keeping a session claims its id when nobody has it,
// and learns the owner when another node took it.
func TestAdopt(t *testing.T) {
	urls := natstest.Cluster(t, 3)
	n1 := startNode(t, "n1", newRecorder(), testLogger(t), urls[0])
	n2 := startNode(t, "n2", newRecorder(), testLogger(t), urls[1])
	waitStore(t, n1, n2)
	// Reads go to each bucket's leader: no stale replica decides.
	for _, b := range []string{ownersBucket("c1"), willsBucket("c1"), nodesBucket("c1")} {
		stream, err := n1.store.Load().js.Stream(context.Background(), "KV_"+b)
		if err != nil || stream.CachedInfo().Config.AllowDirect {
			t.Fatalf("bucket %s: direct gets on (%v)", b, err)
		}
	}
	if owner, err := n1.Adopt("kept", "u"); err != nil || owner != "n1" || !n1.Owns("kept") {
		t.Fatalf("adopting a free id: %q, %v", owner, err)
	}
	if owner, err := n1.Adopt("kept", "u"); err != nil || owner != "n1" {
		t.Fatalf("adopting an id it owns: %q, %v", owner, err)
	}
	claimAs(t, n2, "kept")
	if owner, err := n1.Adopt("kept", "u"); err != nil || owner != "n2" || n1.Owns("kept") {
		t.Fatalf("adopting an id another node took: %q, %v, owns %v", owner, err, n1.Owns("kept"))
	}
}

// TestClaimFrom: a survivor takes an id over from a dead node only while
// that node still owns it (or nobody does), keeping the session's user.
func TestClaimFrom(t *testing.T) {
	urls := natstest.Cluster(t, 1)
	n1 := startNode(t, "n1", newRecorder(), testLogger(t), urls[0])
	n2 := startNode(t, "n2", newRecorder(), testLogger(t), urls[0])
	waitStore(t, n1, n2)
	if _, err := n1.Claim("x", "alice", false); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := n2.ClaimFrom("x", "alice", "n3"); ok || err != nil {
		t.Fatalf("ClaimFrom a node that does not own x: %v, %v", ok, err)
	}
	c, ok, err := n2.ClaimFrom("x", "alice", "n1")
	if !ok || err != nil || c.Prev != "n1" || !n2.Owns("x") {
		t.Fatalf("ClaimFrom the owner: %+v, %v, %v", c, ok, err)
	}
	// The record keeps alice: her claim on n1 is the same user's.
	if c, err := n1.Claim("x", "alice", true); err != nil || !c.SameUser || c.Prev != "n2" {
		t.Fatalf("alice back on n1: %+v, %v", c, err)
	}
	if _, ok, err := n2.ClaimFrom("nobody's", "bob", "n1"); !ok || err != nil || !n2.Owns("nobody's") {
		t.Fatalf("ClaimFrom of an id nobody owns: %v, %v", ok, err)
	}
	// bob's, as the session was: bob may take it on n1.
	if c, err := n1.Claim("nobody's", "bob", true); err != nil || !c.SameUser {
		t.Fatalf("bob claiming his session: %+v, %v", c, err)
	}
}

// TestClaimFromFenced: a survivor that found a node dead takes none of
// the records the node's next life claimed back since (a restart
// restoring its sessions), whose name is the same; the records it did
// not claim back, it takes.
func TestClaimFromFenced(t *testing.T) {
	urls := natstest.Cluster(t, 1)
	n1 := startNode(t, "n1", newRecorder(), testLogger(t), urls[0])
	n2 := startNode(t, "n2", newRecorder(), testLogger(t), urls[0])
	waitStore(t, n1, n2)
	for _, id := range []string{"back", "left"} {
		if _, err := n1.Claim(id, "alice", false); err != nil {
			t.Fatal(err)
		}
	}
	fence, err := ownersFence(context.Background(), n2.store.Load())
	if err != nil {
		t.Fatal(err)
	}
	n2.setFence("n1", fence) // n2 finds n1 dead
	if _, ok, err := n1.ClaimFrom("back", "alice", "n1"); !ok || err != nil {
		t.Fatalf("n1 claiming back its own: %v, %v", ok, err)
	}
	if _, ok, err := n2.ClaimFrom("back", "alice", "n1"); ok || err != nil {
		t.Fatalf("ClaimFrom of a record n1's next life claimed back: %v, %v; want false", ok, err)
	}
	if _, ok, err := n2.ClaimFrom("left", "alice", "n1"); !ok || err != nil {
		t.Fatalf("ClaimFrom of a record of n1 before it died: %v, %v; want true", ok, err)
	}
}

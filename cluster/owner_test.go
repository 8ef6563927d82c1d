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
)

// waitStore waits until each node has bound its replicated store.
func waitStore(t *testing.T, nodes ...*Node) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for _, n := range nodes {
		for !n.StoreReady() {
			if time.Now().After(deadline) {
				t.Fatalf("node %s: store not ready within 15s", n.Name())
			}
			<-tick.C
		}
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

func TestClaimMovesOwnership(t *testing.T) {
	urls := natstest.Cluster(t, 3)
	n1 := startNode(t, "n1", newRecorder(), testLogger(t), urls[0])
	n2 := startNode(t, "n2", newRecorder(), testLogger(t), urls[1])
	waitStore(t, n1, n2)
	steps := []struct {
		node *Node
		prev string
	}{{n1, ""}, {n1, "n1"}, {n2, "n1"}, {n1, "n2"}}
	for i, st := range steps {
		prev, err := st.node.Claim("dev/1 é")
		if err != nil || prev != st.prev {
			t.Fatalf("step %d: %s claimed: prev %q, %v; want %q", i, st.node.Name(), prev, err, st.prev)
		}
	}
	if !n1.Owns("dev/1 é") {
		t.Fatal("n1 does not own the id it claimed last")
	}
	// n2's claim was replaced: its release must not take n1's key out.
	n2.Release("dev/1 é")
	if prev, err := n2.Claim("dev/1 é"); err != nil || prev != "n1" {
		t.Fatalf("after a stale release: prev %q, %v; want n1", prev, err)
	}
	n2.Release("dev/1 é")
	waitReleased(t, n1, "dev/1 é")
	if prev, err := n1.Claim("dev/1 é"); err != nil || prev != "" {
		t.Fatalf("after the owner's release: prev %q, %v; want none", prev, err)
	}
	long := strings.Repeat("x", 5000)
	if prev, err := n1.Claim(long); err != nil || prev != "" {
		t.Fatalf("long id: prev %q, %v", prev, err)
	}
	if prev, err := n2.Claim(long); err != nil || prev != "n1" {
		t.Fatalf("long id: prev %q, %v; want n1", prev, err)
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
				prev, err := n.Claim("contended")
				mu.Lock()
				switch {
				case err == nil:
					prevs[prev]++
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
	last, err := nodes[0].Claim("contended")
	if err != nil {
		t.Fatal(err)
	}
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
	if err := n1.ServeHandover(func(id string, clean bool) []byte {
		calls <- call{id, clean}
		if clean {
			return nil
		}
		return state
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := n1.Claim("d"); err != nil {
		t.Fatal(err)
	}
	prev, err := n2.Claim("d")
	if err != nil || prev != "n1" {
		t.Fatalf("claim: %q, %v", prev, err)
	}
	got, err := n2.Handover(prev, "d", false)
	if err != nil || !bytes.Equal(got, state) {
		t.Fatalf("handover: %d bytes, %v; want %d", len(got), err, len(state))
	}
	if c := <-calls; c != (call{"d", false}) {
		t.Fatalf("n1 asked %+v", c)
	}
	if n1.Owns("d") {
		t.Fatal("n1 still owns the id it handed over")
	}
	got, err = n2.Handover("n1", "d", true)
	if err != nil || got != nil {
		t.Fatalf("clean handover: %d bytes, %v", len(got), err)
	}
	if c := <-calls; c != (call{"d", true}) {
		t.Fatalf("n1 asked %+v", c)
	}
	// A node nobody serves answers at once: no responders.
	start := time.Now()
	if got, err := n2.Handover("gone", "d", false); err != nil || got != nil {
		t.Fatalf("handover from a node that is gone: %v, %v", got, err)
	}
	if d := time.Since(start); d >= handoverTimeout {
		t.Fatalf("handover from a node that is gone took %v: waited for the timeout", d)
	}
	if st := n2.Stats(); st.Takeovers != 3 || !st.StoreReady {
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
	if _, err := n.Claim("x"); !errors.Is(err, ErrNoStore) {
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
	if owner, err := n1.Adopt("kept"); err != nil || owner != "n1" || !n1.Owns("kept") {
		t.Fatalf("adopting a free id: %q, %v", owner, err)
	}
	if owner, err := n1.Adopt("kept"); err != nil || owner != "n1" {
		t.Fatalf("adopting an id it owns: %q, %v", owner, err)
	}
	if _, err := n2.Claim("kept"); err != nil {
		t.Fatal(err)
	}
	if owner, err := n1.Adopt("kept"); err != nil || owner != "n2" || n1.Owns("kept") {
		t.Fatalf("adopting an id another node took: %q, %v, owns %v", owner, err, n1.Owns("kept"))
	}
}

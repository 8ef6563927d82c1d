package cluster

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"mqttd/internal/natstest"
	"mqttd/internal/testutil"
)

// startWatched starts a node with a short node timeout whose swept wills
// go to published, and watches.
func startWatched(t *testing.T, name, url string, published *wills, hooks Hooks) *Node {
	t.Helper()
	n, err := Start(Config{Name: "c1", NodeName: name, NodeTimeout: time.Second, NATS: NATSConfig{URL: url}},
		testLogger(t), newRecorder().deliver)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	n.SetWillPublisher(func(data []byte) { published.add(name, string(data)) })
	n.Watch(hooks)
	return n
}

// wills records the wills published, by node.
type wills struct {
	mu  sync.Mutex
	got []string
}

func (w *wills) add(node, will string) {
	w.mu.Lock()
	w.got = append(w.got, will+"@"+node)
	w.mu.Unlock()
}

func (w *wills) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := append([]string(nil), w.got...)
	sort.Strings(l)
	return l
}

// TestDeadNodeWillsPublishedOnce: the wills a node recorded are
// published once, by one of the survivors, when its beats stop; a will
// taken out before (its client left normally) is not. The first survivor
// to find the node dead sweeps it and forgets it; two sweeping at once
// publish each will once between them.
func TestDeadNodeWillsPublishedOnce(t *testing.T) {
	urls := natstest.Cluster(t, 3)
	var published wills
	dead := make(chan string, 4)
	hooks := Hooks{NodeDead: func(n string) { dead <- n }}
	n1 := startWatched(t, "n1", urls[0], &published, Hooks{})
	n2 := startWatched(t, "n2", urls[1], &published, hooks)
	n3 := startWatched(t, "n3", urls[2], &published, hooks)
	waitStore(t, n1, n2, n3)
	for _, id := range []string{"a", "b"} {
		if _, err := n1.PutWill(id, []byte("will-"+id)); err != nil {
			t.Fatal(err)
		}
	}
	ref, err := n1.PutWill("left", []byte("will-left"))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := n1.TakeWill(ref); !ok || err != nil {
		t.Fatalf("TakeWill of the node's own record: %v, %v", ok, err)
	}
	// n1 dies: its connection to NATS goes, nothing is taken out.
	n1.nc.Close()
	select {
	case got := <-dead:
		if got != "n1" {
			t.Fatalf("node %s found dead, want n1", got)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("n1 not found dead within 15s")
	}
	// Both survivors sweeping at once.
	const many = 20
	for i := range many {
		if _, err := n2.store.Load().wills.Put(context.Background(), willKey("ghost", fmt.Sprint(i), "1"), []byte(fmt.Sprint("ghost-", i))); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, n := range []*Node{n2, n3} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := n.SweepWills("ghost", nil); err != nil {
				t.Errorf("sweep by %s: %v", n.Name(), err)
			}
		}()
	}
	wg.Wait()
	// Closed, the survivors have finished every sweep they started.
	for _, n := range []*Node{n2, n3} {
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
	}
	got := published.list()
	if len(got) != 2+many || !strings.HasPrefix(got[len(got)-2], "will-a@") || !strings.HasPrefix(got[len(got)-1], "will-b@") {
		t.Fatalf("wills published %v: want will-a, will-b and the %d ghosts once each", got, many)
	}
	if st2, st3 := n2.Stats(), n3.Stats(); st2.DeadNodes+st3.DeadNodes < 1 || st2.WillsSwept+st3.WillsSwept != 2+many {
		t.Fatalf("stats: n2 %+v, n3 %+v", st2, st3)
	}
}

// TestLateBeatsNotDead: a node whose beats come later than another's
// node_timeout (a JetStream leader election, a replica behind), but that
// answers when asked, is not taken for dead; once it is gone, it is.
func TestLateBeatsNotDead(t *testing.T) {
	urls := natstest.Cluster(t, 3)
	var published wills
	dead := make(chan string, 4)
	n1 := startWatched(t, "n1", urls[0], &published, Hooks{NodeDead: func(n string) { dead <- n }})
	// n2 beats every 6 s: to n1 (node_timeout 1 s) its record is stale
	// five seconds in six.
	n2, err := Start(Config{Name: "c1", NodeName: "n2", NodeTimeout: 30 * time.Second, NATS: NATSConfig{URL: urls[1]}},
		testLogger(t), newRecorder().deliver)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n2.Close() })
	n2.Watch(Hooks{})
	waitStore(t, n1, n2)
	deadline := time.Now().Add(20 * time.Second)
	for n1.Stats().LateBeats < 2 {
		select {
		case got := <-dead:
			t.Fatalf("%s taken for dead while it answers", got)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("n1 never found n2's beats late within 20 s: %+v", n1.Stats())
		}
	}
	n2.nc.Close()
	select {
	case got := <-dead:
		if got != "n2" {
			t.Fatalf("node %s found dead, want n2", got)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("n2 not found dead within 15 s of closing its connection")
	}
}

// TestTakeWill: a will record is taken once, at the revision it was
// put; a dropped one is gone.
func TestTakeWill(t *testing.T) {
	urls := natstest.Cluster(t, 3)
	n := startNode(t, "n", newRecorder(), testLogger(t), urls[0])
	waitStore(t, n)
	ref1, err := n.PutWill("c", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	ref2, err := n.PutWill("c", []byte("2")) // the client connected again
	if err != nil {
		t.Fatal(err)
	}
	if ref1.Key == ref2.Key {
		t.Fatalf("two connections of one client share the record %s", ref1.Key)
	}
	if ok, err := n.TakeWill(WillRef{Key: ref1.Key, Rev: ref1.Rev + 1000}); ok || err != nil {
		t.Fatalf("taking a record at another revision: %v, %v", ok, err)
	}
	for _, ref := range []WillRef{ref1, ref2} {
		if ok, err := n.TakeWill(ref); !ok || err != nil {
			t.Fatalf("taking %s: %v, %v", ref.Key, ok, err)
		}
		if ok, err := n.TakeWill(ref); ok || err != nil {
			t.Fatalf("taking %s twice: %v, %v", ref.Key, ok, err)
		}
	}
	ref3, err := n.PutWill("d", []byte("3"))
	if err != nil {
		t.Fatal(err)
	}
	n.DropWill(ref3)
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := n.store.Load().wills.Get(context.Background(), ref3.Key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dropped will still there after 10s (%v)", err)
		}
		<-tick.C
	}
}

// TestCutOff: a node that loses every NATS server (it would go on with
// any other it learned of) takes itself for cut off within its node
// timeout.
func TestCutOff(t *testing.T) {
	servers := natstest.Start(t, 3)
	cut := make(chan struct{}, 1)
	var published wills
	n := startWatched(t, "alone", servers.URLs()[0], &published, Hooks{CutOff: func() { cut <- struct{}{} }})
	waitStore(t, n)
	for i := range 3 {
		servers.Shutdown(i)
	}
	select {
	case <-cut:
	case <-time.After(15 * time.Second):
		t.Fatal("not cut off within 15s of losing NATS")
	}
	if st := n.Stats(); !st.CutOff || st.CutOffs != 1 || !n.CutOff() {
		t.Fatalf("stats %+v", st)
	}
}

// TestTakeoverCutOffRetried: a node cut off from the store while it
// sweeps a dead node's wills gives the takeover up, and takes the dead
// node over once the store answers again, as no other node did
// meanwhile: its wills are each published once, its takeover runs.
func TestTakeoverCutOffRetried(t *testing.T) {
	servers := natstest.Start(t, 1)
	url := servers.URLs()[0]
	down := make(chan struct{})
	var once sync.Once
	var published wills
	dead := make(chan string, 4)
	a, err := Start(Config{Name: "c1", NodeName: "A", NodeTimeout: time.Second, NATS: NATSConfig{URL: url}},
		testLogger(t), newRecorder().deliver)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	a.SetWillPublisher(func(data []byte) {
		published.add("A", string(data))
		// The store goes away after the first will is taken: the
		// second's take fails, and A is cut off before it can retry.
		once.Do(func() {
			srv := servers.Server(0)
			srv.Shutdown()
			srv.WaitForShutdown()
			close(down)
		})
	})
	a.Watch(Hooks{NodeDead: func(n string) { dead <- n }})
	b, err := Start(Config{Name: "c1", NodeName: "B", NodeTimeout: time.Second, NATS: NATSConfig{URL: url}},
		testLogger(t), newRecorder().deliver)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	b.Watch(Hooks{})
	waitStore(t, a, b)
	for _, will := range []string{"will1", "will2"} {
		if _, err := b.PutWill("dev-"+will, []byte(will)); err != nil {
			t.Fatal(err)
		}
	}
	b.nc.Close() // B dies: no goodbye
	select {
	case <-down:
	case <-time.After(30 * time.Second):
		t.Fatal("A did not sweep B's wills within 30 s of B's death")
	}
	testutil.WaitWithin(t, 30*time.Second, "A cut off", a.CutOff)
	select {
	case n := <-dead:
		t.Fatalf("%s taken over with a will left in a store out of reach", n)
	default:
	}
	servers.Restart(0)
	select {
	case n := <-dead:
		if n != "B" {
			t.Fatalf("%s taken over, want B", n)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("B not taken over within 30 s of the store's return")
	}
	if got, want := strings.Join(published.list(), " "), "will1@A will2@A"; got != want {
		t.Fatalf("wills published %q, want %q", got, want)
	}
	if st := a.Stats(); st.DeadNodes != 1 {
		t.Fatalf("dead nodes counted %d, want 1", st.DeadNodes)
	}
}

package cluster

import (
	"sync"
	"testing"
	"time"

	"mqttd/internal/natstest"
	"mqttd/internal/testutil"
)

// TestPublishConfirmed: a confirmed send is confirmed once the receiving
// node answers (after what it committed), not before; one to no node at
// once; one whose receiver does not answer fails after confirmTimeout.
func TestPublishConfirmed(t *testing.T) {
	urls := natstest.Cluster(t, 1)
	ra, rb := newRecorder(), newRecorder()
	a := startNode(t, "A", ra, testLogger(t), urls[0])
	b := startNode(t, "B", rb, testLogger(t), urls[0])
	var mu sync.Mutex
	var owed []func(bool)
	answering := true
	b.SetCommitted(nil, func(answer func(bool)) {
		mu.Lock()
		defer mu.Unlock()
		if answering {
			owed = append(owed, answer)
		}
	})
	b.Want("k/#")
	b.Want("probe/B")
	probe(t, a, "probe/B", rb)

	done := make(chan bool, 4)
	if err := a.PublishConfirmed(&Message{Topic: "k/1", QoS: 1}, time.Second, nil, func(ok bool) { done <- ok }); err != nil {
		t.Fatal(err)
	}
	rb.until(t, "k/1")
	select {
	case ok := <-done:
		t.Fatalf("confirmed (%v) before B answered", ok)
	default:
	}
	answerAll := func(ok bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, answer := range owed {
			answer(ok)
		}
		owed = nil
	}
	answerAll(true)
	if ok := <-done; !ok {
		t.Fatal("B answered, but the send failed")
	}

	// B could not keep what it delivered (its commit failed): the send
	// fails at once, long before its timeout.
	a.SetConfirmTimeout(time.Minute)
	if err := a.PublishConfirmed(&Message{Topic: "k/3", QoS: 1}, time.Second, nil, func(ok bool) { done <- ok }); err != nil {
		t.Fatal(err)
	}
	rb.until(t, "k/3")
	testutil.WaitFor(t, "B to owe an answer", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(owed) > 0
	})
	answerAll(false)
	if ok := <-done; ok {
		t.Fatal("B answered that it did not keep the message, but the send was confirmed")
	}
	if st := a.Stats(); st.ConfirmsFailed != 1 {
		t.Fatalf("stats: %d confirms failed, want 1", st.ConfirmsFailed)
	}

	if err := a.PublishConfirmed(&Message{Topic: "nobody/wants", QoS: 1}, time.Second, nil, func(ok bool) { done <- ok }); err != nil {
		t.Fatal(err)
	}
	if ok := <-done; !ok {
		t.Fatal("a send to no node failed")
	}

	mu.Lock()
	answering = false
	mu.Unlock()
	const timeout = 300 * time.Millisecond
	a.SetConfirmTimeout(timeout)
	start := time.Now()
	if err := a.PublishConfirmed(&Message{Topic: "k/2", QoS: 1}, time.Second, nil, func(ok bool) { done <- ok }); err != nil {
		t.Fatal(err)
	}
	if ok := <-done; ok {
		t.Fatal("a send B never answered was confirmed")
	}
	if d := time.Since(start); d < timeout {
		t.Fatalf("failed after %v, before the timeout", d)
	}
	if st := a.Stats(); st.ConfirmsFailed != 2 {
		t.Fatalf("stats: %d confirms failed, want 2", st.ConfirmsFailed)
	}
}

// TestDeadRoutesHeld: with HoldDeadRoutes, a node that dies keeps its
// routes until the survivors took it over (Hooks.NodeDead) and a grace
// passed: a confirmed send matching them meanwhile is not confirmed
// (it would have gone to no node, and been), and one after is sent
// plainly.
func TestDeadRoutesHeld(t *testing.T) {
	urls := natstest.Cluster(t, 1)
	var published wills
	dead := make(chan string, 1)
	hookDone := make(chan struct{})
	a, err := Start(Config{Name: "c1", NodeName: "A", NodeTimeout: time.Second, NATS: NATSConfig{URL: urls[0]}},
		testLogger(t), newRecorder().deliver)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	// Run before a.Close: a test failing before letting the hook go
	// would have the cleanup wait for it.
	var release sync.Once
	letGo := func() { release.Do(func() { close(hookDone) }) }
	t.Cleanup(letGo)
	a.SetWillPublisher(func(data []byte) { published.add("A", string(data)) })
	const grace = 300 * time.Millisecond
	a.HoldDeadRoutes(grace)
	a.Watch(Hooks{NodeDead: func(n string) {
		dead <- n
		<-hookDone // the takeover takes its time
	}})
	rb := newRecorder()
	b, err := Start(Config{Name: "c1", NodeName: "B", NodeTimeout: time.Second, NATS: NATSConfig{URL: urls[0]}},
		testLogger(t), rb.deliver)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	b.Watch(Hooks{})
	waitStore(t, a, b)
	b.Want("k/#")
	b.Want("probe/B")
	probe(t, a, "probe/B", rb)

	b.nc.Close() // B dies: no goodbye
	died := time.Now()
	if got := <-dead; got != "B" {
		t.Fatalf("%s found dead, want B", got)
	}
	// Found dead, its takeover under way: B's routes still match, however
	// long the takeover takes (here, longer than a silence of twice the
	// node timeout and the grace).
	done := make(chan bool, 2)
	if err := a.PublishConfirmed(&Message{Topic: "k/1", QoS: 1}, time.Second, nil, func(ok bool) { done <- ok }); err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for time.Since(died) < 2*time.Second+grace+2*summaryEvery {
		if !routed(a, "k/1", "B") {
			t.Fatalf("B's routes dropped %v after it died, its takeover not done", time.Since(died))
		}
		<-tick.C
	}
	letGo()
	if ok := <-done; ok {
		t.Fatal("a send matching a dead node's routes was confirmed")
	}
	testutil.WaitFor(t, "B's routes to go", func() bool { return !routed(a, "k/1", "B") })
	if err := a.PublishConfirmed(&Message{Topic: "k/2", QoS: 1}, time.Second, nil, func(ok bool) { done <- ok }); err != nil {
		t.Fatal(err)
	}
	if ok := <-done; !ok {
		t.Fatal("a send to no node, after the dead node's routes went, failed")
	}
}

// TestPublishConfirmedShared: a confirmed send whose topic a share group
// on another node matches waits for that node, which NATS gave the copy,
// to answer after its commit; a refusal fails it; a copy nobody
// subscribes to any more (NATS's no-responders) is confirmed, there
// being nobody to keep it; one never answered fails at the timeout.
func TestPublishConfirmedShared(t *testing.T) {
	urls := natstest.Cluster(t, 1)
	ra, rb := newRecorder(), newRecorder()
	a := startNode(t, "A", ra, testLogger(t), urls[0])
	b := startNode(t, "B", rb, testLogger(t), urls[0])
	owed := make(chan func(bool), 4)
	b.SetCommitted(nil, func(answer func(bool)) { owed <- answer })
	b.WantShared("g", "s/#")
	probe(t, a, "s/probe", rb)

	done := make(chan bool, 4)
	send := func(topic string) {
		t.Helper()
		if err := a.PublishConfirmed(&Message{Topic: topic, QoS: 1}, time.Second, nil, func(ok bool) { done <- ok }); err != nil {
			t.Fatal(err)
		}
	}
	a.SetConfirmTimeout(time.Minute)
	send("s/1")
	if m := rb.until(t, "s/1", "s/probe"); m[len(m)-1].Group != "g" {
		t.Fatalf("B got %+v, want it for group g", m[len(m)-1])
	}
	answer := <-owed
	select {
	case ok := <-done:
		t.Fatalf("confirmed (%v) before B answered", ok)
	default:
	}
	answer(true)
	if ok := <-done; !ok {
		t.Fatal("B kept the shared copy, but the send failed")
	}

	send("s/2")
	rb.until(t, "s/2", "s/probe")
	(<-owed)(false)
	if ok := <-done; ok {
		t.Fatal("B did not keep the shared copy, but the send was confirmed")
	}

	const timeout = 300 * time.Millisecond
	a.SetConfirmTimeout(timeout)
	send("s/3")
	rb.until(t, "s/3", "s/probe")
	<-owed // never answered
	if ok := <-done; ok {
		t.Fatal("a shared copy B never answered was confirmed")
	}

	// A copy on its way as B unsubscribes is lost, and fails at the
	// timeout.
	b.UnwantShared("g", "s/#")
	testutil.WaitFor(t, "a send to the group, gone, to be confirmed", func() bool {
		send("s/4")
		return <-done
	})
}

package cluster

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mqttd/internal/natstest"
	"mqttd/internal/testutil"
)

// floodTotal is more than a receiver's queue and a sender's together:
// without flow control, a held receiver must lose some.
const floodTotal = InQueueMessages + OutQueueMessages + 1000

// gate is a deliver that holds every message until the test lets it go,
// then keeps them (copies: the node reuses m), in order.
type gate struct {
	release chan struct{}
	once    sync.Once
	ch      chan *Message
}

func newGate(t *testing.T) *gate {
	t.Helper()
	g := &gate{release: make(chan struct{}), ch: make(chan *Message, floodTotal+16)}
	// Close waits for deliver: let it go, whether the test fails or not.
	t.Cleanup(g.open)
	return g
}

func (g *gate) deliver(m *Message) {
	<-g.release
	c := *m
	g.ch <- &c
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// inOrder receives total messages on flow/x from g, failing unless their
// payloads count from 0 up with none missing, within 10 s.
func (g *gate) inOrder(t *testing.T, total int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for want := range total {
		select {
		case m := <-g.ch:
			if m.Topic != "flow/x" || string(m.Payload) != strconv.Itoa(want) {
				t.Fatalf("got %s %q, want flow/x %d", m.Topic, m.Payload, want)
			}
		case <-deadline:
			t.Fatalf("message %d of %d not delivered within 10s", want, total)
		}
	}
}

// heldPair starts a receiver R, whose deliver g holds, wanting flow/#
// on the second server, and a sender P on the first, once each knows of
// the other: R's filter is in P's route table, P's pause subscription on
// R's server.
func heldPair(t *testing.T, g *gate) (p, r *Node) {
	t.Helper()
	s := natstest.Start(t, 2)
	urls := s.URLs()
	var err error
	r, err = Start(Config{Name: "c1", NodeName: "R", NATS: NATSConfig{URL: urls[1]}}, testLogger(t), g.deliver)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.open()
		if err := r.Close(); err != nil {
			t.Errorf("Close R: %v", err)
		}
	})
	p = startNode(t, "P", newRecorder(), testLogger(t), urls[0])
	logOnFailure(t, s, p, r)
	r.Want("flow/#")
	// P's flow subscription crossed the route before its want of probe/#.
	p.Want("probe/#")
	waitRoute(t, p, "flow/x", "R", true)
	waitRoute(t, r, "probe/x", "P", true)
	return p, r
}

// floodHeld publishes floodTotal QoS 1 messages on flow/x from p with
// PublishWaiting, on a goroutine whose result done gives, and returns
// once p's sending is held by r's pause and the publisher waits for
// room: nothing may have been dropped yet.
func floodHeld(t *testing.T, p, r *Node) (done <-chan error) {
	t.Helper()
	var waiting atomic.Bool
	block := func(f func()) {
		waiting.Store(true)
		f()
	}
	errs := make(chan error, 1)
	go func() {
		for i := range floodTotal {
			m := &Message{Topic: "flow/x", QoS: 1, Payload: []byte(strconv.Itoa(i))}
			if err := p.PublishWaiting(m, 10*time.Second, block); err != nil {
				errs <- fmt.Errorf("message %d: %w", i, err)
				return
			}
		}
		errs <- nil
	}()
	// Held now, its queue full: nothing leaves it until the pause ends.
	testutil.WaitFor(t, "the sender held by the receiver's pause, its queue full, its publisher waiting", func() bool {
		return waiting.Load() && p.Stats().Pausing == 1 && p.flow.holding.Load() != 0 && len(p.out) == OutQueueMessages
	})
	if st := r.Stats(); st.DroppedIn != 0 || st.PausesSent == 0 {
		t.Fatalf("receiver while held: %+v", st)
	}
	return errs
}

// TestPauseHoldsQoS1: a sender whose receiver cannot deliver is paused,
// its queue fills and PublishWaiting waits; once the receiver goes on,
// every message arrives, in order, none dropped anywhere. The flood is
// more than the receiver's queue: without the pause it would drop some.
func TestPauseHoldsQoS1(t *testing.T) {
	g := newGate(t)
	p, r := heldPair(t, g)
	done := floodHeld(t, p, r)
	g.open()
	g.inOrder(t, floodTotal)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the receiver resuming", func() bool { return r.Stats().ResumesSent > 0 && p.Stats().Pausing == 0 })
	if st := r.Stats(); st.DroppedIn != 0 || st.MessagesIn != floodTotal {
		t.Fatalf("receiver: %+v", st)
	}
	if st := p.Stats(); st.DroppedOut != 0 || st.PublishWaits == 0 || st.PublishWaited == 0 || st.PausesIn == 0 {
		t.Fatalf("sender: %+v", st)
	}
}

// TestPauseQoS0DropsCounted: Publish never waits: while the sender is
// held and its queue full, QoS 0 messages are dropped and counted by the
// sender, none by the receiver, and none arrives.
func TestPauseQoS0DropsCounted(t *testing.T) {
	g := newGate(t)
	p, r := heldPair(t, g)
	done := floodHeld(t, p, r)
	const dropped = 100
	for i := range dropped {
		if err := p.Publish(&Message{Topic: "flow/y", Payload: []byte(strconv.Itoa(i))}); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("QoS 0 message %d while held: %v, want ErrQueueFull", i, err)
		}
	}
	g.open()
	g.inOrder(t, floodTotal) // fails on a flow/y
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := r.Stats(); st.DroppedIn != 0 || st.MessagesIn != floodTotal {
		t.Fatalf("receiver: %+v", st)
	}
	if st := p.Stats(); st.DroppedOut != dropped {
		t.Fatalf("sender: %+v, want %d dropped", st, dropped)
	}
}

// TestPauseExpires: a node that paused the others and vanished without
// resuming holds their sending for PauseExpiry only.
func TestPauseExpires(t *testing.T) {
	s := natstest.Start(t, 1)
	urls := s.URLs()
	rr := newRecorder()
	p := startNode(t, "P", newRecorder(), testLogger(t), urls[0])
	r := startNode(t, "R", rr, testLogger(t), urls[0])
	logOnFailure(t, s, p, r)
	r.Want("exp/#")
	probe(t, p, "exp/probe", rr)
	ghost, err := nats.Connect(urls[0])
	if err != nil {
		t.Fatal(err)
	}
	defer ghost.Close()
	for _, bad := range []string{"", "p", "xghost"} {
		if err := ghost.Publish(flowSubject("c1"), []byte(bad)); err != nil {
			t.Fatal(err)
		}
	}
	if err := ghost.Publish(flowSubject("c1"), append([]byte{flowPause}, "ghost"...)); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the ghost's pause", func() bool { return p.Stats().Pausing == 1 })
	if err := p.Publish(&Message{Topic: "exp/after"}); err != nil {
		t.Fatal(err)
	}
	rr.until(t, "exp/after", "exp/probe")
	if st := p.Stats(); st.Pausing != 0 || st.Held == 0 || st.PausesIn != 1 || st.Malformed != 3 {
		t.Fatalf("sender after the pause expired: %+v", st)
	}
}

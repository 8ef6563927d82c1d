package cluster

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"mqttd/internal/natstest"
	"mqttd/internal/testutil"
	"mqttd/persistence"
)

// heldReplies is a TCP proxy in front of a NATS server whose answers to
// the client can be held back: the server gets and applies what the
// client sends, and the client hears nothing until release.
type heldReplies struct {
	ln   net.Listener
	mu   sync.Mutex
	cond *sync.Cond
	held bool
}

func holdReplies(t *testing.T, server string) *heldReplies {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &heldReplies{ln: ln}
	h.cond = sync.NewCond(&h.mu)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		h.release()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", server)
			if err != nil {
				c.Close()
				continue
			}
			wg.Go(func() {
				_, _ = io.Copy(s, c)
				s.Close()
			})
			wg.Go(func() {
				defer c.Close()
				buf := make([]byte, 32<<10)
				for {
					n, err := s.Read(buf)
					h.mu.Lock()
					for h.held {
						h.cond.Wait()
					}
					h.mu.Unlock()
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	return h
}

func (h *heldReplies) url() string { return "nats://" + h.ln.Addr().String() }

func (h *heldReplies) hold() {
	h.mu.Lock()
	h.held = true
	h.mu.Unlock()
}

func (h *heldReplies) release() {
	h.mu.Lock()
	h.held = false
	h.cond.Broadcast()
	h.mu.Unlock()
}

// openHeld opens a SessionStore whose connection goes through a
// heldReplies proxy, with writes that time out after timeout.
func openHeld(t *testing.T, timeout time.Duration) (*SessionStore, *heldReplies, *nats.Conn) {
	t.Helper()
	urls := natstest.Cluster(t, 1)
	h := holdReplies(t, urls[0][len("nats://"):])
	s, err := OpenSessionStore(connect(t, h.url()), SessionStoreConfig{Cluster: "c1", Node: "a", Timeout: timeout}, persistence.NewMemory())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, h, connect(t, urls[0])
}

func queueTwo(b *persistence.Batch) {
	b.PutSession(persistence.Session{ID: "s"})
	b.PutMessage(&persistence.Message{ID: 1, Topic: "t", Payload: []byte("x"), QoS: 2})
	b.PutOutbound("s", persistence.Outbound{Seq: 1, MessageID: 1, QoS: 2})
	b.PutOutbound("s", persistence.Outbound{Seq: 2, MessageID: 1, QoS: 2})
}

// TestSessionWriteUnansweredSentAgain: a batch the stream kept but
// whose answer was lost is not reported failed (the broker would refuse
// a message it stored, and its publisher's resend would be stored twice):
// it is sent again until a send is answered, and the stream holds it
// once.
func TestSessionWriteUnansweredSentAgain(t *testing.T) {
	const timeout = 200 * time.Millisecond
	s, h, direct := openHeld(t, timeout)
	h.hold()
	done := make(chan error, 1)
	go func() {
		var b persistence.Batch
		queueTwo(&b)
		done <- s.Apply(&b)
	}()
	testutil.WaitWithin(t, 10*time.Second, "the batch sent again", func() bool {
		return s.Writes().RoundTrips >= 2
	})
	h.release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a batch the stream kept, its answer lost, failed: %v", err)
		}
	case <-time.After(settleAttempts * timeout * 4):
		t.Fatal("the write did not return once answers came through")
	}
	if w := s.Writes(); w.Commits != 1 || w.RoundTrips < 2 {
		t.Fatalf("writes %+v: want one commit sent twice at least", w)
	}
	snap, err := openSessions(t, direct, "a", persistence.NewMemory()).Load()
	if err != nil || len(snap.Sessions) != 1 || len(snap.Sessions[0].Outbound) != 2 {
		t.Fatalf("read back %+v (%v): want the session with its 2 entries", snap.Sessions, err)
	}
}

// TestSessionWriteNeverAnsweredUnsettled: a batch no send of which is
// answered fails, after settleAttempts sends, as unsettled.
func TestSessionWriteNeverAnsweredUnsettled(t *testing.T) {
	const timeout = 100 * time.Millisecond
	s, h, _ := openHeld(t, timeout)
	h.hold()
	var b persistence.Batch
	queueTwo(&b)
	start := time.Now()
	err := s.Apply(&b)
	h.release()
	if !errors.Is(err, errUnsettled) {
		t.Fatalf("write never answered: %v, want errUnsettled", err)
	}
	if took := time.Since(start); took < settleAttempts*timeout {
		t.Fatalf("gave up after %v, before %d sends had time to be answered", took, settleAttempts)
	}
	if w := s.Writes(); w.RoundTrips < settleAttempts {
		t.Fatalf("writes %+v: want %d sends at least", w, settleAttempts)
	}
}

// TestSessionWriteNobodyListening: a batch nobody can receive (no
// stream on its subjects) was not stored: it fails as such once the
// timeout passes, not as unsettled after the longer wait.
func TestSessionWriteNobodyListening(t *testing.T) {
	urls := natstest.Cluster(t, 1)
	nc := connect(t, urls[0])
	const timeout = 100 * time.Millisecond
	var w storeWrites
	start := time.Now()
	err := publishAtomic(nc, "test-", []stateMsg{{subject: "nobody.listens", data: []byte("x")}}, timeout, &w)
	if !errors.Is(err, nats.ErrNoResponders) || errors.Is(err, errUnsettled) {
		t.Fatalf("a batch nobody received: %v, want no responders", err)
	}
	if took := time.Since(start); took >= settleAttempts*timeout {
		t.Fatalf("gave up after %v: waited as for an unanswered batch", took)
	}
}

// TestReadLosingMetaGroup: a read that loses JetStream's meta group (two
// of three servers stop) between its pages, the stream's own server
// going on, reads to the end. jetstream's ordered consumer made its
// consumer again for each page, through the meta group, trying without
// end: the read never returned, nor a node's Close waiting for it.
func TestReadLosingMetaGroup(t *testing.T) {
	servers := natstest.Start(t, 3)
	nc := connect(t, servers.URLs()[0])
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "pages", Subjects: []string{"pages.>"}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	for i := range readPage + 1 {
		if _, err := js.Publish(ctx, "pages."+strconv.Itoa(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	// The reader's connection to the stream's server, which stays.
	leader := slices.IndexFunc([]int{0, 1, 2}, func(i int) bool { return servers.Server(i).Name() == stream.CachedInfo().Cluster.Leader })
	rjs, err := jetstream.New(connect(t, servers.URLs()[leader]))
	if err != nil {
		t.Fatal(err)
	}
	read := 0
	err = readAll(ctx, rjs, "pages", "pages.>", func(string, []byte) error {
		if read++; read == 1 {
			for i := range 3 {
				if i != leader {
					servers.Shutdown(i)
				}
			}
		}
		return nil
	})
	if err != nil || read != readPage+1 {
		t.Fatalf("read %d messages (%v), the meta group lost after the first: want %d", read, err, readPage+1)
	}
}

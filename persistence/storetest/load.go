package storetest

import (
	"fmt"
	"sync"
	"testing"

	"mqttd/persistence"
)

// testConcurrent has writers apply batches to sessions of their own while
// readers Load: every batch must show whole or not at all, and all of
// them in the end.
func testConcurrent(t *testing.T, h *harness) {
	const writers, batches, readers = 8, 25, 2
	errs := make(chan error, writers+readers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() { errs <- writeSession(h.s, w, batches) })
	}
	done := make(chan struct{})
	var rg sync.WaitGroup
	for range readers {
		rg.Go(func() { errs <- readWhole(h.s, done) })
	}
	wg.Wait()
	close(done)
	rg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		return
	}

	got := h.load()
	if len(got.Sessions) != writers || len(got.Messages) != writers*batches || len(got.Retained) != writers {
		t.Fatalf("Load: %d sessions, %d messages, %d retained; want %d, %d, %d",
			len(got.Sessions), len(got.Messages), len(got.Retained), writers, writers*batches, writers)
	}
	for _, st := range got.Sessions {
		if len(st.Outbound) != batches || len(st.AwaitingRel) != batches || len(st.Subscriptions) != 3 {
			t.Errorf("session %q: %d outbound, %d awaiting rel, %d subscriptions; want %d, %d, 3",
				st.Session.ID, len(st.Outbound), len(st.AwaitingRel), len(st.Subscriptions), batches, batches)
		}
	}
	for w := range writers {
		if id, want := got.Retained[fmt.Sprintf("r/%d", w)], concurrentID(w, batches-1); id != want {
			t.Errorf("retained r/%d = %d, want %d", w, id, want)
		}
	}
}

func concurrentID(writer, batch int) uint64 { return uint64(writer*1000 + batch + 1) }

// writeSession runs in its own goroutine: it returns its error rather
// than failing the test.
func writeSession(s persistence.Store, w, batches int) error {
	id := fmt.Sprintf("c%d", w)
	for i := range batches {
		var b persistence.Batch
		if i == 0 {
			b.PutSession(session(id))
		}
		m := message(concurrentID(w, i), fmt.Sprintf("t/%d/%d", w, i))
		b.PutMessage(m)
		b.PutOutbound(id, outbound(uint64(i+1), m.ID))
		b.PutAwaitingRel(id, uint16(i+1))
		b.PutSubscription(id, persistence.Subscription{Filter: fmt.Sprintf("t/%d/%d", w, i%3), ID: uint32(i + 1)})
		b.PutRetained(fmt.Sprintf("r/%d", w), m.ID)
		if err := s.Apply(&b); err != nil {
			return fmt.Errorf("writer %d, batch %d: %w", w, i, err)
		}
	}
	return nil
}

// readWhole Loads until done and checks that no batch of writeSession
// shows in part: each adds one outbound entry and one awaiting-rel id.
func readWhole(s persistence.Store, done <-chan struct{}) error {
	for {
		select {
		case <-done:
			return nil
		default:
		}
		snap, err := s.Load()
		if err != nil {
			return fmt.Errorf("concurrent Load: %w", err)
		}
		if err := checkSnapshot(snap); err != nil {
			return fmt.Errorf("concurrent Load: %w", err)
		}
		for _, st := range snap.Sessions {
			if len(st.Outbound) != len(st.AwaitingRel) {
				return fmt.Errorf("concurrent Load: session %q with %d outbound and %d awaiting rel: half a batch",
					st.Session.ID, len(st.Outbound), len(st.AwaitingRel))
			}
		}
	}
}

// testVolume fans 100 messages out to 100 sessions, deletes half the
// sessions and half of each remaining session's entries.
func testVolume(t *testing.T, h *harness) {
	const sessions, msgs = 100, 100
	h.do(func(b *persistence.Batch) {
		for i := range sessions {
			b.PutSession(session(fmt.Sprintf("s%03d", i)))
		}
	})
	for m := 1; m <= msgs; m++ {
		h.do(func(b *persistence.Batch) {
			b.PutMessage(message(uint64(m), fmt.Sprintf("t/%d", m)))
			for i := range sessions {
				b.PutOutbound(fmt.Sprintf("s%03d", i), outbound(uint64(m), uint64(m)))
			}
		})
	}
	h.do(func(b *persistence.Batch) {
		for i := sessions / 2; i < sessions; i++ {
			b.DeleteSession(fmt.Sprintf("s%03d", i))
		}
	})
	for i := range sessions / 2 {
		h.do(func(b *persistence.Batch) {
			for m := 2; m <= msgs; m += 2 {
				b.DeleteOutbound(fmt.Sprintf("s%03d", i), uint64(m))
			}
		})
	}
	checkVolume(t, h.load(), sessions/2, msgs/2)
	h.reopen()
	checkVolume(t, h.load(), sessions/2, msgs/2)
}

func checkVolume(t *testing.T, got *persistence.Snapshot, sessions, perSession int) {
	t.Helper()
	if len(got.Sessions) != sessions || len(got.Messages) != perSession {
		t.Fatalf("%d sessions, %d messages; want %d, %d", len(got.Sessions), len(got.Messages), sessions, perSession)
	}
	for _, st := range got.Sessions {
		if len(st.Outbound) != perSession {
			t.Fatalf("session %q: %d outbound, want %d", st.Session.ID, len(st.Outbound), perSession)
		}
		for j, o := range st.Outbound {
			if want := uint64(2*j + 1); o.Seq != want || o.MessageID != want {
				t.Fatalf("session %q: outbound[%d] = seq %d message %d, want %d", st.Session.ID, j, o.Seq, o.MessageID, want)
			}
		}
	}
	for _, m := range got.Messages {
		if m.ID%2 == 0 || m.Topic != fmt.Sprintf("t/%d", m.ID) {
			t.Fatalf("message %s kept", fmtMessage(m))
		}
	}
}

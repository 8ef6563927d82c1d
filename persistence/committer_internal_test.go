package persistence

import (
	"fmt"
	"testing"
	"time"
)

// TestCommitterLetsGoOfABurstsScratch: the scratch the committing
// goroutine keeps from one run to the next is bounded like the round's
// operations (keptOps). A burst (a message for many sessions, one unit
// each, all in one round) must not leave its units, its waiters and its
// map of referenced messages with the idle Committer for good: before the
// scratch was kept, a run's buffers went with its goroutine.
func TestCommitterLetsGoOfABurstsScratch(t *testing.T) {
	c := NewCommitter(NewMemory())
	const burst = 4 * keptOps
	var b Batch
	tickets := make([]uint64, 0, burst)
	for i := range burst {
		b.Reset()
		b.PutMessage(&Message{ID: uint64(i + 1), Topic: "t"})
		b.PutRetained(fmt.Sprint("t/", i), uint64(i+1))
		tickets = append(tickets, c.Add(&b, nil))
	}
	done := make(chan struct{}, burst)
	for _, tk := range tickets {
		c.Wait(tk, func() { done <- struct{}{} })
	}
	for range burst {
		<-done
	}
	// The waiters are told before the run ends: poll for its end.
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for c.isRunning() {
		select {
		case <-deadline:
			t.Fatal("the committing goroutine did not stop")
		case <-tick.C:
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := cap(c.round.Ops); n > keptOps {
		t.Errorf("idle committer keeps room for %d operations, want at most %d", n, keptOps)
	}
	if n := cap(c.taken); n > keptOps {
		t.Errorf("idle committer keeps room for %d units, want at most %d", n, keptOps)
	}
	if n := cap(c.ready); n > keptOps {
		t.Errorf("idle committer keeps room for %d waiters, want at most %d", n, keptOps)
	}
	if c.refs != nil {
		t.Errorf("idle committer keeps the map a round of %d referenced messages grew", burst)
	}
}

func (c *Committer) isRunning() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running
}

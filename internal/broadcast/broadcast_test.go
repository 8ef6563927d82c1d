package broadcast

import (
	"testing"
	"time"
)

// TestSignalWakesWaiters: a Signal closes the channel every waiter
// holds, and a Wait after it gets a new one, open until the next.
func TestSignalWakesWaiters(t *testing.T) {
	var n Next
	n.Waiters.Add(2)
	a, b := n.Wait(), n.Wait()
	if a != b {
		t.Fatal("two waiters before a Signal hold different channels")
	}
	n.Signal()
	for _, ch := range []<-chan struct{}{a, b} {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter's channel is still open after Signal")
		}
	}
	c := n.Wait()
	select {
	case <-c:
		t.Fatal("the channel of a Wait after the Signal is closed")
	default:
	}
	n.Waiters.Add(-2)
}

// TestSignalWithoutWaiters: with no waiter counted, Signal leaves the
// channel open (it costs one atomic load).
func TestSignalWithoutWaiters(t *testing.T) {
	var n Next
	ch := n.Wait()
	n.Signal()
	select {
	case <-ch:
		t.Fatal("Signal closed the channel with no waiter counted")
	default:
	}
}

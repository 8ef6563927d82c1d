// Package broadcast wakes every goroutine waiting for the next event of
// a kind, at the cost of one atomic load per event while none waits.
package broadcast

import (
	"sync"
	"sync/atomic"
)

// Next is the next event: waiters count themselves in Waiters, then take
// the channel Wait returns, which the next Signal closes. The zero value
// is ready to use.
type Next struct {
	// Waiters counts the goroutines waiting; Signal does nothing while it
	// is 0. A waiter adds itself before it looks at what it waits for,
	// so that an event after the look closes the channel it holds.
	Waiters atomic.Int32
	mu      sync.Mutex
	ch      chan struct{}
}

// Wait returns a channel closed at the next Signal.
func (n *Next) Wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

// Signal wakes the waiters, if any.
func (n *Next) Signal() {
	if n.Waiters.Load() == 0 {
		return
	}
	n.mu.Lock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
	n.mu.Unlock()
}

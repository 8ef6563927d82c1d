package mqttd

import "sync"

// parked is what the reader and writer pools share: goroutines that park
// between pieces of work, at most maxIdle of them, and are handed a
// connection each. mu is the pool's lock, which guards the pool's own
// fields too.
type parked struct {
	mu sync.Mutex
	// ch hands a connection to a parked goroutine: a send follows the
	// reservation of one (handLocked), and each parked goroutine takes
	// one value, so a send waits at most for a goroutine just parking to
	// take its own.
	ch         chan *conn
	maxIdle    int
	idle       int // parked and not yet reserved
	goroutines int // the pool's goroutines, working or parked
	closed     bool
}

// handLocked hands c to a parked goroutine, releasing mu, and reports
// true; with none parked it reports false and mu stays held.
func (k *parked) handLocked(c *conn) bool {
	if k.idle == 0 {
		return false
	}
	k.idle--
	k.mu.Unlock()
	k.ch <- c
	return true
}

// parkLocked parks the calling goroutine, releasing mu, until it is
// handed a connection. nil ends the goroutine, no longer counted: the
// pool is closed, or maxIdle are parked already.
func (k *parked) parkLocked() *conn {
	if k.closed || k.idle >= k.maxIdle {
		k.goroutines--
		k.mu.Unlock()
		return nil
	}
	k.idle++
	k.mu.Unlock()
	c := <-k.ch
	if c == nil {
		k.mu.Lock()
		k.goroutines--
		k.mu.Unlock()
	}
	return c
}

// close ends the parked goroutines; those working end when they would
// park again.
func (k *parked) close() {
	k.mu.Lock()
	n := k.idle
	k.idle = 0
	k.closed = true
	k.mu.Unlock()
	for range n {
		k.ch <- nil
	}
}

package mqttd

import "sync"

// The goroutines that serve connections: readers (goroutines_linux.go)
// and writers park between pieces of work in pools of their own, so a
// wakeup hands a connection to a parked goroutine instead of starting
// one.

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

// writerPool runs the writer goroutines (runWriter). A few stay parked
// between writes, so a delivery hands its connection to one of them
// instead of starting a goroutine, whose stack starts small and grows
// again through the write: over WebSocket (gorilla's frames, a deadline
// per write) and TLS the growth, a copy of the stack each time, showed in
// qos1's profile, every write of a window starting a writer.
// A woken writer runs next on its P as a new goroutine does, so it yields
// to the readers behind it just the same (runWriter).
type writerPool struct{ parked }

// maxParkedWriters bounds the writer goroutines (and grown stacks) kept
// idle.
const maxParkedWriters = 16

func newWriterPool() *writerPool {
	return &writerPool{parked{ch: make(chan *conn, maxParkedWriters), maxIdle: maxParkedWriters}}
}

// start has c's outbox written by a parked writer, or by a new one. The
// caller holds c's writing role (claimWriterLocked).
func (p *writerPool) start(c *conn) {
	p.mu.Lock()
	if p.handLocked(c) {
		return
	}
	p.goroutines++
	p.mu.Unlock()
	go p.loop(c)
}

func (p *writerPool) loop(c *conn) {
	for c != nil {
		c.runWriter()
		p.mu.Lock()
		c = p.parkLocked() // c is done with meanwhile: a parked writer pins no connection
	}
}

// counts returns the writers parked and the pool's goroutines.
func (p *writerPool) counts() (parked, goroutines int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.idle, p.goroutines
}

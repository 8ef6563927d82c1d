package mqttd

import "sync"

// writerPool runs the writer goroutines (runWriter). A few stay parked
// between writes, so a delivery hands its connection to one of them
// instead of starting a goroutine, whose stack starts small and grows
// again through the write: over WebSocket (gorilla's frames, a deadline
// per write) and TLS the growth, a copy of the stack each time, was 4.7%
// of the broker's CPU in qos1, every write of a window starting a writer.
// A woken writer runs next on its P as a new goroutine does, so it yields
// to the readers behind it just the same (runWriter).
type writerPool struct {
	// ch hands a connection to a parked writer: a send follows a
	// reservation of one (idle), and each parked writer takes one value,
	// so a send waits at most for a writer just parking to take its own.
	ch         chan *conn
	mu         sync.Mutex
	idle       int // parked and not yet handed a connection
	goroutines int // the pool's writer goroutines, running or parked
	closed     bool
}

// maxParkedWriters bounds the writer goroutines (and grown stacks) kept
// idle.
const maxParkedWriters = 16

func newWriterPool() *writerPool {
	return &writerPool{ch: make(chan *conn, maxParkedWriters)}
}

// start has c's outbox written by a parked writer, or by a new one. The
// caller holds c's writing role (claimWriterLocked).
func (p *writerPool) start(c *conn) {
	p.mu.Lock()
	if p.idle > 0 {
		p.idle--
		p.mu.Unlock()
		p.ch <- c
		return
	}
	p.goroutines++
	p.mu.Unlock()
	go p.loop(c)
}

func (p *writerPool) loop(c *conn) {
	for c != nil {
		c.runWriter()
		c = p.next() // c is done with meanwhile: a parked writer pins no connection
	}
}

// next parks the writer until a connection is handed to it; nil ends the
// goroutine: enough are parked, or the pool is closed.
func (p *writerPool) next() *conn {
	p.mu.Lock()
	if p.closed || p.idle >= maxParkedWriters {
		p.goroutines--
		p.mu.Unlock()
		return nil
	}
	p.idle++
	p.mu.Unlock()
	c := <-p.ch
	if c == nil {
		p.mu.Lock()
		p.goroutines--
		p.mu.Unlock()
	}
	return c
}

// counts returns the writers parked and the pool's goroutines.
func (p *writerPool) counts() (parked, goroutines int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.idle, p.goroutines
}

// close ends the parked writers, once no writer can start any more
// (Shutdown, after every connection's outbox is closed).
func (p *writerPool) close() {
	p.mu.Lock()
	n := p.idle
	p.idle = 0
	p.closed = true
	p.mu.Unlock()
	for range n {
		p.ch <- nil
	}
}

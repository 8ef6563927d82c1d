package mqttd

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

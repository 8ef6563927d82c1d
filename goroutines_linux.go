//go:build linux

package mqttd

import "runtime"

// readerPool runs the reader goroutines: at most max of them, so that a
// burst in which every connection becomes readable at once (a power cut
// coming back, all devices publishing on the same tick) costs max stacks
// and read buffers, not one per connection; the connections past the
// bound wait, in the order they became readable, for a reader to finish.
// A few readers stay parked between wakeups, so a wakeup hands its
// connection to one of them instead of starting a goroutine, which then
// grows its stack through the handlers again, which showed in the conns
// scenario's profile (docs/perf-log.md).
//
// A reader counted in the bound blocks only for bounded times: a
// publisher's stall on a full outbox (maxStall), a commit it waits for,
// the write of its own answers to a client that does not read
// (limits.write_timeout, after which the client is closed); so the
// connections waiting behind max busy readers are served within those
// bounds. Code that may block for longer (an Authenticator, an
// authentication exchange: a lookup, the password file's delay after a
// failure) runs outside the bound (conn.mayBlock), or one host sending
// bad passwords could hold every reader.
type readerPool struct {
	// parked counts the reader goroutines, serving or parked, and hands
	// connections to the parked ones; its lock guards the fields below.
	parked
	srv *Server
	max int
	// waiting holds the connections that found max readers busy, from
	// head on. A connection is in it at most once (its reader state
	// went from idle to running), so it is bounded by the connections.
	waiting []*conn
	head    int
	warned  throttle
}

// maxParkedReaders bounds the goroutines (and grown stacks) kept idle.
const maxParkedReaders = 32

// readersPerCPU and minReaders set the bound on reader goroutines: readers
// beyond the CPUs only help while some wait (on a stall or a commit), and
// each holds a read buffer and a stack of 16-32 KiB while it runs.
const (
	readersPerCPU = 32
	minReaders    = 128
)

func newReaderPool(s *Server) *readerPool {
	return &readerPool{parked: parked{ch: make(chan *conn, maxParkedReaders), maxIdle: maxParkedReaders},
		srv: s, max: max(minReaders, readersPerCPU*runtime.GOMAXPROCS(0))}
}

// run has c's socket drained by a parked reader, or by a new one, or by
// the first reader to finish when max are busy.
func (p *readerPool) run(c *conn) {
	p.mu.Lock()
	if p.handLocked(c) {
		return
	}
	switch {
	case p.goroutines < p.max || p.closed:
		// Once closed, readers parked then are no longer idle but still
		// counted until they end: the bound could leave a last wakeup
		// waiting for no reader.
		p.goroutines++
		p.mu.Unlock()
		go p.loop(c)
	default:
		// Moved down only when the append would grow the slice, as the
		// held answers' queue is (durable.go).
		if p.head > 0 && len(p.waiting) == cap(p.waiting) {
			n := copy(p.waiting, p.waiting[p.head:])
			clear(p.waiting[n:])
			p.waiting, p.head = p.waiting[:n], 0
		}
		p.waiting = append(p.waiting, c)
		p.mu.Unlock()
		p.srv.stats.readerWaits.Add(1)
		if !p.warned.limited() {
			p.srv.log.Warn().Int("readers", p.max).
				Msg("every reader is busy: connections with bytes to read wait for one; mqttd_reader_waits_total counts them")
		}
	}
}

func (p *readerPool) loop(c *conn) {
	for c != nil {
		c.readEvents()
		c = p.next() // c is dead meanwhile: a parked reader pins no connection
	}
}

// next is the connection the reader serves next: the oldest waiting, or
// the one a run hands it after it parks; nil means the goroutine is not
// needed: enough are parked, or the server is closing.
func (p *readerPool) next() *conn {
	p.mu.Lock()
	if p.goroutines > p.max { // one that blocked outside the bound is back
		p.goroutines--
		p.mu.Unlock()
		return nil
	}
	if c := p.popLocked(); c != nil {
		p.mu.Unlock()
		return c
	}
	return p.parkLocked()
}

// popLocked takes the connection that has waited longest, if any.
func (p *readerPool) popLocked() *conn {
	if p.head == len(p.waiting) {
		return nil
	}
	c := p.waiting[p.head]
	p.waiting[p.head] = nil
	p.head++
	if p.head == len(p.waiting) {
		p.waiting, p.head = p.waiting[:0], 0
	}
	return c
}

// leave takes the calling reader out of the bound while it runs code that
// may block; the connection that has waited longest, if any, gets a
// reader of its own meanwhile. rejoin counts it again: the bound is then
// passed until a reader finishes.
func (p *readerPool) leave() {
	p.mu.Lock()
	p.goroutines--
	c := p.popLocked()
	if c != nil {
		p.goroutines++
	}
	p.mu.Unlock()
	if c != nil {
		go p.loop(c)
	}
}

func (p *readerPool) rejoin() {
	p.mu.Lock()
	p.goroutines++
	p.mu.Unlock()
}

// mayBlock runs f, which may block for as long as it likes (user code:
// an Authenticator, an authentication exchange), outside the bound on
// reader goroutines, when c's reader is one of them.
func (c *conn) mayBlock(f func()) {
	if c.ev == nil {
		f()
		return
	}
	c.srv.readers.leave()
	defer c.srv.readers.rejoin()
	f()
}

// close ends the parked readers; those serving end when done, and later
// wakeups (the server's last closes) get a reader each that then ends.
func (p *readerPool) close() {
	if p != nil {
		p.parked.close()
	}
}

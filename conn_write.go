package mqttd

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"mqttd/packets"
)

// The outbox and its writer: every frame for a connection is appended to
// its outbox with one call, enqueue, and exactly one goroutine at a time
// (whoever holds the outbox's writing role) takes the frames out and
// writes them, so no I/O happens under a lock and a publisher never waits
// for a subscriber's socket. The writer writes with conn.write: the
// event engine's descriptor (engine_linux.go, internal/netpoll) or, for a
// connection read by a goroutine, its net.Conn (writeNetConn, here).

// frameBuf is a pooled buffer of encoded frames. Idle connections hold
// none: buffers are taken when there is something to write and returned
// when the writer runs dry.
type frameBuf struct{ b []byte }

// maxPooledBuf keeps buffers grown by a burst to a large size out of the
// pool: whoever takes one from it next, perhaps a connection whose client
// has stopped reading with a few bytes pending, would hold all of it, and
// limits.max_outbox_bytes_total counts pending bytes, not capacity. Up to
// 4 MiB went back for a while (GC cycles per 1.6M fan-in messages ~125
// against ~200 at this bound, with growDoubling either way).
const maxPooledBuf = 256 << 10

var framePool = sync.Pool{New: func() any { return &frameBuf{b: make([]byte, 0, 4096)} }}

// growDoubling returns b with room for n more bytes, at least doubling its
// capacity when it must grow: append's own growth slows to 1.25x for large
// slices, which made a 1 MiB frame arriving in 16 KiB reads allocate five
// times its size, and an outbox filled by small frames copy itself about
// twenty times on its way from 4 KiB to 512 KiB.
func growDoubling(b []byte, n int) []byte {
	if len(b)+n <= cap(b) {
		return b
	}
	grown := make([]byte, len(b), max(2*cap(b), len(b)+n))
	copy(grown, b)
	return grown
}

// frameRoom is the room enqueue makes before adding frames; most are
// smaller.
const frameRoom = 512

func putFrameBuf(f *frameBuf) {
	if f != nil && cap(f.b) <= maxPooledBuf {
		f.b = f.b[:0]
		framePool.Put(f)
	}
}

// outbox holds encoded frames waiting for a connection's single writer.
type outbox struct {
	mu    sync.Mutex
	buf   *frameBuf // frames not yet taken by the writer
	spare *frameBuf // the writer's last buffer, reused for the next swap
	// roomCh is closed by the writer when a completed write leaves room,
	// for publishers stalled on a full outbox; stuck is set when a stall
	// timed out and cleared by the next completed write.
	roomCh chan struct{}
	// inWrite is the bytes the writer has taken and not finished
	// writing: at most max_outbox_bytes (≤ 1 GiB) and a frame, so an
	// int32, which keeps the outbox, and conn, a word smaller.
	inWrite  int32
	max      int32
	writing  bool // a writer owns the socket
	deferred bool // frames were added without waking a writer
	closed   bool
	stuck    bool
	// sealed is set when the server's DISCONNECT is queued: nothing may
	// follow it on the wire [MQTT-3.14.4-1], so later enqueues fail as on
	// a closed outbox while what is pending is still written.
	sealed bool
	// waiting is set while the connection is on the server's list of
	// those refused by limits.max_outbox_bytes_total (outboxWaiters).
	waiting bool
}

// enqueueMode says how enqueue treats the frames it adds.
type enqueueMode uint8

const (
	// deferred frames are the reader's answers to its own client: they
	// wait for the reader's flush once its buffered input is handled, so
	// a burst of 100 PUBLISHes costs one write of 100 PUBACKs. They are
	// not bounded by the outbox limit: dropping an answer would break the
	// protocol.
	deferred enqueueMode = iota
	// woken frames come from another goroutine (a delivery): a writer
	// goroutine is started when none runs.
	woken
	// bounded is woken, but refused when the outbox already holds its
	// maximum (QoS 0 deliveries, which may then be dropped).
	bounded
	// inline frames are written by the caller itself when no writer runs,
	// each write bounded by inlineWriteTimeout: for the DISCONNECT a
	// closing goroutine sends before it closes the socket. They seal the
	// outbox.
	inline
	// last is deferred, and seals the outbox: the reader's DISCONNECT.
	last
)

// inlineWriteTimeout bounds how long a goroutine closing a connection
// waits for its last frames to be written, so that a stuck client cannot
// delay whoever is closing it.
const inlineWriteTimeout = time.Second

// enqueue appends frames to the outbox: add gets the outbox's buffer and
// returns it with the frames appended. It reports false, without calling
// add, when the connection is closed or a bounded outbox is full.
func (c *conn) enqueue(mode enqueueMode, add func(b []byte) []byte) bool {
	ok, _ := c.enqueueFit(mode, add, false)
	return ok
}

// enqueueFit is enqueue that, with wantFit, also returns what fit returns
// once the frames are added, under the same hold of the lock: the pump
// asks fit after each run it writes (writeOutboundRun), where a second
// lock and unlock per message showed in qos1's profile. fit is
// -1 when nothing was added.
func (c *conn) enqueueFit(mode enqueueMode, add func(b []byte) []byte, wantFit bool) (ok bool, fit int) {
	o := &c.out
	o.mu.Lock()
	if o.closed || o.sealed || (mode == bounded && o.pendingLocked() >= int(o.max)) {
		o.mu.Unlock()
		return false, -1
	}
	if o.buf == nil {
		o.buf = framePool.Get().(*frameBuf)
	}
	o.buf.b = growDoubling(o.buf.b, frameRoom)
	before := len(o.buf.b)
	o.buf.b = add(o.buf.b)
	c.srv.stats.outboxBytes.Add(int64(len(o.buf.b) - before))
	o.sealed = mode == inline || mode == last
	start := false
	if !o.writing {
		if mode == deferred || mode == last {
			o.deferred = true
		} else {
			c.claimWriterLocked(mode != inline)
			start = true
		}
	}
	if wantFit {
		fit, _ = c.fitLocked()
	}
	o.mu.Unlock()
	if start && mode == inline {
		c.writeWithin(inlineWriteTimeout)
	} else if start {
		c.srv.writerGoroutines.start(c)
	}
	return true, fit
}

// claimWriterLocked gives the caller the writing role. A writer goroutine
// about to be started is counted here, under the outbox lock, so Shutdown
// (which waits for the connection to close the outbox first) never misses
// one.
func (c *conn) claimWriterLocked(goroutine bool) {
	c.out.writing, c.out.deferred = true, false
	if goroutine {
		c.srv.writers.Add(1)
		c.srv.writersDue.Add(1)
	}
}

// send queues a packet the reader answers with (CONNACK, PUBACK, SUBACK,
// ...), to be written at the reader's next flush.
func (c *conn) send(p packets.Packet) {
	c.enqueue(deferred, func(b []byte) []byte {
		b, err := p.Append(b, c.version)
		if err != nil {
			c.fields(c.srv.log.Error()).Err(err).Stringer("type", p.Type()).Msg("cannot encode packet")
		}
		return b
	})
}

// sendEither sends p, or else a.
func (c *conn) sendEither(p packets.Packet, a *packets.Ack) {
	if p != nil {
		c.send(p)
		return
	}
	c.enqueue(deferred, func(b []byte) []byte {
		b, err := a.Append(b, c.version)
		if err != nil {
			c.fields(c.srv.log.Error()).Err(err).Stringer("type", a.Type).Msg("cannot encode packet")
		}
		return b
	})
}

// sendNow queues p and writes everything queued from the reader goroutine
// itself; used right before the reader closes the connection.
func (c *conn) sendNow(p packets.Packet) {
	c.send(p)
	c.flushDeferred()
}

// flushDeferred writes the deferred frames (the reader's own answers) on
// the reader's goroutine, unless a writer is already running.
func (c *conn) flushDeferred() {
	if c.claimDeferred(false) {
		c.writeLoop()
	}
}

// wakeDeferred hands the deferred frames to a writer goroutine, unless a
// writer is already running.
func (c *conn) wakeDeferred() {
	if c.claimDeferred(true) {
		c.srv.writerGoroutines.start(c)
	}
}

// claimDeferred gives the caller the writing role when deferred frames
// wait and no writer is running; goroutine says a writer goroutine will
// take it (claimWriterLocked).
func (c *conn) claimDeferred(goroutine bool) bool {
	o := &c.out
	o.mu.Lock()
	claimed := !o.writing && o.deferred && !o.closed
	if claimed {
		c.claimWriterLocked(goroutine)
	}
	o.mu.Unlock()
	return claimed
}

// flushAnswers writes, on the reader's goroutine, what is queued for the
// client before the reader closes the connection, each write bounded by
// inlineWriteTimeout: a client that sent CONNECT, SUBSCRIBE and
// DISCONNECT in one write, or closed its side after them, still gets its
// CONNACK and SUBACK. A writer goroutine already running is waited for
// as long.
func (c *conn) flushAnswers() {
	o := &c.out
	o.mu.Lock()
	claimed := !o.writing && o.deferred && !o.closed
	if claimed {
		c.claimWriterLocked(false)
	}
	pending := o.pendingLocked() > 0
	o.mu.Unlock()
	switch {
	case claimed:
		c.writeWithin(inlineWriteTimeout)
	case pending:
		c.drain(time.Now().Add(inlineWriteTimeout))
	}
}

// roomSignal returns a channel closed when a completed write leaves room,
// or nil when the client is stuck, sealed or closed and no publisher
// should wait. Frames queued without a wake (a reader's own answers) may
// be what fills the outbox; then nobody would write them while their
// reader waits, so a writer is started for them.
func (c *conn) roomSignal() <-chan struct{} { return c.writeSignal(false) }

// drainSignal is roomSignal for the goroutine that sealed the outbox with
// its DISCONNECT and waits for it to be written: nil only when closed.
func (c *conn) drainSignal() <-chan struct{} { return c.writeSignal(true) }

func (c *conn) writeSignal(draining bool) <-chan struct{} {
	o := &c.out
	o.mu.Lock()
	if o.closed || (!draining && (o.stuck || o.sealed)) {
		o.mu.Unlock()
		return nil
	}
	start := !o.writing && o.deferred
	if start {
		c.claimWriterLocked(true)
	}
	if o.roomCh == nil {
		o.roomCh = make(chan struct{})
	}
	room := o.roomCh
	o.mu.Unlock()
	if start {
		c.srv.writerGoroutines.start(c)
	}
	return room
}

// waitRoom waits for room to close, until deadline at the latest.
func waitRoom(room <-chan struct{}, deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-room:
		return true
	case <-t.C:
		return false
	}
}

// runWriter is a writer goroutine's work (writerPool), started by enqueue,
// wakeDeferred or writeSignal.
//
// With less than writerBatch to write it first yields: a new goroutine
// runs next on its P, ahead of the readers the poller has already woken,
// so a subscriber's writer wrote the one delivery of the first of them
// and was started again for the next. Behind them, it writes what all of
// them delivered in one write: with 10,000 devices publishing 10,000
// msg/s, writes went from 21,600 to 14,000 a second and broker CPU per
// message from 39 to 31-35 µs. With more, it writes at once, while the
// bytes are in the cache.
func (c *conn) runWriter() {
	defer c.srv.writers.Done()
	c.out.mu.Lock()
	small := c.out.pendingLocked() < writerBatch
	c.out.mu.Unlock()
	if small {
		runtime.Gosched()
	}
	c.srv.writersDue.Add(-1)
	c.writeLoop()
}

// writerBatch is what a new writer writes without waiting for more.
const writerBatch = 4 << 10

// writeLoop is the connection's writer while it holds the outbox's writing
// role: it writes everything pending, one write per batch, then refills
// the outbox from the session queue, until nothing is left.
func (c *conn) writeLoop() { c.writeWithin(c.srv.limits().WriteTimeout) }

// writeWithin is writeLoop with each write bounded by timeout.
func (c *conn) writeWithin(timeout time.Duration) {
	for {
		f, ok := c.out.take(&c.srv.stats.outboxBytes)
		if !ok {
			c.srv.outboxWait.wake()
			return
		}
		n, err := c.write(f.b, timeout)
		c.out.written(f, &c.srv.stats.outboxBytes)
		c.srv.outboxWait.wake()
		c.srv.stats.bytesSent.Add(uint64(n))
		c.bytesOut.Add(uint64(n))
		if err != nil {
			c.closeWith(writeError(err))
			continue
		}
		c.pumpFrom(c, nil) // perhaps not on the reader's goroutine
	}
}

func writeError(err error) error {
	if isTimeout(err) {
		return errSlowConsumer
	}
	return closing(CloseWriteError, err)
}

// markStuck records that a stalled publisher gave up waiting.
func (o *outbox) markStuck() {
	o.mu.Lock()
	o.stuck = true
	o.mu.Unlock()
}

// answersWait reports whether the reader's own answers wait for its
// flush: deferred frames, and no writer running that would take them.
func (o *outbox) answersWait() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.deferred && !o.writing && !o.closed
}

func (o *outbox) pendingLocked() int {
	n := int(o.inWrite)
	if o.buf != nil {
		n += len(o.buf.b)
	}
	return n
}

// pending reports the bytes not yet written.
func (o *outbox) pending() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.pendingLocked()
}

// outboxFloor is what one outbox may hold whatever all of them together
// hold: small deliveries to clients that keep up go on while slow clients
// hold limits.max_outbox_bytes_total.
const outboxFloor = 64 << 10

// fit returns the size of the largest delivery (by Message.Size) the
// outbox takes now, -1 for none: any size while the outbox is under its
// own bound and all outboxes together hold less than that bound under
// theirs; closer, what is left under theirs; past it, up to outboxFloor.
// global reports that the bound of all outboxes limited the answer; the
// connection is then on the list of those woken when writes free room,
// so that its session queue moves again.
func (c *conn) fit() (fit int, global bool) {
	c.out.mu.Lock()
	defer c.out.mu.Unlock()
	return c.fitLocked()
}

// fitLocked is fit under the outbox lock.
func (c *conn) fitLocked() (fit int, global bool) {
	o := &c.out
	if o.closed || o.sealed {
		return -1, false
	}
	pending := o.pendingLocked()
	if pending >= int(o.max) {
		return -1, false
	}
	s := c.srv
	room := s.opts.Limits.MaxOutboxBytesTotal - s.stats.outboxBytes.Load()
	if room >= int64(o.max) {
		return math.MaxInt, false // only the connection's own bound applies
	}
	if !o.waiting {
		o.waiting = true
		s.outboxWait.add(c)
	}
	if room > outboxFloor {
		// What is left under the bound of all outboxes, not any size:
		// large deliveries to many connections must not take the total
		// far past it.
		return int(room), true
	}
	return outboxFloor - pending - 1, true
}

// take hands the writer everything pending. When nothing is, the writer
// role is given up and the buffers go back to the pool; what a closed
// outbox still held leaves total, the count of every outbox's bytes.
func (o *outbox) take(total *atomic.Int64) (*frameBuf, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed || o.buf == nil || len(o.buf.b) == 0 {
		o.writing = false
		o.releaseLocked(total)
		return nil, false
	}
	f := o.buf
	o.buf, o.spare = o.spare, nil
	o.inWrite = int32(len(f.b))
	return f, true
}

// releaseLocked returns the buffers to the pool, uncounting what they
// held.
func (o *outbox) releaseLocked(total *atomic.Int64) {
	if o.buf != nil {
		total.Add(-int64(len(o.buf.b)))
	}
	putFrameBuf(o.buf)
	putFrameBuf(o.spare)
	o.buf, o.spare = nil, nil
}

// written returns the writer's buffer after a write, whole or not: its
// bytes leave total either way.
func (o *outbox) written(f *frameBuf, total *atomic.Int64) {
	o.mu.Lock()
	total.Add(-int64(o.inWrite))
	o.inWrite = 0
	o.stuck = false
	if o.roomCh != nil && o.pendingLocked() < int(o.max) {
		close(o.roomCh)
		o.roomCh = nil
	}
	if o.spare == nil && cap(f.b) <= maxPooledBuf {
		f.b = f.b[:0]
		o.spare = f
	} else {
		putFrameBuf(f)
	}
	o.mu.Unlock()
}

// close makes every later enqueue fail; pending frames are discarded
// (by the writer, when one runs) and leave total.
func (o *outbox) close(total *atomic.Int64) {
	o.mu.Lock()
	o.closed = true
	if o.roomCh != nil {
		close(o.roomCh)
		o.roomCh = nil
	}
	if !o.writing {
		o.releaseLocked(total)
	}
	o.mu.Unlock()
}

// outboxWaiters are the connections a full limits.max_outbox_bytes_total
// held back. Their outboxes may be empty, so no write of their own would
// move their session queues again: the writers that free room wake them.
type outboxWaiters struct {
	n     atomic.Int32 // len(conns), read without the lock on every write
	mu    sync.Mutex
	conns []*conn
	max   int64
	total *atomic.Int64
}

func (w *outboxWaiters) add(c *conn) {
	w.mu.Lock()
	w.conns = append(w.conns, c)
	w.n.Store(int32(len(w.conns)))
	w.mu.Unlock()
}

// wake refills the waiting connections' outboxes from their sessions
// once every outbox together is under its bound again. The caller holds
// no lock.
func (w *outboxWaiters) wake() {
	if w.n.Load() == 0 || w.total.Load() >= w.max {
		return
	}
	w.mu.Lock()
	conns := w.conns
	w.conns = nil
	w.n.Store(0)
	w.mu.Unlock()
	for _, c := range conns {
		c.out.mu.Lock()
		c.out.waiting = false
		c.out.mu.Unlock()
		c.pumpFrom(nil, nil)
	}
}

// writeNetConn writes b to c.nc within timeout.
func (c *conn) writeNetConn(b []byte, timeout time.Duration) (int, error) {
	c.nc.SetWriteDeadline(time.Now().Add(timeout))
	return c.nc.Write(b)
}

//go:build linux

package mqttd

import (
	"bytes"
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"mqttd/packets"
)

// Reader states of a connection served by the poller.
const (
	readerIdle    int32 = iota // no reader goroutine
	readerRunning              // a reader is draining the socket
	readerAgain                // running, and bytes arrived since its last read
	readerDone                 // the connection is finished
)

// eventReadBufSize is the pooled buffer a reader reads into while it runs.
const eventReadBufSize = 16 << 10

// readScratch is what a running reader borrows from a pool: the buffer it
// reads into and a Publish it decodes every PUBLISH into, so that neither
// costs an idle connection anything nor a message an allocation.
type readScratch struct {
	buf    []byte
	pub    packets.Publish
	n      int
	err    error
	readFn func(fd uintptr) bool // rs.read, bound once per scratch, not per read
}

var readPool = sync.Pool{New: func() any {
	rs := &readScratch{buf: make([]byte, eventReadBufSize)}
	rs.readFn = rs.read
	return rs
}}

// read is one non-blocking read(2), run by RawConn.Read, which keeps the
// descriptor from being closed meanwhile; returning true stops it from
// waiting when nothing is there (EAGAIN).
func (rs *readScratch) read(fd uintptr) bool {
	rs.n, rs.err = syscall.Read(int(fd), rs.buf)
	return true
}

// eventConn is the state of a connection read on poller events instead
// of by a goroutine of its own.
type eventConn struct {
	raw     syscall.RawConn
	fd      int
	partial []byte // an incomplete frame carried to the next wakeup
}

// startEvent serves c from the poller when the connection is a plain
// socket; it reports false when c must have a reader goroutine instead.
func (c *conn) startEvent(pl *poller) bool {
	if pl == nil {
		return false
	}
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ev := &eventConn{raw: raw, fd: -1}
	raw.Control(func(fd uintptr) { ev.fd = int(fd) })
	if ev.fd < 0 {
		return false
	}
	c.ev = ev
	c.touch()
	c.setIdleLimit(c.srv.limits().ConnectTimeout)
	if err := pl.add(ev.fd, c); err != nil {
		c.ev = nil
		return false
	}
	c.srv.idle.watch(c)
	return true
}

// wakeReader is called by the poller when bytes arrive: it starts a reader
// goroutine, or tells the running one to read again before it stops.
func (c *conn) wakeReader() {
	for {
		switch s := c.rstate.Load(); s {
		case readerIdle:
			if c.rstate.CompareAndSwap(readerIdle, readerRunning) {
				c.srv.readers.run(c)
				return
			}
		case readerRunning:
			if c.rstate.CompareAndSwap(readerRunning, readerAgain) {
				return
			}
		default:
			return
		}
	}
}

// readerPool keeps a few reader goroutines parked between wakeups, so a
// wakeup hands its connection to one of them instead of starting a
// goroutine, which then grows its stack through the handlers again: pprof
// of the conns scenario had 8% of CPU in stack growth.
type readerPool struct {
	ch     chan *conn
	parked atomic.Int32
	done   <-chan struct{}
}

// maxParkedReaders bounds the goroutines (and grown stacks) kept idle.
const maxParkedReaders = 32

func newReaderPool(done <-chan struct{}) *readerPool {
	return &readerPool{ch: make(chan *conn), done: done}
}

// run has c's socket drained by a parked reader, or by a new one when
// none is waiting.
func (p *readerPool) run(c *conn) {
	select {
	case p.ch <- c:
	default:
		go p.loop(c)
	}
}

func (p *readerPool) loop(c *conn) {
	for c != nil {
		c.readEvents()
		c = p.next() // c is dead meanwhile: a parked reader pins no connection
	}
}

// next parks the goroutine until another connection needs a reader; nil
// means it is not needed: enough are parked, or the server is closing.
func (p *readerPool) next() *conn {
	if p.parked.Add(1) > maxParkedReaders {
		p.parked.Add(-1)
		return nil
	}
	defer p.parked.Add(-1)
	select {
	case c := <-p.ch:
		return c
	case <-p.done:
		return nil
	}
}

// readEvents drains the socket without blocking, handles every whole
// frame and flushes the answers, then gives up the goroutine and the
// read buffer until the poller reports more bytes.
func (c *conn) readEvents() {
	rs := readPool.Get().(*readScratch)
	defer readPool.Put(rs)
	defer func() {
		if r := recover(); r != nil {
			c.finishEvent(c.panicked(r))
		}
	}()
	ev := c.ev
	for {
		err := ev.raw.Read(rs.readFn)
		if err == nil {
			err = rs.err
		}
		n := rs.n
		switch {
		case err == nil && n > 0:
			c.srv.stats.bytesReceived.Add(uint64(n))
			// Before CONNECT the deadline counts from the accept, so a
			// client trickling bytes cannot hold a connection open; a
			// packet that has started to arrive has limits.frame_timeout
			// from its first byte, however it trickles.
			connected := c.connected.Load()
			if connected && !c.framing.Load() {
				c.touch()
			}
			frames, err := c.consume(rs.buf[:n], &rs.pub)
			if err != nil {
				c.finishEvent(err)
				return
			}
			if connected || c.connected.Load() {
				c.trackFrame(frames > 0)
			}
			if n == len(rs.buf) || c.hup.Load() {
				continue // there may be more, or the end of the stream
			}
			// A short read drained the socket: bytes arriving after it raise
			// a new edge, so the read that would only say EAGAIN is skipped.
			// A hang-up that came with the bytes is flagged by the poller.
		case err == nil: // a read of 0 bytes: the peer closed
			c.finishEvent(errClosedByPeer)
			return
		case errors.Is(err, syscall.EAGAIN):
		case errors.Is(err, syscall.EINTR):
			continue
		default:
			c.finishEvent(c.readError(err))
			return
		}
		c.commitHeld(false)
		c.flushDeferred()
		if c.rstate.CompareAndSwap(readerRunning, readerIdle) {
			return
		}
		if !c.rstate.CompareAndSwap(readerAgain, readerRunning) {
			return // finished meanwhile
		}
	}
}

// consume handles every whole frame in the bytes read, keeping an
// incomplete one for the next wakeup, and reports how many it handled.
// Each frame's body is copied into a slice of its own, which the decoded
// packet owns. The bytes kept count in the server's incoming bytes; a
// packet larger than incomingFloor that would take them past
// limits.max_incoming_bytes_total closes the connection.
func (c *conn) consume(b []byte, pub *packets.Publish) (frames int, err error) {
	ev := c.ev
	held := cap(ev.partial)
	defer func() { c.srv.stats.incomingBytes.Add(int64(cap(ev.partial) - held)) }()
	if len(ev.partial) == 0 {
		return c.frames(b, false, held, pub)
	}
	if fh, hn, need := c.carriedNeeds(b); need > 0 {
		// The carried frame ends in this read: only its own bytes join
		// it, and the rest of the read is handled where it is. Appending
		// the whole read to it instead allocated a read buffer's worth at
		// nearly every wakeup of a client that streams. The frame's
		// slice is its own, so its body is not copied again, unless it
		// is the tail of a much larger one it would keep alive.
		frame := append(ev.partial, b[:need]...)
		ev.partial = nil
		body := frame[hn:]
		if cap(frame) > 2*len(frame) {
			body = bytes.Clone(body)
		}
		if err := c.dispatch(fh, body, pub); err != nil {
			return 1, err
		}
		frames, err := c.frames(b[need:], false, held, pub)
		return frames + 1, err
	}
	b = appendDoubling(ev.partial, b)
	ev.partial = nil
	return c.frames(b, true, held, pub)
}

// carriedNeeds parses the header of the frame carried from an earlier
// read and returns how many bytes of b complete it; need is 0 when its
// header is not whole yet or is malformed (the frames that follow say
// so), or when the frame does not end within b.
func (c *conn) carriedNeeds(b []byte) (fh packets.FixedHeader, hn, need int) {
	var head [5]byte // the longest fixed header
	n := copy(head[:], c.ev.partial)
	n += copy(head[n:], b)
	fh, hn, err := packets.ParseFixedHeader(head[:n], c.version, c.srv.opts.Limits.MaxPacketSize)
	if err != nil || hn == 0 {
		return fh, 0, 0
	}
	need = hn + fh.Remaining - len(c.ev.partial)
	if need <= 0 || need > len(b) {
		return fh, 0, 0
	}
	return fh, hn, need
}

// frames handles the whole frames in b and keeps an incomplete last one.
// owned says b is the connection's own (carried) slice, not the read
// buffer: an incomplete frame then stays where it is. held is the
// capacity carried when the read began.
func (c *conn) frames(b []byte, owned bool, held int, pub *packets.Publish) (frames int, err error) {
	ev := c.ev
	maxSize := c.srv.opts.Limits.MaxPacketSize
	for len(b) > 0 {
		fh, n, err := packets.ParseFixedHeader(b, c.version, maxSize)
		if err != nil {
			return frames, c.readError(c.notMQTT(b, err))
		}
		if n == 0 || len(b) < n+fh.Remaining {
			// Kept in a slice that grows only as bytes arrive, so a
			// length that lies reserves nothing (CVE-2017-7651). Bytes
			// already carried stay where they are (frames decoded from
			// them were copied out), so a large frame arriving in many
			// reads is appended to, not copied again at every read.
			if owned {
				ev.partial = b
			} else {
				ev.partial = append([]byte(nil), b...)
			}
			if n > 0 && n+fh.Remaining > incomingFloor && c.srv.incomingFull(cap(ev.partial)-held) {
				c.sendDisconnect(packets.QuotaExceeded)
				return frames, errIncomingLimit
			}
			return frames, nil
		}
		body := b[n : n+fh.Remaining]
		if !packets.IsAck(fh.Type) || fh.Remaining > 4 {
			// A copy that is not zeroed first, unlike make then copy. An
			// acknowledgement without properties has nothing decoded from
			// it that outlives dispatch.
			body = bytes.Clone(body)
		}
		b = b[n+fh.Remaining:]
		frames++
		if err := c.dispatch(fh, body, pub); err != nil {
			return frames, err
		}
	}
	return frames, nil
}

// trackFrame sets the idle limit after a read: while a packet is partly
// arrived, limits.frame_timeout from its first byte (a client with no
// keepalive included); otherwise the keepalive's, from now when a packet
// completed.
func (c *conn) trackFrame(completed bool) {
	partial := len(c.ev.partial) > 0
	if completed {
		c.touch()
	}
	if partial == c.framing.Load() && !(partial && completed) {
		return
	}
	c.framing.Store(partial)
	limit := c.keepAlive * 3 / 2
	if partial {
		if frame := c.srv.limits().FrameTimeout; limit == 0 || frame < limit {
			limit = frame
		}
	}
	c.watchIdle(limit)
}

// appendDoubling appends src to dst, growing it as growDoubling does.
func appendDoubling(dst, src []byte) []byte { return append(growDoubling(dst, len(src)), src...) }

// touch records that bytes arrived, for the keepalive timer.
func (c *conn) touch() { c.lastRead.Store(time.Now().UnixNano()) }

func (c *conn) setIdleLimit(d time.Duration) { c.idleLimit.Store(int64(d)) }

// watchIdle files the connection with the idle wheel for a new limit,
// counted from now.
func (c *conn) watchIdle(limit time.Duration) {
	c.setIdleLimit(limit)
	c.touch()
	c.srv.idle.watch(c)
}

// idleTimeout closes a connection that sent nothing for its idle limit,
// or took longer than limits.frame_timeout to send a packet.
func (c *conn) idleTimeout() {
	if c.framing.Load() {
		c.sendDisconnectAsync(packets.KeepAliveTimeout)
		c.closeWith(errFrameTimeout)
	} else if c.connected.Load() {
		c.sendDisconnectAsync(packets.KeepAliveTimeout)
		c.closeWith(errKeepAlive)
	} else {
		c.closeWith(errConnectTimeout)
	}
}

// finishEvent ends an event-served connection on its reader goroutine,
// where the cleanup may use the reader's state.
func (c *conn) finishEvent(reason error) {
	c.flushAnswers()
	c.closeWith(reason)
	if c.rstate.Swap(readerDone) == readerDone {
		return
	}
	c.srv.stats.incomingBytes.Add(-int64(cap(c.ev.partial)))
	c.ev.partial = nil
	c.srv.idle.forget(c)
	defer c.srv.untrack(c) // even if the cleanup panics, or Shutdown would wait
	c.cleanup()
}

// closeSocket closes the connection. An event-served descriptor is
// unregistered first, so a new connection given the same number is never
// mistaken for this one, and the reader is woken to finish the connection.
func (c *conn) closeSocket() {
	if c.ev == nil {
		c.nc.Close()
		return
	}
	c.srv.poller.remove(c.ev.fd, c)
	c.nc.Close()
	c.wakeReader()
}

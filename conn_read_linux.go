//go:build linux

package mqttd

import (
	"bytes"
	"errors"
	"runtime"
	"sync"
	"syscall"

	"mqttd/packets"
)

// The reader of a connection the poller serves: started when bytes
// arrive, it drains the socket without blocking, cuts the bytes into
// frames (carrying an incomplete one to the next wakeup), handles them,
// and gives its goroutine back.

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
	buf []byte
	pub packets.Publish
}

var readPool = sync.Pool{New: func() any {
	return &readScratch{buf: make([]byte, eventReadBufSize)}
}}

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
		n, err := ev.Read(rs.buf)
		switch {
		case err == nil && n > 0:
			c.srv.stats.bytesReceived.Add(uint64(n))
			c.bytesIn.Add(uint64(n))
			// Before CONNECT the deadline counts from the accept, so a
			// client trickling bytes cannot hold a connection open; a
			// packet that has started to arrive has limits.frame_timeout
			// from its first byte, however it trickles.
			connected := c.connected.Load()
			if connected && !c.framing() {
				c.touch()
			}
			frames, err := c.consume(rs.buf[:n], &rs.pub)
			if err != nil {
				c.finishEvent(err)
				return
			}
			c.pumpIfDue()
			if connected || c.connected.Load() {
				c.trackFrame(frames > 0)
			}
			if n == len(rs.buf) || c.evState.Load()&evHup != 0 {
				// Before reading more, the writers this read's deliveries
				// started write them, while the outboxes are still in the
				// cache: a publisher that keeps the socket full otherwise
				// kept its reader going for up to a scheduler slice, and a
				// 100-subscriber fan-out had megabytes pending, half its CPU
				// in stores that missed the cache.
				runtime.Gosched()
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
		c.answerBeforeWait()
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
	held := cap(ev.frame())
	defer func() { c.srv.stats.incomingBytes.Add(int64(cap(ev.frame()) - held)) }()
	if len(ev.frame()) == 0 {
		return c.frames(b, false, held, pub)
	}
	if fh, hn, need := c.carriedNeeds(b); need > 0 {
		// The carried frame ends in this read: only its own bytes join
		// it, and the rest of the read is handled where it is. Appending
		// the whole read to it instead allocated a read buffer's worth at
		// nearly every wakeup of a client that streams. The frame's
		// slice is its own, so its body is not copied again, unless it
		// is the tail of a much larger one it would keep alive.
		frame := append(ev.frame(), b[:need]...)
		ev.keepFrame(nil)
		body := frame[hn:]
		if cap(frame) > 2*len(frame) {
			body = bytes.Clone(body)
		}
		if err := c.dispatch(fh, body, pub, false); err != nil {
			return 1, err
		}
		frames, err := c.frames(b[need:], false, held, pub)
		return frames + 1, err
	}
	b = appendDoubling(ev.frame(), b)
	ev.keepFrame(nil)
	return c.frames(b, true, held, pub)
}

// carriedNeeds parses the header of the frame carried from an earlier
// read and returns how many bytes of b complete it; need is 0 when its
// header is not whole yet or is malformed (the frames that follow say
// so), or when the frame does not end within b.
func (c *conn) carriedNeeds(b []byte) (fh packets.FixedHeader, hn, need int) {
	var head [5]byte // the longest fixed header
	n := copy(head[:], c.ev.frame())
	n += copy(head[n:], b)
	fh, hn, err := packets.ParseFixedHeader(head[:n], c.version, c.srv.opts.Limits.MaxPacketSize)
	if err != nil || hn == 0 {
		return fh, 0, 0
	}
	need = hn + fh.Remaining - len(c.ev.frame())
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
				ev.keepFrame(b)
			} else {
				ev.keepFrame(append([]byte(nil), b...))
			}
			if n > 0 && n+fh.Remaining > incomingFloor && c.srv.incomingFull(cap(ev.frame())-held) {
				c.sendDisconnect(packets.QuotaExceeded)
				return frames, errIncomingLimit
			}
			return frames, nil
		}
		if (fh.Type == packets.TypePuback || fh.Type == packets.TypePubcomp) && c.cl != nil {
			if used, k := c.ackRun(b, maxSize); k > 0 {
				b = b[used:]
				frames += k
				continue
			}
		}
		body := b[n : n+fh.Remaining]
		borrowed := c.inPlace(fh, body)
		if !borrowed {
			body = bytes.Clone(body) // not zeroed first, unlike make then copy
		}
		b = b[n+fh.Remaining:]
		frames++
		if err := c.dispatch(fh, body, pub, borrowed); err != nil {
			return frames, err
		}
	}
	return frames, nil
}

// ackRun completes the messages the PUBACKs and PUBCOMPs at the start of
// b acknowledge under one hold of the client's lock, where each took it
// (handleAck): a subscriber acknowledges its window of 100 in one write,
// and the lock's 100 round trips showed in qos1's profile. It
// stops before the first frame that is anything else, is incomplete or
// malformed, or acknowledges nothing in flight, which the caller then
// dispatches one by one as before (a refused one is the same refusal
// twice, leaving the session as it was). Only acknowledgements without
// properties join a run, and at most ackRunMax, so that what the lock is
// held for is bounded by the window, not by what a client writes. It
// returns the bytes and frames it handled. Not inlined, for the reason
// dispatchAck is not.
//
//go:noinline
func (c *conn) ackRun(b []byte, maxSize int) (used, frames int) {
	cl := c.cl
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for used < len(b) && frames < ackRunMax {
		t := packets.Type(b[used] >> 4)
		if t != packets.TypePuback && t != packets.TypePubcomp {
			break
		}
		fh, n, err := packets.ParseFixedHeader(b[used:], c.version, maxSize)
		if err != nil || n == 0 || fh.Remaining > 4 || len(b)-used < n+fh.Remaining {
			break
		}
		var a packets.Ack
		if c.srv.decode.DecodeAck(fh, b[used+n:used+n+fh.Remaining], c.version, &a) != nil {
			break
		}
		if !c.completeLocked(t, a.PacketID) {
			break
		}
		used += n + fh.Remaining
		frames++
	}
	if frames > 0 {
		c.pumpDue = true
	}
	return used, frames
}

// ackRunMax bounds a run of acknowledgements: the default window's.
const ackRunMax = 100

// appendDoubling appends src to dst, growing it as growDoubling does.
func appendDoubling(dst, src []byte) []byte { return append(growDoubling(dst, len(src)), src...) }

// finishEvent ends an event-served connection on its reader goroutine,
// where the cleanup may use the reader's state.
func (c *conn) finishEvent(reason error) {
	c.flushAnswers()
	if c.rstate.Swap(readerDone) == readerDone {
		c.closeWith(reason)
		return
	}
	c.closeReader(reason) // only the reader that finishes it may linger
	c.srv.stats.incomingBytes.Add(-int64(cap(c.ev.frame())))
	c.ev.keepFrame(nil)
	c.srv.idle.forget(c)
	defer c.endReader() // even if the cleanup panics, or Shutdown would wait
	c.cleanup()
}

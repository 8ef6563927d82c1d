package mqttd

import "sync"

// frameBuf is a pooled buffer of encoded frames. Idle connections hold
// none: buffers are taken when there is something to write and returned
// when the writer runs dry.
type frameBuf struct{ b []byte }

// maxPooledBuf keeps buffers grown by a burst to a huge size out of the pool.
const maxPooledBuf = 256 << 10

var framePool = sync.Pool{New: func() any { return &frameBuf{b: make([]byte, 0, 4096)} }}

func putFrameBuf(f *frameBuf) {
	if f != nil && cap(f.b) <= maxPooledBuf {
		f.b = f.b[:0]
		framePool.Put(f)
	}
}

// outbox holds encoded frames waiting for a connection's single writer.
// Anyone may append; exactly one goroutine at a time (the one that set
// writing) takes the frames out and writes them, so no I/O happens under
// the lock and a publisher never waits for a subscriber's socket.
type outbox struct {
	mu    sync.Mutex
	buf   *frameBuf // frames not yet taken by the writer
	spare *frameBuf // the writer's last buffer, reused for the next swap
	// roomCh is closed by the writer when a completed write leaves room,
	// for publishers stalled on a full outbox; stuck is set when a stall
	// timed out and cleared by the next completed write.
	roomCh   chan struct{}
	inWrite  int // bytes the writer has taken and not finished writing
	max      int32
	writing  bool // a writer owns the socket
	deferred bool // frames were added without waking a writer
	closed   bool
	stuck    bool
}

// roomSignal returns a channel closed when a completed write leaves room,
// or nil when the client is stuck or closed and nobody should wait. Frames
// queued without a wake (a reader's own answers) may be what fills the
// outbox; then nobody would write them while their reader waits, so the
// caller is made the writer's starter: start says to call wake.
func (o *outbox) roomSignal() (room <-chan struct{}, start bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed || o.stuck {
		return nil, false
	}
	if !o.writing && o.deferred {
		o.writing, o.deferred, start = true, false, true
	}
	if o.roomCh == nil {
		o.roomCh = make(chan struct{})
	}
	return o.roomCh, start
}

// markStuck records that a stalled publisher gave up waiting.
func (o *outbox) markStuck() {
	o.mu.Lock()
	o.stuck = true
	o.mu.Unlock()
}

// beginLocked locks the outbox and returns the buffer to append frames to.
// ok is false (and the lock released) when the connection is closed or,
// with bounded, when the outbox already holds its maximum.
func (o *outbox) begin(bounded bool) (b []byte, ok bool) {
	o.mu.Lock()
	if o.closed || (bounded && o.pendingLocked() >= int(o.max)) {
		o.mu.Unlock()
		return nil, false
	}
	if o.buf == nil {
		o.buf = framePool.Get().(*frameBuf)
	}
	return o.buf.b, true
}

// end stores b, the buffer from begin with frames appended, and unlocks.
// It reports whether the caller must start a writer: wake asks for one now;
// otherwise the frames wait for the next flush (the reader batches its own
// acknowledgements that way until it has no more input buffered).
func (o *outbox) end(b []byte, wake bool) (startWriter bool) {
	o.buf.b = b
	if !o.writing {
		if wake {
			o.writing, o.deferred = true, false
			startWriter = true
		} else {
			o.deferred = true
		}
	}
	o.mu.Unlock()
	return startWriter
}

func (o *outbox) pendingLocked() int {
	n := o.inWrite
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

// room reports whether the outbox is below its bound.
func (o *outbox) room() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return !o.closed && o.pendingLocked() < int(o.max)
}

// claimDeferred reports whether the caller is now the writer for frames
// added without a wake.
func (o *outbox) claimDeferred() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.writing || !o.deferred || o.closed {
		return false
	}
	o.writing, o.deferred = true, false
	return true
}

// take hands the writer everything pending. When nothing is, the writer
// role is given up and the buffers go back to the pool.
func (o *outbox) take() (*frameBuf, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed || o.buf == nil || len(o.buf.b) == 0 {
		o.writing = false
		putFrameBuf(o.buf)
		putFrameBuf(o.spare)
		o.buf, o.spare = nil, nil
		return nil, false
	}
	f := o.buf
	o.buf, o.spare = o.spare, nil
	o.inWrite = len(f.b)
	return f, true
}

// written returns the writer's buffer after a write.
func (o *outbox) written(f *frameBuf) {
	o.mu.Lock()
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

// close makes every later begin fail; pending frames are discarded.
func (o *outbox) close() {
	o.mu.Lock()
	o.closed = true
	if o.roomCh != nil {
		close(o.roomCh)
		o.roomCh = nil
	}
	if !o.writing {
		putFrameBuf(o.buf)
		putFrameBuf(o.spare)
		o.buf, o.spare = nil, nil
	}
	o.mu.Unlock()
}

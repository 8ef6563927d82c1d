package mqttd

import (
	"bytes"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Unit tests of the outbox and its writer (outbox.go). A conn is built on
// a Server from New that does not serve, so nothing but the test touches
// it. Tests that must see a writer blocked in the middle of a write use
// net.Pipe, whose Write returns only once the other end has read
// everything; tests that must prove no goroutine did something run in a
// synctest bubble, where synctest.Wait returns only once every goroutine
// the test started is blocked.

// pipePair returns the two ends of a net.Pipe, closed when the test ends.
func pipePair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	server, client = net.Pipe()
	t.Cleanup(func() {
		server.Close()
		client.Close()
	})
	return server, client
}

// fill returns n bytes of c.
func fill(c byte, n int) []byte { return bytes.Repeat([]byte{c}, n) }

// appendBytes is an enqueue callback adding p.
func appendBytes(p []byte) func([]byte) []byte {
	return func(b []byte) []byte { return append(b, p...) }
}

// outboxSnapshot is an outbox's state, read under its lock.
type outboxSnapshot struct {
	buf, spare                *frameBuf
	buffered, inWrite         int
	writing, deferred, closed bool
	stuck                     bool
}

func snapshot(c *conn) outboxSnapshot {
	o := &c.out
	o.mu.Lock()
	defer o.mu.Unlock()
	st := outboxSnapshot{buf: o.buf, spare: o.spare, inWrite: o.inWrite,
		writing: o.writing, deferred: o.deferred, closed: o.closed, stuck: o.stuck}
	if o.buf != nil {
		st.buffered = len(o.buf.b)
	}
	return st
}

// waitTaken waits until c's writer has taken n bytes out of the outbox and
// is writing them: on a net.Pipe nobody reads, it blocks there.
func waitTaken(t *testing.T, c *conn, n int) {
	t.Helper()
	waitUntil(t, "the writer to take the frames", func() bool {
		st := snapshot(c)
		return st.writing && st.inWrite == n
	})
}

// closeOnce closes ch unless it is closed already; one goroutine at a time.
func closeOnce(ch chan struct{}) {
	if !isClosed(ch) {
		close(ch)
	}
}

// waitClosed waits for ch to be closed, failing the test after 10 s.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestOutboxBound checks the outbox bound: a bounded enqueue (a QoS 0
// delivery, which may then be dropped) is refused, without its frames
// being built, once the bytes pending reach max, and pending counts both
// the frames buffered and those the writer took but has not finished
// writing; deferred and woken frames (acks, QoS 1/2) are never refused.
// Were the bytes in the writer's hands not counted, a subscriber that
// reads nothing would receive a fresh max every time the writer took the
// last batch.
func TestOutboxBound(t *testing.T) {
	s := newTestServer(t, Options{})

	t.Run("buffered bytes count", func(t *testing.T) {
		srvEnd, cliEnd := pipePair(t)
		c := newConn(s, srvEnd, "test")
		c.out.max = 64
		if !c.enqueue(deferred, appendBytes(fill('d', 60))) {
			t.Fatal("deferred enqueue into an empty outbox refused")
		}
		if st := snapshot(c); st.writing || !st.deferred {
			t.Fatalf("a deferred enqueue started a writer: %+v", st)
		}
		// Below max the bound lets a whole frame in, even past max.
		if !c.enqueue(bounded, appendBytes(fill('b', 10))) {
			t.Fatal("bounded enqueue refused with 60 of 64 bytes pending")
		}
		waitTaken(t, c, 70)
		if got := c.out.pending(); got != 70 {
			t.Errorf("pending = %d, want 70", got)
		}
		if c.enqueue(bounded, appendBytes([]byte{'x'})) {
			t.Error("bounded enqueue accepted with 70 of 64 bytes pending")
		}
		if got := readFull(t, cliEnd, 70); !bytes.Equal(got, append(fill('d', 60), fill('b', 10)...)) {
			t.Errorf("wrote %q", got)
		}
		s.writers.Wait()
		if got := c.out.pending(); got != 0 {
			t.Errorf("pending after the write = %d, want 0", got)
		}
	})

	t.Run("bytes in write count", func(t *testing.T) {
		srvEnd, cliEnd := pipePair(t)
		c := newConn(s, srvEnd, "test")
		c.out.max = 64
		if !c.enqueue(bounded, appendBytes(fill('a', 64))) {
			t.Fatal("bounded enqueue into an empty outbox refused")
		}
		waitTaken(t, c, 64) // nothing buffered: all 64 are in the writer's hands
		if got := c.out.pending(); got != 64 {
			t.Errorf("pending with 64 bytes in write = %d, want 64", got)
		}
		if hasRoom(c) {
			t.Error("room() with 64 of 64 bytes in write")
		}
		built := false
		if c.enqueue(bounded, func(b []byte) []byte { built = true; return append(b, 'x') }) {
			t.Error("bounded enqueue accepted with 64 of 64 bytes in write")
		}
		if built {
			t.Error("a refused enqueue built its frames")
		}
		if !c.enqueue(woken, appendBytes(fill('w', 10))) {
			t.Error("woken enqueue refused by a full outbox")
		}
		if !c.enqueue(deferred, appendBytes(fill('d', 5))) {
			t.Error("deferred enqueue refused by a full outbox")
		}
		if got := c.out.pending(); got != 79 {
			t.Errorf("pending = %d, want 79", got)
		}
		want := slices.Concat(fill('a', 64), fill('w', 10), fill('d', 5))
		if got := readFull(t, cliEnd, len(want)); !bytes.Equal(got, want) {
			t.Errorf("wrote %q, want %q", got, want)
		}
		s.writers.Wait()
		if got := c.out.pending(); got != 0 || !hasRoom(c) {
			t.Errorf("after the writes: pending %d, room %v; want 0, true", got, hasRoom(c))
		}
		if !c.enqueue(bounded, appendBytes([]byte("ok"))) {
			t.Fatal("bounded enqueue refused once the outbox drained")
		}
		if got := readFull(t, cliEnd, 2); string(got) != "ok" {
			t.Errorf("wrote %q, want \"ok\"", got)
		}
		s.writers.Wait()
	})
}

// TestOutboxGrowsByDoubling: an outbox filled with small frames while
// nobody writes (a subscriber's backlog) grows its buffer by doubling, not
// by append's 1.25x steps, each of which copied everything held so far.
func TestOutboxGrowsByDoubling(t *testing.T) {
	s := newTestServer(t, Options{})
	srvEnd, _ := pipePair(t)
	c := newConn(s, srvEnd, "test")
	frame := fill('f', 64)
	grown, last := 0, 0
	for range (512 << 10) / len(frame) {
		c.enqueue(deferred, appendBytes(frame))
		if n := cap(snapshot(c).buf.b); n != last {
			if last != 0 && n < 2*last {
				t.Fatalf("the buffer grew from %d to %d bytes, want at least double", last, n)
			}
			grown, last = grown+1, n
		}
	}
	if st := snapshot(c); st.buffered != 512<<10 {
		t.Fatalf("%d bytes buffered, want %d", st.buffered, 512<<10)
	}
	if grown > 9 {
		t.Errorf("the buffer grew %d times on its way to 512 KiB", grown)
	}
	c.out.close(&s.stats.outboxBytes)
}

// TestOutboxBufferSwap checks the writer's buffer swap: the buffer a
// write finished with becomes the outbox's next buffer (the spare), so a
// steady stream of frames moves between two buffers without taking more
// from the pool; a buffer grown past maxPooledBuf by a burst is not kept;
// and a writer that runs dry gives both buffers back, so an idle
// connection holds none.
func TestOutboxBufferSwap(t *testing.T) {
	s := newTestServer(t, Options{})

	t.Run("spare reused", func(t *testing.T) {
		srvEnd, cliEnd := pipePair(t)
		c := newConn(s, srvEnd, "test")
		c.enqueue(deferred, appendBytes(fill('a', 8)))
		bufA := snapshot(c).buf
		c.enqueue(woken, appendBytes(nil)) // start a writer for A
		waitTaken(t, c, 8)
		c.enqueue(woken, appendBytes(fill('b', 9)))
		bufB := snapshot(c).buf
		if bufB == nil || bufB == bufA {
			t.Fatalf("frames queued during a write went to %p (the writer's buffer is %p)", bufB, bufA)
		}
		readFull(t, cliEnd, 8)
		waitTaken(t, c, 9) // A written, B taken
		if st := snapshot(c); st.buf != bufA || st.spare != nil {
			t.Fatalf("after A was written: buf %p, spare %p; want the written buffer %p as buf", st.buf, st.spare, bufA)
		}
		c.enqueue(woken, appendBytes(fill('c', 10)))
		if st := snapshot(c); st.buf != bufA || st.buffered != 10 {
			t.Errorf("frames went to %p (%d bytes); want the spare %p", st.buf, st.buffered, bufA)
		}
		readFull(t, cliEnd, 9)
		waitTaken(t, c, 10)
		if st := snapshot(c); st.buf != bufB {
			t.Errorf("after B was written: buf %p; want B's buffer %p", st.buf, bufB)
		}
		if got := readFull(t, cliEnd, 10); !bytes.Equal(got, fill('c', 10)) {
			t.Errorf("wrote %q", got)
		}
		s.writers.Wait()
		if st := snapshot(c); st.buf != nil || st.spare != nil || st.writing {
			t.Errorf("a writer that ran dry kept buffers: %+v", st)
		}
	})

	t.Run("oversized not kept", func(t *testing.T) {
		srvEnd, cliEnd := pipePair(t)
		c := newConn(s, srvEnd, "test")
		big := fill('B', maxPooledBuf+1)
		c.enqueue(deferred, appendBytes(big))
		if st := snapshot(c); cap(st.buf.b) <= maxPooledBuf {
			t.Fatalf("buffer cap %d, want > %d", cap(st.buf.b), maxPooledBuf)
		}
		c.enqueue(woken, appendBytes(nil))
		waitTaken(t, c, len(big))
		c.enqueue(woken, appendBytes(fill('s', 7)))
		readFull(t, cliEnd, len(big))
		waitTaken(t, c, 7) // the big buffer was written, the small one taken
		if st := snapshot(c); st.buf != nil || st.spare != nil {
			t.Errorf("a %d-byte buffer was kept after its write: buf %p, spare %p", len(big), st.buf, st.spare)
		}
		readFull(t, cliEnd, 7)
		s.writers.Wait()
	})
}

// writeRecorder wraps a net.Conn to record every Write and how many run at
// once. A Write waits on a channel of one slot before it reaches the
// wrapped conn, so in a synctest bubble a second writer is seen entering
// Write (and then durably blocked) rather than stuck on the pipe's lock.
type writeRecorder struct {
	net.Conn
	slot chan struct{}

	mu        sync.Mutex
	writes    [][]byte
	active    int
	maxActive int
}

func newWriteRecorder(nc net.Conn) *writeRecorder {
	return &writeRecorder{Conn: nc, slot: make(chan struct{}, 1)}
}

func (r *writeRecorder) Write(b []byte) (int, error) {
	r.mu.Lock()
	r.writes = append(r.writes, bytes.Clone(b))
	r.active++
	r.maxActive = max(r.maxActive, r.active)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.active--
		r.mu.Unlock()
	}()
	r.slot <- struct{}{}
	defer func() { <-r.slot }()
	return r.Conn.Write(b)
}

// calls returns the Writes so far, each as written.
func (r *writeRecorder) calls() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.writes)
}

func (r *writeRecorder) most() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxActive
}

// TestOutboxOneWriter checks the writer hand-off: while a writer is
// writing, woken enqueues from many goroutines append to the outbox and
// start no second writer (two writers would interleave frames on the
// socket); the running writer writes everything they queued in one batch
// once its write completes, then stops.
func TestOutboxOneWriter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, Options{})
		srvEnd, cliEnd := net.Pipe()
		defer cliEnd.Close()
		defer srvEnd.Close()
		rec := newWriteRecorder(srvEnd)
		c := newConn(s, rec, "test")
		if !c.enqueue(woken, appendBytes(fill('a', 4))) {
			t.Fatal("woken enqueue refused")
		}
		synctest.Wait() // the writer blocks writing A: nobody reads
		if n := len(rec.calls()); n != 1 {
			t.Fatalf("%d writes after a woken enqueue, want 1", n)
		}
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				if !c.enqueue(woken, appendBytes([]byte{'0' + byte(i)})) {
					t.Error("woken enqueue refused")
				}
			})
		}
		wg.Wait()
		synctest.Wait() // a writer they started would now be in Write
		if n := len(rec.calls()); n != 1 {
			t.Fatalf("%d writes while the first writer was blocked: a woken enqueue started a second writer", n)
		}
		if st := snapshot(c); st.buffered != 8 || !st.writing {
			t.Fatalf("outbox %+v; want the 8 frames buffered behind the running writer", st)
		}
		readFull(t, cliEnd, 4+8)
		s.writers.Wait()
		calls := rec.calls()
		if len(calls) != 2 {
			t.Fatalf("writes %q; want A, then the 8 frames in one batch", calls)
		}
		second := slices.Clone(calls[1])
		slices.Sort(second)
		if string(calls[0]) != "aaaa" || string(second) != "01234567" {
			t.Errorf("writes %q; want \"aaaa\", then the 8 frames", calls)
		}
		if n := rec.most(); n != 1 {
			t.Errorf("%d writes ran at once", n)
		}
		if st := snapshot(c); st.writing {
			t.Error("the writer did not give up its role when it ran dry")
		}
	})
}

// TestOutboxDeferredFlush checks deferred frames, a reader's answers to
// its own client: they start no writer, and flushDeferred writes them in
// one write on the caller's goroutine (it returns only once they are
// written), so a burst of input costs one write and no goroutine. When a
// writer is already running, flushDeferred leaves the frames to it.
func TestOutboxDeferredFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, Options{})
		srvEnd, cliEnd := net.Pipe()
		defer cliEnd.Close()
		defer srvEnd.Close()
		rec := newWriteRecorder(srvEnd)
		c := newConn(s, rec, "test")
		c.enqueue(deferred, appendBytes([]byte("xxx")))
		c.enqueue(deferred, appendBytes([]byte("yy")))
		synctest.Wait()
		if n := len(rec.calls()); n != 0 {
			t.Fatalf("%d writes after deferred enqueues, want none before the flush", n)
		}
		if st := snapshot(c); st.writing || !st.deferred {
			t.Fatalf("outbox %+v; want deferred frames and no writer", st)
		}
		flushed := make(chan struct{})
		go func() {
			c.flushDeferred()
			close(flushed)
		}()
		synctest.Wait() // flushDeferred blocks in its own write: nobody reads
		if isClosed(flushed) {
			t.Fatal("flushDeferred returned before its frames were written: it did not write them itself")
		}
		if got := readFull(t, cliEnd, 5); string(got) != "xxxyy" {
			t.Errorf("wrote %q, want \"xxxyy\"", got)
		}
		<-flushed
		if calls := rec.calls(); len(calls) != 1 {
			t.Errorf("writes %q, want the deferred frames in one write", calls)
		}

		// A running writer takes deferred frames along.
		c.enqueue(woken, appendBytes([]byte("w")))
		synctest.Wait() // the writer blocks writing w
		c.enqueue(deferred, appendBytes([]byte("z")))
		c.flushDeferred() // returns at once: the writer holds the role
		if n := len(rec.calls()); n != 2 {
			t.Fatalf("%d writes, want 2: flushDeferred wrote while a writer was running", n)
		}
		if got := readFull(t, cliEnd, 2); string(got) != "wz" {
			t.Errorf("wrote %q, want \"wz\"", got)
		}
		s.writers.Wait()
		if n := rec.most(); n != 1 {
			t.Errorf("%d writes ran at once", n)
		}
	})
}

// TestOutboxInline checks inline frames, the DISCONNECT a goroutine sends
// before it closes the connection: with no writer running the caller
// writes them itself and returns once they are written; with a writer
// running they join its next batch and enqueue returns at once; they seal
// the outbox, so nothing follows them on the wire [MQTT-3.14.4-1]; and a
// client that reads nothing holds the caller for inlineWriteTimeout, then
// is closed as a slow consumer.
func TestOutboxInline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, Options{})
		fresh := func() (*conn, net.Conn) {
			srvEnd, cliEnd := net.Pipe()
			t.Cleanup(func() { cliEnd.Close() })
			return newConn(s, newWriteRecorder(srvEnd), "test"), cliEnd
		}
		c, cliEnd := fresh()
		done := make(chan bool, 1)
		go func() { done <- c.enqueue(inline, appendBytes([]byte("iii"))) }()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("inline enqueue returned before its frames were written")
		default:
		}
		if got := readFull(t, cliEnd, 3); string(got) != "iii" {
			t.Errorf("wrote %q, want \"iii\"", got)
		}
		if !<-done {
			t.Error("inline enqueue reported false")
		}
		for _, mode := range []enqueueMode{deferred, woken, bounded, inline, last} {
			if c.enqueue(mode, appendBytes([]byte("after"))) {
				t.Errorf("mode %d: enqueue accepted after the sealing frames", mode)
			}
		}
		if c.roomSignal() != nil || hasRoom(c) {
			t.Error("a sealed outbox offers room to publishers")
		}

		c, cliEnd = fresh()
		c.enqueue(woken, appendBytes([]byte("ww")))
		synctest.Wait() // the writer blocks writing ww
		if !c.enqueue(inline, appendBytes([]byte("j"))) {
			t.Error("inline enqueue refused")
		}
		if got := readFull(t, cliEnd, 3); string(got) != "wwj" {
			t.Errorf("wrote %q, want \"wwj\"", got)
		}
		s.writers.Wait()

		c, _ = fresh()
		start := time.Now()
		c.enqueue(inline, appendBytes([]byte("kk"))) // nobody reads
		if d := time.Since(start); d != inlineWriteTimeout {
			t.Errorf("inline write to a client that reads nothing returned after %v, want %v", d, inlineWriteTimeout)
		}
		if n := s.Stats().Disconnects[CloseSlowConsumer.String()]; n != 1 {
			t.Errorf("slow_consumer disconnects = %d, want 1", n)
		}
		if c.enqueue(inline, appendBytes([]byte("late"))) {
			t.Error("enqueue accepted after the connection was closed")
		}
	})
}

// TestOutboxWriteTimeout checks writeWithin's bound on a writer goroutine:
// a client that reads nothing for limits.write_timeout is closed as a slow
// consumer, the writer gives up, and later frames are refused.
func TestOutboxWriteTimeout(t *testing.T) {
	const timeout = 5 * time.Second
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, Options{Limits: Limits{WriteTimeout: timeout}})
		srvEnd, cliEnd := net.Pipe()
		defer cliEnd.Close()
		c := newConn(s, srvEnd, "test")
		start := time.Now()
		c.enqueue(woken, appendBytes([]byte("qqqq"))) // nobody reads
		s.writers.Wait()
		if d := time.Since(start); d != timeout {
			t.Errorf("the writer gave up after %v, want the write timeout %v", d, timeout)
		}
		if n := s.Stats().Disconnects[CloseSlowConsumer.String()]; n != 1 {
			t.Errorf("slow_consumer disconnects = %d, want 1", n)
		}
		if c.enqueue(woken, appendBytes([]byte("late"))) {
			t.Error("enqueue accepted after the write timeout closed the connection")
		}
		if st := snapshot(c); st.buf != nil || st.spare != nil || st.writing {
			t.Errorf("outbox after the timeout: %+v; want no buffers, no writer", st)
		}
	})
}

// TestOutboxRoomSignal checks the channel a publisher stalled on a full
// outbox waits on: roomSignal starts a writer for deferred frames, which
// nobody would otherwise write while their reader is the publisher
// waiting; the channel (one for every waiter) is closed by the first
// completed write that leaves the outbox below max, not by one that
// leaves it full; and it is nil for a client marked stuck until a write
// completes again.
func TestOutboxRoomSignal(t *testing.T) {
	s := newTestServer(t, Options{})

	t.Run("starts a writer for deferred frames", func(t *testing.T) {
		srvEnd, cliEnd := pipePair(t)
		c := newConn(s, srvEnd, "test")
		c.out.max = 16
		c.enqueue(deferred, appendBytes(fill('d', 16)))
		if c.enqueue(bounded, appendBytes([]byte{'x'})) {
			t.Fatal("bounded enqueue accepted into a full outbox")
		}
		room := c.roomSignal()
		if room == nil {
			t.Fatal("roomSignal = nil for an open outbox")
		}
		waitTaken(t, c, 16) // a writer took the deferred frames
		if isClosed(room) {
			t.Error("room signalled before any write completed")
		}
		if got := readFull(t, cliEnd, 16); !bytes.Equal(got, fill('d', 16)) {
			t.Errorf("wrote %q", got)
		}
		waitClosed(t, room, "the room signal after the write")
		s.writers.Wait()
	})

	t.Run("closed once a write leaves room", func(t *testing.T) {
		srvEnd, cliEnd := pipePair(t)
		c := newConn(s, srvEnd, "test")
		c.out.max = 8
		c.enqueue(woken, appendBytes(fill('a', 8)))
		waitTaken(t, c, 8)
		c.enqueue(woken, appendBytes(fill('b', 9)))
		room := c.roomSignal()
		if again := c.roomSignal(); again != room {
			t.Error("two waiters got different room channels")
		}
		readFull(t, cliEnd, 8)
		waitTaken(t, c, 9) // A written, with B's 9 bytes still pending
		if isClosed(room) {
			t.Error("room signalled by a write that left the outbox full")
		}
		readFull(t, cliEnd, 9)
		waitClosed(t, room, "the room signal once the outbox drained")
		s.writers.Wait()
	})

	t.Run("stuck until a write completes", func(t *testing.T) {
		srvEnd, cliEnd := pipePair(t)
		c := newConn(s, srvEnd, "test")
		c.out.markStuck()
		if room := c.roomSignal(); room != nil {
			t.Error("roomSignal for a stuck client is not nil: its publishers would stall again")
		}
		c.enqueue(woken, appendBytes([]byte("s")))
		readFull(t, cliEnd, 1)
		s.writers.Wait()
		if snapshot(c).stuck {
			t.Error("a completed write did not clear stuck")
		}
		if room := c.roomSignal(); room == nil {
			t.Error("roomSignal = nil after a completed write")
		}
	})
}

// TestOutboxClose checks outbox.close, run when a connection closes: every
// later enqueue fails without building its frames, publishers waiting for
// room are released, roomSignal and flushDeferred do nothing, and the
// buffers go back to the pool: at once when no writer runs, or when the
// running writer next looks at the outbox, which it then gives up without
// writing what is left.
func TestOutboxClose(t *testing.T) {
	s := newTestServer(t, Options{})

	t.Run("idle", func(t *testing.T) {
		srvEnd, cliEnd := pipePair(t)
		c := newConn(s, srvEnd, "test")
		room := c.roomSignal()
		c.enqueue(deferred, appendBytes([]byte("never")))
		c.out.close(&s.stats.outboxBytes)
		if !isClosed(room) {
			t.Error("close left a publisher waiting for room")
		}
		if st := snapshot(c); st.buf != nil || st.spare != nil || !st.closed {
			t.Errorf("outbox after close: %+v; want closed, no buffers", st)
		}
		for _, mode := range []enqueueMode{deferred, woken, bounded, inline} {
			built := false
			if c.enqueue(mode, func(b []byte) []byte { built = true; return append(b, 'x') }) {
				t.Errorf("enqueue mode %d accepted after close", mode)
			}
			if built {
				t.Errorf("enqueue mode %d built frames after close", mode)
			}
		}
		if c.roomSignal() != nil {
			t.Error("roomSignal after close is not nil")
		}
		c.flushDeferred()
		srvEnd.Close()
		if got := readToEOF(t, cliEnd); len(got) != 0 {
			t.Errorf("a closed outbox wrote %q", got)
		}
	})

	t.Run("while writing", func(t *testing.T) {
		srvEnd, cliEnd := pipePair(t)
		c := newConn(s, srvEnd, "test")
		c.enqueue(woken, appendBytes([]byte("aaaa")))
		waitTaken(t, c, 4)
		c.enqueue(woken, appendBytes([]byte("b")))
		c.out.close(&s.stats.outboxBytes)
		if c.enqueue(woken, appendBytes([]byte("c"))) {
			t.Error("enqueue accepted after close")
		}
		if st := snapshot(c); !st.writing || st.buf == nil {
			t.Errorf("close took the buffers from under the running writer: %+v", st)
		}
		// Read everything the writer writes until the socket is closed,
		// once the writer has stopped.
		cliEnd.SetReadDeadline(time.Now().Add(10 * time.Second))
		read := make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(cliEnd)
			read <- b
		}()
		s.writers.Wait()
		if st := snapshot(c); st.buf != nil || st.spare != nil || st.writing {
			t.Errorf("outbox after the writer stopped: %+v; want no buffers, no writer", st)
		}
		srvEnd.Close()
		if got := <-read; string(got) != "aaaa" {
			t.Errorf("client got %q, want \"aaaa\": the writer went on writing after close", got)
		}
	})
}

// hasRoom reports whether the outbox takes a delivery of any size now.
func hasRoom(c *conn) bool {
	fit, _ := c.fit()
	return fit >= 0
}

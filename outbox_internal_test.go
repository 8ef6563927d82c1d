package mqttd

import (
	"bytes"
	"io"
	"slices"
	"testing"
	"time"
)

// Unit tests of the outbox and its writer (conn_write.go). A conn is built on
// a Server from New that does not serve, so nothing but the test touches
// it. Tests that must see a writer blocked in the middle of a write use
// net.Pipe, whose Write returns only once the other end has read
// everything; tests that must prove no goroutine did something run in a
// synctest bubble, where synctest.Wait returns only once every goroutine
// the test started is blocked.

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

package mqttd

import (
	"bytes"
	"net"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"mqttd/packets"
)

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

func newWriteRecorder(nc net.Conn) *writeRecorder {
	return &writeRecorder{Conn: nc, slot: make(chan struct{}, 1)}
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

// TestNothingAfterAsyncDisconnect checks [MQTT-3.14.4-1]: once a closing
// goroutine (idle timeout, shutdown, takeover) has queued the server's
// DISCONNECT, deliveries arriving meanwhile are not written after it.
func TestNothingAfterAsyncDisconnect(t *testing.T) {
	s := newTestServer(t, Options{})
	srvEnd, cliEnd := pipePair(t)
	c := newConn(s, srvEnd, "test")
	c.version = packets.V5
	c.connected.Store(true)
	c.enqueue(woken, appendBytes(fill('a', 8))) // a delivery being written
	waitTaken(t, c, 8)
	closed := make(chan struct{})
	go func() { // as the idle wheel closes a connection whose keepalive passed
		defer close(closed)
		c.sendDisconnectAsync(packets.KeepAliveTimeout)
		c.closeWith(errKeepAlive)
	}()
	waitUntil(t, "the DISCONNECT queued", func() bool { return snapshot(c).buffered > 0 })
	if c.enqueue(bounded, appendBytes(fill('p', 5))) {
		t.Error("a delivery was queued behind the DISCONNECT")
	}
	disc, _ := (&packets.Disconnect{ReasonCode: packets.KeepAliveTimeout}).Append(nil, packets.V5)
	got := readFull(t, cliEnd, 8+len(disc))
	<-closed
	if !bytes.HasSuffix(got, disc) {
		t.Errorf("wire: % x; want it to end with the DISCONNECT % x", got, disc)
	}
	cliEnd.SetReadDeadline(time.Now().Add(time.Second))
	if n, _ := cliEnd.Read(make([]byte, 1)); n != 0 {
		t.Error("bytes followed the DISCONNECT")
	}
}

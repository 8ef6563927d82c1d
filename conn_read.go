package mqttd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	"mqttd/packets"
)

// Both readers, the poller's (conn_read_linux.go) and the goroutine of a
// connection that exposes no descriptor (serve, below), cut the input into
// whole frames and hand each to dispatch, so every handler runs the same
// way on every transport. The poller's reader first completes a run of
// plain PUBACKs and PUBCOMPs under one lock (ackRun), handing dispatch
// whatever that run does not take.

// dispatch decodes and handles one whole frame. The body is the frame's
// own copy, which the decoded packet keeps, unless borrowed: a frame
// inPlace accepts is left in the read buffer, and its handler copies
// what it keeps. PUBLISH, the packet that matters for speed, is decoded
// into pub, the reader's reused struct.
func (c *conn) dispatch(fh packets.FixedHeader, body []byte, pub *packets.Publish, borrowed bool) error {
	dec := c.srv.decode
	if c.cl == nil {
		if fh.Type == packets.TypeConnect {
			return c.dispatchConnect(fh, body)
		}
		p, err := dec.Decode(fh, body, c.version)
		return c.connectPacket(p, err)
	}
	if fh.Type == packets.TypePublish {
		err := dec.DecodePublish(fh, body, c.version, pub)
		if err == nil {
			err = c.handlePublish(pub, borrowed)
		} else {
			err = c.readError(err)
		}
		pub.Reset() // drop references to the body
		return err
	}
	if packets.IsAck(fh.Type) {
		return c.dispatchAck(fh, body)
	}
	p, err := dec.Decode(fh, body, c.version)
	if err != nil {
		return c.readError(err)
	}
	return c.handle(p)
}

// dispatchAck decodes and handles an acknowledgement, on the stack: Decode
// allocates each packet, and a QoS 1 message costs a PUBACK in and one out.
// Not in dispatch, whose frame every packet's handling stands on: the
// Ack's ~300 bytes there took the deepest path of a goroutine reader
// (SUBSCRIBE's) past 4 KiB, and its stack, which Go doubles and keeps
// while the connection idles, to 8 KiB (11.5 KB per idle WebSocket
// connection against 7.9 KB).
//
//go:noinline
func (c *conn) dispatchAck(fh packets.FixedHeader, body []byte) error {
	var a packets.Ack
	if err := c.srv.decode.DecodeAck(fh, body, c.version, &a); err != nil {
		return c.readError(err)
	}
	return c.handleAck(&a)
}

// connects are the Connects CONNECT frames are decoded into, each taken
// for one frame and put back zeroed: one allocated per connect (688
// bytes) was garbage left as holes among the connections' live objects.
// What the broker keeps of a CONNECT it copies (an exchange of enhanced
// authentication, the whole packet: startAuth).
var connects = sync.Pool{New: func() any { return new(packets.Connect) }}

// dispatchConnect decodes and handles a CONNECT frame.
func (c *conn) dispatchConnect(fh packets.FixedHeader, body []byte) error {
	cp := connects.Get().(*packets.Connect)
	defer func() {
		*cp = packets.Connect{} // pins nothing of the frame
		connects.Put(cp)
	}()
	decoded, err := c.srv.decode.DecodeConnect(fh, body, cp)
	if !decoded {
		return c.connectPacket(nil, err)
	}
	return c.connectPacket(cp, err)
}

// readError turns a read or decode failure into the reason the connection
// ends; a codec error is told to a 5.0 client first.
func (c *conn) readError(err error) error {
	switch {
	case errors.Is(err, io.EOF):
		return errClosedByPeer
	case isTimeout(err):
		if c.cl == nil {
			return errConnectTimeout
		}
		c.sendDisconnect(packets.KeepAliveTimeout)
		return errKeepAlive
	}
	var pe *packets.Error
	if errors.As(err, &pe) {
		if pe.Code == packets.PacketTooLarge {
			c.packetRefused(pe.Size)
		}
		c.sendDisconnectWhy(pe.Code, pe.Msg)
	}
	return err
}

// packetRefused logs a packet of size bytes refused for limits.max_packet_size
// (at most every warnInterval; mqttd_disconnects_total counts them all):
// a 3.1.1 client cannot be told and sees only its connection lost.
func (c *conn) packetRefused(size int) {
	s := c.srv
	if s.tooLargeWarned.limited() {
		return
	}
	c.fields(s.log.Warn()).Int("size", size).Int("max_packet_size", s.opts.Limits.MaxPacketSize).
		Msg("packet refused: larger than limits.max_packet_size, connection closed " +
			"(logged at most every 10 s; mqttd_disconnects_total{reason=packet_too_large} counts them)")
}

// blockingReadBufSize is small on purpose: a connection served by its own
// reader goroutine owns this buffer, idle or not.
const blockingReadBufSize = 512

// blockingState is what serve's reader keeps per connection.
type blockingState struct {
	br          *bufio.Reader
	pub         packets.Publish
	deadlineSet time.Time // when the read deadline was last moved
	// hooked: the connection calls answerFromRead when a read is about
	// to wait, and readOne does not answer before every read that may.
	hooked bool
}

// readWaiter is a connection read by its own goroutine (the listeners'
// TLS and WebSocket connections) that can call a hook, on the reading
// goroutine, when a read finds its socket empty and is about to wait.
type readWaiter interface{ OnReadWait(hook func()) bool }

// answerBeforeWait asks for the commit of what the reads so far stored
// and writes the answers queued, before a read that may wait for the
// client: whenever the small read buffer is empty, unless the connection
// tells when its read is about to wait (answerFromRead).
func (c *conn) answerBeforeWait() {
	c.commitHeld(false)
	c.yieldToWriters()
	c.flushDeferred()
}

// yieldToWriters lets the writers deliveries started write before the
// reader writes its own client's answers: a device's
// PUBACK, written first, delayed its message to the subscribers by a
// write and the wakeup of whoever reads the PUBACK, and with several
// devices a wakeup by all of their PUBACKs (device10k: p50 latency
// 180-215 us against 144-156 us with the deliveries first). A new writer
// runs next and first yields itself (runWriter), behind the reader, so it
// takes the reader two yields to let it write, or three when the
// scheduler's fairness check (every 61st turn) picks the yielded reader
// first; each is a trip through the scheduler, taken only while a writer
// is due and answers wait. The count is the server's: the readers of
// several devices woken together all let the one subscriber's writer go
// first, whichever of them started it, and on a busy broker of several
// cores a reader may yield for writers not its own, four times at most.
// From answerFromRead it yields under the socket's read lock (and
// crypto/tls's input lock), which after the handshake only this reader
// takes.
func (c *conn) yieldToWriters() {
	for range maxWriterYields {
		if c.srv.writersDue.Load() == 0 || !c.out.answersWait() {
			return
		}
		runtime.Gosched()
	}
}

// maxWriterYields bounds yieldToWriters: writers due on other cores, or
// behind other readers, do not hold a reader's answers longer.
const maxWriterYields = 4

// answerFromRead is answerBeforeWait for a TLS or WebSocket connection
// from the listeners, which calls it when a read finds its socket empty.
// Answering at every refill of the small buffer wrote a WebSocket message
// per few frames (writes took most of the broker's CPU in QoS 2), and a
// TLS record per refill for records crypto/tls had read ahead. It runs
// deep in crypto/tls's or gorilla's read, so a writer goroutine writes
// the answers: written on the reader's stack, under the read's frames,
// they took it past 4 KiB, and Go doubles a stack and keeps it while the
// connection idles (17.6 KB per idle TLS connection against 13.6 KB).
func (c *conn) answerFromRead() {
	c.commitHeld(false)
	c.yieldToWriters()
	c.wakeDeferred()
}

// countingReader counts the bytes serve's reader reads.
type countingReader struct{ c *conn }

func (r countingReader) Read(b []byte) (int, error) {
	n, err := r.c.nc.Read(b)
	r.c.srv.stats.bytesReceived.Add(uint64(n))
	r.c.bytesIn.Add(uint64(n))
	return n, err
}

// serve is the reader goroutine of a connection that is not served by
// the poller.
func (c *conn) serve() {
	defer c.endReader()
	defer c.cleanup()
	defer func() {
		if r := recover(); r != nil {
			c.closeWith(c.panicked(r))
		}
	}()
	c.bl = &blockingState{br: bufio.NewReaderSize(countingReader{c}, blockingReadBufSize)}
	if rw, ok := c.nc.(readWaiter); ok {
		c.bl.hooked = rw.OnReadWait(c.answerFromRead)
	}
	c.nc.SetReadDeadline(time.Now().Add(c.srv.limits().ConnectTimeout))
	for {
		if err := c.readOne(); err != nil {
			c.flushAnswers()
			c.closeReader(err)
			return
		}
	}
}

// readOne reads and handles one frame. Before a read that may block, the
// answers queued so far are flushed (by answerFromRead instead, for a
// connection that tells when its read is about to wait) and the keepalive
// deadline refreshed, so a burst of input costs one write.
func (c *conn) readOne() error {
	if c.bl.br.Buffered() == 0 {
		// Here, not in answerFromRead: pumped deep under crypto/tls's or
		// gorilla's read, the deliveries' encoding took the reader's
		// stack past 4 KiB.
		c.pumpIfDue()
		if !c.bl.hooked {
			c.answerBeforeWait()
		}
	}
	c.refreshDeadline()
	fh, err := packets.ReadFrameHeader(c.bl.br, c.version, c.srv.opts.Limits.MaxPacketSize)
	if err != nil {
		if c.version == 0 && c.bl.br.UnreadByte() == nil {
			// Refused at its first byte: look at what else came with it.
			b, _ := c.bl.br.Peek(min(c.bl.br.Buffered(), 4))
			err = c.notMQTT(b, err)
		}
		return c.readError(err)
	}
	if n := fh.Remaining; n > 0 && n <= c.bl.br.Buffered() {
		if body, _ := c.bl.br.Peek(n); c.inPlace(fh, body) {
			// Handled in the read buffer, which nothing reads meanwhile.
			err := c.dispatch(fh, body, &c.bl.pub, true)
			c.bl.br.Discard(n)
			return err
		}
	}
	body, err := c.readBody(fh.Remaining)
	if err != nil {
		return err
	}
	return c.dispatch(fh, body, &c.bl.pub, false)
}

// readBody reads the n bytes of a frame's body. A body that has not all
// arrived yet has limits.frame_timeout to arrive (before CONNECT the
// connect timeout stands), and one larger than incomingFloor counts in
// full in the server's incoming bytes meanwhile: past
// limits.max_incoming_bytes_total the connection is closed instead.
func (c *conn) readBody(n int) ([]byte, error) {
	br := c.bl.br
	if n <= br.Buffered() {
		return packets.ReadBody(br, n)
	}
	s := c.srv
	if n > incomingFloor {
		if s.incomingFull(n) {
			c.sendDisconnect(packets.QuotaExceeded)
			return nil, errIncomingLimit
		}
		s.stats.incomingBytes.Add(int64(n))
		defer s.stats.incomingBytes.Add(-int64(n))
	}
	framed := c.cl != nil
	if framed {
		deadline := time.Now().Add(s.limits().FrameTimeout)
		if ka := c.keepAliveLimit(); ka > 0 {
			slack := min(ka/2, time.Second)
			deadline = minTime(deadline, c.bl.deadlineSet.Add(ka*3/2+slack))
		}
		c.nc.SetReadDeadline(deadline)
		c.bl.deadlineSet = time.Time{} // the next refresh sets the keepalive's again
	}
	body, err := packets.ReadBody(br, n)
	if err != nil {
		if framed && isTimeout(err) {
			c.sendDisconnect(packets.KeepAliveTimeout)
			return nil, errFrameTimeout
		}
		return nil, c.readError(err)
	}
	if framed && c.keepAlive == 0 {
		c.nc.SetReadDeadline(time.Time{})
	}
	return body, nil
}

// incomingFloor is the size of a packet that may start to arrive whatever
// limits.max_incoming_bytes_total says: most packets are small, and they
// are bounded by the connections there may be.
const incomingFloor = 64 << 10

// incomingFull reports whether growing the bytes of packets arriving by
// more passes limits.max_incoming_bytes_total, warning (rate-limited)
// when it does.
func (s *Server) incomingFull(more int) bool {
	if s.stats.incomingBytes.Load()+int64(more) <= s.opts.Limits.MaxIncomingBytesTotal {
		return false
	}
	if !s.incomingWarned.limited() {
		s.log.Warn().Int64("incoming_bytes", s.stats.incomingBytes.Load()).
			Int64("max_incoming_bytes_total", s.opts.Limits.MaxIncomingBytesTotal).
			Msg("connection closed: the packets arriving on all connections hold limits.max_incoming_bytes_total " +
				"(logged at most every 10 s; mqttd_disconnects_total{reason=incoming_limit} counts them)")
	}
	return true
}

// notMQTT gives the error that ends a connection whose first bytes b the
// codec refused (err) a clearer message when they are an HTTP request: a
// browser or a WebSocket client sent to the MQTT port, where the codec
// alone would say "first packet is PUBACK" ('G' is 0x47: type 4).
func (c *conn) notMQTT(b []byte, err error) error {
	if c.version != 0 || len(b) < 4 {
		return err
	}
	switch string(b[:4]) {
	case "GET ", "POST", "PUT ", "HEAD", "OPTI", "DELE", "PATC", "CONN", "PRI ":
		return closing(CloseProtocolError, fmt.Errorf(
			"HTTP request on an MQTT port (use a ws or wss listener for WebSocket clients): %w", err))
	}
	return err
}

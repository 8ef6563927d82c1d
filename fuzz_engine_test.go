package mqttd_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"mqttd"
	"mqttd/packets"
	"mqttd/packets/packettest"
)

// Bounds of one fuzz iteration. The packet limit is small so that a whole
// oversized frame fits in an input; the input cap keeps an iteration in
// the millisecond range; fuzzCloseWithin is the longest the broker may
// take to answer the harness's PINGREQ or to close the connection before
// it counts as a hang.
const (
	fuzzMaxPacket   = 4 << 10
	fuzzMaxStream   = 16 << 10
	fuzzMaxChunks   = 8
	fuzzCloseWithin = 5 * time.Second
)

// FuzzConnection drives one connection of a fresh broker with an arbitrary
// byte stream (valid and invalid packets of any version, cut into up to
// eight writes) and checks what the engine owes every client, whatever it
// sends:
//
//   - no handler panics (the engine recovers them, so the only trace is
//     mqttd_connection_panics_total), and the broker still accepts a new
//     CONNECT once the fuzzed connection is gone;
//   - after Shutdown no goroutine outlives the server;
//   - every byte the broker writes back decodes as server-to-client packets
//     of the version the stream's CONNECT asked for, each answering
//     something the stream sent, and nothing follows a refusing CONNACK or
//     a DISCONNECT (see checkReply);
//   - the connection ends: the broker closes it within fuzzCloseWithin.
//
// How the connection must end depends on the stream as the codec reads it
// (parseStream), and the harness plays the client accordingly:
//
//   - a frame the codec rejects, or a first frame that is not CONNECT: the
//     broker must close by itself, since a protocol violation closes the
//     connection; the harness sends no EOF, which would hide a broker that
//     kept it open;
//   - every frame whole and accepted, no DISCONNECT: the harness sends a
//     PINGREQ, which a broker keeping the connection must answer; closing
//     instead is fine (it may refuse the CONNECT or a packet for reasons
//     of its own). The PINGRESP is a barrier: the answers to the whole
//     stream are on the wire before it, so they are checked rather than
//     lost to the EOF. Then the harness half-closes and the broker must
//     close, as after any client EOF: a half-closed socket kept open would
//     leak until the keepalive, forever with keepalive 0;
//   - a stream cut off inside a frame, or one with a DISCONNECT: the
//     harness half-closes at once (after DISCONNECT the client closes).
//     The broker may then drop answers it had not written yet (the client
//     hung up), so a missing answer is never a failure; a wrong one always
//     is.
//
// The engine has two readers: the epoll poller for plain sockets and a
// goroutine per connection for any net.Conn that hides its descriptor
// (TLS, WebSocket; hideSocket here). Bit 0 of ctl picks the reader; the
// other bits pick where the stream is cut into writes.
//
// A broker per iteration costs less than a millisecond and keeps
// iterations independent: retained messages and persistent sessions left
// by one input would otherwise change the answers to the next, and
// goroutines could not be counted against a baseline.
func FuzzConnection(f *testing.F) {
	for i, seed := range fuzzConnectionSeeds(f) {
		// Alternate the reader and vary the cuts, so that the seeds run
		// as unit tests cover both readers and whole and split frames.
		f.Add(uint64(i)*0x9E3779B97F4A7C15|uint64(i&1), seed)
	}
	f.Fuzz(func(t *testing.T, ctl uint64, stream []byte) {
		if len(stream) > fuzzMaxStream {
			stream = stream[:fuzzMaxStream]
		}
		checkGoroutines(t)
		reg := prometheus.NewRegistry()
		logs := &lockedBuffer{}
		addr, stop := fuzzServer(t, reg, logs, ctl&1 != 0)

		cs := parseStream(stream)
		reply, reset := exchange(t, addr, stream, splitPoints(ctl>>1, len(stream)), cs)
		if err := checkReply(cs, reply, reset); err != nil {
			t.Fatalf("reply to % X:\n%v\nreply: % X\nbroker log:\n%s", stream, err, reply, logs)
		}

		// The engine recovers a handler's panic and closes only that
		// connection; a broker that then refuses everyone is still broken.
		connectRaw(t, addr, &packets.Connect{CleanStart: true})

		stop()
		if n := metricValue(t, reg, "mqttd_connection_panics_total"); n != 0 {
			t.Fatalf("%v connection handler panics for % X\nbroker log:\n%s", n, stream, logs)
		}
	})
}

// fuzzConnectionSeeds are streams built from the packettest fixtures:
// each frame after a CONNECT of its version (CONNECT frames and the ones
// meant to come first, on their own), and a whole session in one write
// for 3.1.1 and 5.0, in each of the ways a stream can end.
func fuzzConnectionSeeds(f *testing.F) [][]byte {
	f.Helper()
	connects := map[packets.Version][]byte{}
	for _, v := range []packets.Version{packets.V31, packets.V311, packets.V5} {
		connects[v] = fuzzEncode(f, v, &packets.Connect{ProtocolName: fuzzProtocolName(v), ProtocolVersion: v,
			CleanStart: true, KeepAlive: 30, ClientID: "fuzz"})
	}
	var seeds [][]byte
	for _, fx := range packettest.All() {
		if fx.Version == 0 || packets.Type(fx.Raw[0]>>4) == packets.TypeConnect {
			seeds = append(seeds, fx.Raw)
			continue
		}
		seeds = append(seeds, slices.Concat(connects[fx.Version], fx.Raw))
	}
	// A 5.0 client that limits what the server may send it, so that the
	// checks of those limits have inputs to start from.
	limited := &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V5, CleanStart: true,
		KeepAlive: 30, ClientID: "fuzz", Properties: packets.Properties{MaximumPacketSize: 64,
			ReceiveMaximum: 2, TopicAliasMaximum: 2, RequestProblemInfo: 0}}
	for _, id := range []packets.PropID{packets.PropMaximumPacketSize, packets.PropReceiveMaximum,
		packets.PropTopicAliasMaximum, packets.PropRequestProblemInfo} {
		limited.Properties.Set(id)
	}
	for _, c := range []struct {
		v       packets.Version
		connect []byte
	}{
		{packets.V311, connects[packets.V311]},
		{packets.V5, connects[packets.V5]},
		{packets.V5, fuzzEncode(f, packets.V5, limited)},
	} {
		v := c.v
		session := [][]byte{c.connect, fuzzEncode(f, v, &packets.Subscribe{PacketID: 1,
			Subscriptions: []packets.Subscription{{Filter: "fuzz/+", Options: packets.SubOptions{QoS: 2}}}})}
		for qos := range byte(3) {
			p := &packets.Publish{QoS: qos, Topic: "fuzz/t", Payload: []byte("hello")}
			if qos > 0 {
				p.PacketID = uint16(10 + qos)
			}
			session = append(session, fuzzEncode(f, v, p))
		}
		session = append(session,
			fuzzEncode(f, v, &packets.Pubrel{PacketID: 12}),
			fuzzEncode(f, v, &packets.Pingreq{}),
			fuzzEncode(f, v, &packets.Unsubscribe{PacketID: 2, Filters: []string{"fuzz/+"}}),
			fuzzEncode(f, v, &packets.Disconnect{}))
		whole := slices.Concat(session...)
		open := whole[:len(whole)-len(session[len(session)-1])]
		// Ending with DISCONNECT, open (answered up to a PINGREQ), and cut
		// off inside the last frame.
		seeds = append(seeds, whole, open, open[:len(open)-1])
	}
	return seeds
}

func fuzzProtocolName(v packets.Version) string {
	if v == packets.V31 {
		return "MQIsdp"
	}
	return "MQTT"
}

func fuzzEncode(tb testing.TB, v packets.Version, p packets.Packet) []byte {
	tb.Helper()
	b, err := p.Append(nil, v)
	if err != nil {
		tb.Fatalf("encoding %T: %v", p, err)
	}
	return b
}

// fuzzListenAddr is the address every iteration's broker listens on, after
// the first: thousands of connections a second leave as many sockets in
// TIME_WAIT, and binding port 0 then has to search past them, which took
// milliseconds per bind after a few thousand iterations (the exec rate fell
// tenfold, and a fuzz worker was once killed as hung inside net.Listen).
// Binding the same port again is immediate (Go sets SO_REUSEADDR).
var fuzzListenAddr = "127.0.0.1:0"

// fuzzServer starts a broker with small limits on fuzzListenAddr and
// returns its address and a function that shuts it down (also run at cleanup, so
// a failing iteration does not leave it running into the next one).
func fuzzServer(t *testing.T, reg prometheus.Registerer, logs io.Writer, hidden bool) (string, func()) {
	t.Helper()
	srv, err := mqttd.New(mqttd.Options{
		Limits: mqttd.Limits{
			MaxPacketSize:     fuzzMaxPacket,
			MaxClientIDLength: 64,
			// Most streams end in EOF at once; this bounds the others.
			ConnectTimeout: 300 * time.Millisecond,
			WriteTimeout:   2 * time.Second,
			MaxOutboxBytes: 64 << 10,
			// Small windows, so that short inputs reach the queue and
			// the awaiting-PUBREL limit.
			MaxInflight:    4,
			MaxQueued:      16,
			MaxAwaitingRel: 8,
			MaxTopicLevels: 16,
		},
		// Only errors: a panic's stack is what a failure needs to show.
		Logger:     zerolog.New(logs).Level(zerolog.ErrorLevel),
		Registerer: reg,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	l, err := net.Listen("tcp", fuzzListenAddr)
	if err != nil {
		// Taken meanwhile by someone else: any port will do.
		l, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		t.Fatal(err)
	}
	fuzzListenAddr = l.Addr().String()
	if hidden {
		l = hideSocket(l)
	}
	if err := srv.AddListener("fuzz", l); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	stop := sync.OnceFunc(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, mqttd.ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	})
	t.Cleanup(stop)
	return l.Addr().String(), stop
}

// splitPoints cuts a stream of n bytes into 1 to fuzzMaxChunks writes at
// offsets drawn from seed, so the fuzzer can steer frames across reads.
func splitPoints(seed uint64, n int) []int {
	chunks := 1 + int(seed%fuzzMaxChunks)
	cuts := make([]int, 0, chunks+1)
	for range chunks - 1 {
		// splitmix64: every bit of the seed moves every cut.
		seed += 0x9E3779B97F4A7C15
		z := (seed ^ seed>>30) * 0xBF58476D1CE4E5B9
		z = (z ^ z>>27) * 0x94D049BB133111EB
		cuts = append(cuts, int((z^z>>31)%uint64(n+1)))
	}
	cuts = append(cuts, n)
	slices.Sort(cuts)
	return cuts
}

// streamEnd is how a stream ends as the broker's codec reads it, which
// decides how the harness ends the connection and what it may expect.
type streamEnd int

const (
	// endOpen: every frame is whole and accepted by the codec, and none
	// is a DISCONNECT.
	endOpen streamEnd = iota
	// endBroken: the first frame is not CONNECT, or a frame is rejected
	// by the codec (a malformed packet, a protocol error, too large).
	endBroken
	// endIncomplete: the stream stops inside a frame (or is empty).
	endIncomplete
	// endDisconnect: a DISCONNECT; nothing after it is read.
	endDisconnect
)

// clientStream is what the broker can have read from a stream: the
// frames the codec accepts, decoded as the broker decodes them, up to the
// first one it rejects or that is incomplete. The broker may stop earlier
// (its own checks refuse a CONNECT, a topic, a second CONNECT), so the
// packet ids and counts here bound what it may answer.
type clientStream struct {
	end streamEnd
	// connect is the first frame when it is a CONNECT the codec accepts.
	connect *packets.Connect
	// badConnect: the first frame is a CONNECT the codec rejects; the
	// broker may answer with a refusing CONNACK, in the form of 3.1.1 or
	// of 5.0, and nothing else.
	badConnect bool

	pub1, pub2, pubrec, pubrel map[uint16]bool  // ids of client PUBLISH QoS 1, 2, PUBREC, PUBREL
	subs, unsubs               map[uint16][]int // SUBSCRIBE, UNSUBSCRIBE ids: their filter counts
	pings                      int              // PINGREQs, the harness's own included
}

func parseStream(b []byte) *clientStream {
	cs := &clientStream{
		pub1: map[uint16]bool{}, pub2: map[uint16]bool{}, pubrec: map[uint16]bool{}, pubrel: map[uint16]bool{},
		subs: map[uint16][]int{}, unsubs: map[uint16][]int{},
	}
	fh, n, err := packets.ParseFixedHeader(b, 0, fuzzMaxPacket)
	switch {
	case err != nil:
		// Only a CONNECT gets past the first-packet check, so this is a
		// CONNECT declaring more than the packet limit, or not a CONNECT.
		cs.end = endBroken
		cs.badConnect = packets.Type(b[0]>>4) == packets.TypeConnect
		return cs
	case n == 0 || len(b) < n+fh.Remaining:
		cs.end = endIncomplete
		return cs
	}
	p, err := packets.Decode(fh, b[n:n+fh.Remaining], 0)
	if err != nil {
		cs.end, cs.badConnect = endBroken, true
		return cs
	}
	cs.connect = p.(*packets.Connect)
	v := cs.connect.ProtocolVersion
	for b = b[n+fh.Remaining:]; ; b = b[n+fh.Remaining:] {
		if len(b) == 0 {
			cs.end = endOpen
			return cs
		}
		fh, n, err = packets.ParseFixedHeader(b, v, fuzzMaxPacket)
		switch {
		case err != nil:
			cs.end = endBroken
			return cs
		case n == 0 || len(b) < n+fh.Remaining:
			cs.end = endIncomplete
			return cs
		}
		p, err := packets.Decode(fh, b[n:n+fh.Remaining], v)
		if err != nil {
			cs.end = endBroken
			return cs
		}
		switch p := p.(type) {
		case *packets.Publish:
			switch p.QoS {
			case 1:
				cs.pub1[p.PacketID] = true
			case 2:
				cs.pub2[p.PacketID] = true
			}
		case *packets.Pubrec:
			cs.pubrec[p.PacketID] = true
		case *packets.Pubrel:
			cs.pubrel[p.PacketID] = true
		case *packets.Subscribe:
			cs.subs[p.PacketID] = append(cs.subs[p.PacketID], len(p.Subscriptions))
		case *packets.Unsubscribe:
			cs.unsubs[p.PacketID] = append(cs.unsubs[p.PacketID], len(p.Filters))
		case *packets.Pingreq:
			cs.pings++
		case *packets.Disconnect:
			cs.end = endDisconnect
			return cs
		}
	}
}

// pingreq is PINGREQ in every version.
var pingreq = []byte{byte(packets.TypePingreq) << 4, 0}

// exchange writes stream in the given cuts, ends the connection as
// FuzzConnection's doc comment says, and returns all the broker wrote
// back until it closed the connection; reset says the close was a reset
// (the broker closed with input unread), which may cut the reply short.
// It fails the test if the broker keeps the connection open. cs.pings
// counts the harness's PINGREQ when it sends one.
func exchange(t *testing.T, addr string, stream []byte, cuts []int, cs *clientStream) (reply []byte, reset bool) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	tc := nc.(*net.TCPConn)
	// Read while writing: answers to a long stream can fill the socket
	// buffers, and a broker blocked writing to us would stop reading.
	rr := startReplyReader(tc)
	fail := func(format string, args ...any) {
		t.Helper()
		rr.stop(tc)
		t.Fatalf("%s\nstream: % X\nreply: % X", fmt.Sprintf(format, args...), stream, rr.bytes())
	}

	tc.SetDeadline(time.Now().Add(fuzzCloseWithin))
	var werr error
	prev := 0
	for _, cut := range cuts {
		if _, werr = tc.Write(stream[prev:cut]); werr != nil {
			// The broker may close at any bad frame; the rest is moot.
			break
		}
		prev = cut
	}
	if isTimeoutErr(werr) {
		fail("broker stopped reading %d bytes into the stream without closing", prev)
	}

	why := "the client's EOF"
	switch cs.end {
	case endOpen:
		if werr == nil {
			if _, err := tc.Write(pingreq); err == nil {
				cs.pings++
				tc.SetReadDeadline(time.Now().Add(fuzzCloseWithin))
				rr.wait(func(b []byte) bool { return countPingresps(b) >= cs.pings })
				if isTimeoutErr(rr.err()) {
					fail("broker neither answered PINGREQ nor closed within %v [MQTT-3.12.4-1]", fuzzCloseWithin)
				}
			}
		}
		tc.CloseWrite()
	case endBroken:
		// No EOF: a broker must close on a protocol violation by itself
		// [MQTT-4.8.0-1] (5.0 §4.13), and an EOF would hide one that did not.
		why = "a frame the codec rejects"
	default:
		// After DISCONNECT the client closes [MQTT-3.14.4-1]; a cut-off
		// frame would keep the broker waiting for its end.
		tc.CloseWrite()
	}
	tc.SetReadDeadline(time.Now().Add(fuzzCloseWithin))
	rr.wait(func([]byte) bool { return false })
	switch err := rr.err(); {
	case err == nil:
	case errors.Is(err, syscall.ECONNRESET):
		reset = true
	case isTimeoutErr(err):
		fail("broker did not close the connection within %v of %s", fuzzCloseWithin, why)
	default:
		fail("reading the reply: %v", err)
	}
	return rr.bytes(), reset
}

// replyReader collects what the broker writes, on a goroutine of its own.
type replyReader struct {
	mu      sync.Mutex
	buf     []byte
	readErr error         // nil for EOF; valid once done is closed
	more    chan struct{} // a token after each read
	done    chan struct{} // closed when reading ends
}

func startReplyReader(c net.Conn) *replyReader {
	rr := &replyReader{more: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(rr.done)
		b := make([]byte, 32<<10)
		for {
			n, err := c.Read(b)
			rr.mu.Lock()
			rr.buf = append(rr.buf, b[:n]...)
			rr.mu.Unlock()
			select {
			case rr.more <- struct{}{}:
			default:
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					rr.readErr = err
				}
				return
			}
		}
	}()
	return rr
}

func (rr *replyReader) bytes() []byte {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return rr.buf
}

// wait blocks until enough(bytes so far) holds or reading has ended.
func (rr *replyReader) wait(enough func([]byte) bool) {
	for !enough(rr.bytes()) {
		select {
		case <-rr.more:
		case <-rr.done:
			return
		}
	}
}

// err is how reading ended: nil while it goes on or after EOF.
func (rr *replyReader) err() error {
	select {
	case <-rr.done:
		return rr.readErr
	default:
		return nil
	}
}

// stop ends the reader before a failure is reported, so that the test
// leaves no goroutine behind.
func (rr *replyReader) stop(c net.Conn) {
	c.Close()
	<-rr.done
}

// countPingresps counts the whole PINGRESP frames in b. A bad frame header
// ends the wait at once: no PINGRESP can be told apart after it, and
// checkReply reports it.
func countPingresps(b []byte) int {
	n := 0
	for len(b) > 0 {
		fh, hn, err := packets.ParseFixedHeader(b, packets.V5, 0)
		if err != nil {
			return math.MaxInt // nothing to wait for
		}
		if hn == 0 || len(b) < hn+fh.Remaining {
			return n
		}
		if fh.Type == packets.TypePingresp {
			n++
		}
		b = b[hn+fh.Remaining:]
	}
	return n
}

// checkReply checks what the broker wrote back against the stream.
func checkReply(cs *clientStream, reply []byte, reset bool) error {
	switch {
	case cs.connect != nil:
		return cs.checkSession(reply, reset)
	case cs.badConnect:
		if len(reply) == 0 {
			return nil
		}
		// The level may be unknown or unsupported, so either form will do.
		var errs []error
		for _, v := range []packets.Version{packets.V311, packets.V5} {
			err := checkRefusal(reply, v, reset)
			if err == nil {
				return nil
			}
			errs = append(errs, fmt.Errorf("as version %d: %w", v, err))
		}
		return fmt.Errorf("the stream starts with a CONNECT the codec rejects: the answer may only be one refusing CONNACK:\n%w", errors.Join(errs...))
	case len(reply) > 0:
		return errors.New("the stream does not start with a whole CONNECT: nothing may be sent [MQTT-3.1.0-1]")
	}
	return nil
}

func checkRefusal(reply []byte, v packets.Version, reset bool) error {
	br := bufio.NewReader(bytes.NewReader(reply))
	p, err := packets.ReadPacket(br, v, 0)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) && reset:
		return nil // the reset may cut the last frame
	case err != nil:
		return err
	}
	ack, ok := p.(*packets.Connack)
	switch {
	case !ok:
		return fmt.Errorf("%T, not a CONNACK", p)
	case !connackRefuses(ack, v):
		return fmt.Errorf("CONNACK accepts it: %+v", ack)
	case br.Buffered() > 0:
		return fmt.Errorf("%d bytes after the refusing CONNACK", br.Buffered())
	}
	return nil
}

// connackRefuses reports a CONNACK that refuses the connection: the server must
// then close it, sending nothing more [MQTT-3.2.2-5] [MQTT-3.2.2-7].
func connackRefuses(ack *packets.Connack, v packets.Version) bool {
	if v == packets.V5 {
		return ack.ReasonCode >= 0x80
	}
	return ack.ReasonCode != 0
}

// checkSession checks the answer to a stream that starts with a CONNECT
// the codec accepts: a CONNACK first, then only packets a server may send
// in that version, each answering something the stream sent, and nothing
// after a refusing CONNACK or a DISCONNECT. It also checks the 5.0 limits
// the CONNECT set for what the server sends.
func (cs *clientStream) checkSession(reply []byte, reset bool) error {
	v := cs.connect.ProtocolVersion
	props := &cs.connect.Properties
	r := bytes.NewReader(reply)
	br := bufio.NewReader(r)
	offset := func() int { return len(reply) - r.Len() - br.Buffered() }
	serverQoS2 := map[uint16]bool{}
	pings := 0
	end := ""
	for i := 0; ; i++ {
		start := offset()
		p, err := packets.ReadPacket(br, v, 0)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case errors.Is(err, io.ErrUnexpectedEOF) && reset:
			return nil // the reset may cut the last frame
		case err != nil:
			return fmt.Errorf("packet %d at byte %d does not decode as version %d: %w", i, start, v, err)
		}
		size := offset() - start
		at := fmt.Sprintf("packet %d (%T at byte %d)", i, p, start)
		if end != "" {
			return fmt.Errorf("%s comes after %s", at, end)
		}
		if _, ok := p.(*packets.Connack); ok != (i == 0) {
			return fmt.Errorf("%s: the first packet, and only it, must be CONNACK [MQTT-3.2.0-1]", at)
		}
		if ap := ackProperties(p); ap != nil && v == packets.V5 && props.Has(packets.PropRequestProblemInfo) &&
			props.RequestProblemInfo == 0 && (ap.Has(packets.PropReasonString) || ap.Has(packets.PropUserProperty)) {
			return fmt.Errorf("%s carries a reason string or user property the client asked not to get [MQTT-3.1.2-29]", at)
		}
		switch p := p.(type) {
		case *packets.Connack:
			if connackRefuses(p, v) {
				end = "a refusing CONNACK"
			}
		case *packets.Publish:
			if v == packets.V5 && props.Has(packets.PropMaximumPacketSize) && size > int(props.MaximumPacketSize) {
				return fmt.Errorf("%s of %d bytes exceeds the client's Maximum Packet Size %d [MQTT-3.1.2-24]", at, size, props.MaximumPacketSize)
			}
			if p.Properties.Has(packets.PropTopicAlias) && p.Properties.TopicAlias > props.TopicAliasMaximum {
				return fmt.Errorf("%s uses topic alias %d, above the client's maximum %d [MQTT-3.2.2-17]", at, p.Properties.TopicAlias, props.TopicAliasMaximum)
			}
			if p.QoS == 2 {
				serverQoS2[p.PacketID] = true
			}
		case *packets.Puback:
			if !cs.pub1[p.PacketID] {
				return fmt.Errorf("%s answers no QoS 1 PUBLISH with id %d", at, p.PacketID)
			}
		case *packets.Pubrec:
			if !cs.pub2[p.PacketID] {
				return fmt.Errorf("%s answers no QoS 2 PUBLISH with id %d", at, p.PacketID)
			}
		case *packets.Pubcomp:
			if !cs.pubrel[p.PacketID] {
				return fmt.Errorf("%s answers no PUBREL with id %d", at, p.PacketID)
			}
		case *packets.Pubrel:
			// Either the next step of the server's own QoS 2 delivery, or
			// the answer to a PUBREC for an id it does not know (5.0 with
			// 0x92; 3.1.1 brokers answer it too, so the client can move on).
			if !serverQoS2[p.PacketID] && !cs.pubrec[p.PacketID] {
				return fmt.Errorf("%s releases id %d, which no QoS 2 PUBLISH of the server nor PUBREC of the client used", at, p.PacketID)
			}
		case *packets.Suback:
			if !slices.Contains(cs.subs[p.PacketID], len(p.ReasonCodes)) {
				return fmt.Errorf("%s with %d codes answers no SUBSCRIBE with id %d and as many filters (sent: %v) [MQTT-3.9.3-1]",
					at, len(p.ReasonCodes), p.PacketID, cs.subs[p.PacketID])
			}
		case *packets.Unsuback:
			counts, ok := cs.unsubs[p.PacketID]
			if !ok || v == packets.V5 && !slices.Contains(counts, len(p.ReasonCodes)) {
				return fmt.Errorf("%s with %d codes answers no UNSUBSCRIBE with id %d and as many filters (sent: %v)",
					at, len(p.ReasonCodes), p.PacketID, counts)
			}
		case *packets.Pingresp:
			if pings++; pings > cs.pings {
				return fmt.Errorf("%s: more PINGRESPs than the %d PINGREQs sent", at, cs.pings)
			}
		case *packets.Disconnect:
			if v != packets.V5 {
				return fmt.Errorf("%s: a server sends DISCONNECT only in 5.0", at)
			}
			end = "a server DISCONNECT [MQTT-3.14.4-1]"
		default:
			// CONNECT, SUBSCRIBE, UNSUBSCRIBE, PINGREQ go only to a server;
			// AUTH only to a client that asked for enhanced authentication,
			// which this broker refuses [MQTT-4.12.0-6].
			return fmt.Errorf("%s is not a packet this server may send", at)
		}
	}
}

// ackProperties returns the properties of the packets that may carry a
// reason string or user properties only when the client allows it.
func ackProperties(p packets.Packet) *packets.Properties {
	switch p := p.(type) {
	case *packets.Puback:
		return &p.Properties
	case *packets.Pubrec:
		return &p.Properties
	case *packets.Pubrel:
		return &p.Properties
	case *packets.Pubcomp:
		return &p.Properties
	case *packets.Suback:
		return &p.Properties
	case *packets.Unsuback:
		return &p.Properties
	}
	return nil
}

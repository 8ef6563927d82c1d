package mqttd_test

import (
	"context"
	"errors"
	"fmt"
	"io"
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

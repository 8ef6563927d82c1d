package mqttd

import (
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"mqttd/auth"
	"mqttd/cluster"
	"mqttd/packets"
	"mqttd/session"
)

// conn is one network connection. One reader at a time handles its input:
// for a plain socket, a goroutine the poller starts when bytes arrive and
// that ends when they are handled (conn_read_linux.go); for any other
// net.Conn (TLS, WebSocket), a goroutine of its own blocked in Read
// (serve, conn_read.go). The outbox makes sure exactly one goroutine writes
// at a time.
type conn struct {
	srv *Server
	// nc is the connection as accepted; nil once the poller serves it,
	// when its socket is ev's own descriptor (startEvent).
	nc  net.Conn
	out outbox

	bl        *blockingState // serve's, when not served by events
	ev        *eventConn     // the poller's, when served by events
	lastRead  atomic.Int64   // unix nanos of the last bytes read (events)
	idleLimit atomic.Int64   // nanos without input before closing (events)
	filedTick atomic.Int64   // the idle wheel's tick this connection is filed under
	connected atomic.Bool    // CONNECT accepted
	// evState is the events engine's evHup and evFraming, in one word
	// where two atomic.Bools took two: the four bytes hold connPos.
	evState atomic.Uint32
	// bytesIn and bytesOut count what was read from and written to the
	// socket (ClientState): an add a read or write system call, on a line
	// its reader and writer touch anyway.
	bytesIn, bytesOut atomic.Uint64

	version packets.Version
	// noProblemInfo is set when a 5.0 client asked for no problem
	// information (Request Problem Information 0): its acks carry no
	// Reason String [MQTT-3.1.2-29].
	noProblemInfo bool
	graceful      bool // DISCONNECT received: the will is discarded
	// pumpDue says an acknowledgement this read handled freed room in the
	// session's window: the reader pumps once per read (pumpIfDue), not
	// once per acknowledgement. The reader's own.
	pumpDue bool
	// committing is set while the reader routes a QoS 2 message with a
	// persistence group open, which stops every commit: it must not wait
	// for the cluster's outgoing queue (toCluster). The reader's own.
	committing bool
	// lingerDue: the reader told the client why it ends the connection
	// with a DISCONNECT, and reads what is still in flight before the
	// close (linger.go). The reader's own.
	lingerDue bool
	// keepAlive is the keepalive in seconds, as CONNECT has it (or the
	// server's cap of it); 0 means none. Two bytes where a Duration took
	// eight: with the small fields around it, conn fills 256 bytes, a
	// size class, not 288.
	keepAlive uint16
	// maxOut is the 5.0 client's Maximum Packet Size: a PUBLISH larger
	// than it is not sent [MQTT-3.1.2-24]. 0 means no limit.
	maxOut uint32
	// expiry is the session expiry interval in seconds, as CONNECT (or a
	// 5.0 DISCONNECT) set it and the limits capped it: 0 for a clean
	// session.
	expiry uint32
	// fwd is set while the reader routes a new QoS 2 message of a stored
	// session in a cluster with replicated sessions, for toCluster to
	// stamp it (cluster_qos2.go). The reader's own.
	fwd *qos2Forward
	// info is the client as the Authenticator and Authorizer know it,
	// filled in by the reader up to CONNECT and not changed after it:
	// the session's client.who then points at it too. It is allocated
	// apart, so that an offline session keeping it does not pin conn.
	info *auth.ClientInfo
	cl   *client
	will *session.Message
	// willDelay is the 5.0 will's Will Delay Interval, in seconds.
	willDelay uint32
	// idlePos is the connection's place in its idle wheel slot, guarded
	// by the wheel's lock.
	idlePos int32
	// willRef is the will's record in the cluster (cluster_will.go),
	// zero without one; claimRev the revision of this connection's claim
	// of its client id (cluster_owner.go).
	willRef  *cluster.WillRef
	claimRev uint64
	// succeeded: its user connected again with its client id while it
	// was open (a takeover), so a will with a delay is not published
	// [MQTT-3.1.2-8]. Under the server's mu.
	succeeded bool
	// rstate is readerIdle, readerRunning, ... (conn_read_linux.go); here,
	// beside succeeded, where it costs no padding.
	rstate atomic.Int32
	// aliases is the connection's topic alias tables (alias.go): set at
	// CONNECT when the client takes aliases, or by the reader when the
	// client first sets one; deliveries read it.
	aliases atomic.Pointer[topicAliases]

	closeOnce sync.Once
	// connPos is the connection's place in Server.conns, under the
	// server's mu.
	connPos int32

	dropWarned throttle // unix nanos of the last outbox-full warning
	// held are the acknowledgements waiting for the store (durable.go);
	// nil until the reader first changes durable state.
	held *heldAnswers
}

// link is the bridge whose connection to its remote broker c is
// (bridge_link.go), nil for a client's connection. The bridge is its
// session's, so that a connection pays nothing for it; the listener tells
// first, as c.cl is the reader's until CONNECT (a bridge's link is
// attached before anything else sees it).
func (c *conn) link() *bridgeRun {
	if c.info.Listener != bridgeListener {
		return nil
	}
	return c.cl.bridge.Load()
}

// keepAliveLimit is the keepalive as a duration; 0 means none.
func (c *conn) keepAliveLimit() time.Duration { return time.Duration(c.keepAlive) * time.Second }

func newConn(s *Server, nc net.Conn, listenerName string) *conn {
	c := &conn{
		srv: s,
		nc:  nc,
		out: outbox{max: int32(s.opts.Limits.MaxOutboxBytes)},
	}
	c.info = &auth.ClientInfo{Listener: listenerName, Remote: nc.RemoteAddr()}
	return c
}

// fields adds the connection's identity to a log event. Events carry it
// instead of each connection keeping a child logger, which would cost
// every idle connection a few hundred bytes for lines that are rare.
//
// The client id is added once CONNECT is accepted: until then the reader
// may be setting it while another goroutine (the connect timeout,
// Shutdown) closes the connection and logs.
func (c *conn) fields(e *zerolog.Event) *zerolog.Event {
	if e == nil {
		return nil
	}
	if c.connected.Load() {
		e = e.Str("client_id", c.info.ClientID)
	}
	return e.Str("remote", c.info.Remote.String()).Str("listener", c.info.Listener)
}

// panicked records a handler panic, a bug, and returns the reason to close.
func (c *conn) panicked(r any) error {
	c.srv.stats.panics.Add(1)
	c.fields(c.srv.log.Error()).Interface("panic", r).Bytes("stack", debug.Stack()).Msg("connection handler panicked; closing it")
	return closing(CloseInternalError, fmt.Errorf("internal error: %v", r))
}

// sendDisconnect tells a 5.0 client why the server ends the connection;
// 3.1/3.1.1 have no server DISCONNECT, so there the close alone says it.
// Either way the answers to the packets before the bad one, still waiting
// for the reader to flush them, go out first.
func (c *conn) sendDisconnect(code packets.ReasonCode) { c.sendDisconnectWhy(code, "") }

// sendDisconnectWhy is sendDisconnect saying why in a Reason String, which
// a DISCONNECT may carry whether or not the client asked for problem
// information.
func (c *conn) sendDisconnectWhy(code packets.ReasonCode, why string) {
	told := false
	if c.version == packets.V5 && c.cl != nil {
		d := &packets.Disconnect{ReasonCode: code, Properties: c.reasonString(why, 4)}
		told = c.enqueue(last, func(b []byte) []byte {
			b, _ = d.Append(b, c.version)
			return b
		})
	}
	c.flushDeferred()
	// A writer goroutine may own the outbox (a delivery being written):
	// closing now would discard what it has not written yet.
	c.drain(time.Now().Add(inlineWriteTimeout))
	// Written: the client may still be sending (linger.go). A client
	// that went silent has nothing in flight.
	c.lingerDue = told && code != packets.KeepAliveTimeout && c.out.pending() == 0
}

// closeWith closes the connection, keeping the first reason given; the
// reason is logged and counted.
func (c *conn) closeWith(err error) { c.closeLingering(err, false) }

// closeReader is closeWith on the connection's reader. When the reader
// told the client why with a DISCONNECT, the socket stays open for
// endLinger, which the reader calls after the cleanup.
func (c *conn) closeReader(err error) {
	due := c.lingerDue
	c.lingerDue = false // set again only if this call closes
	c.closeLingering(err, due)
}

// endReader is a reader's last step, after the cleanup: the lingering
// (endLinger), then the connection untracked. One deferred call, not
// two: the reader's frame is on every idle connection's stack
// (TestReaderStacksStay4KiB).
func (c *conn) endReader() {
	defer c.srv.untrack(c)
	c.endLinger()
}

// endLinger reads what the client still sends after the server's
// DISCONNECT, then closes the socket closeReader left open (linger.go).
func (c *conn) endLinger() {
	if !c.lingerDue {
		return
	}
	s := c.srv
	if s.lingering.Add(1) <= maxLingering {
		c.lingerInput()
	} else {
		s.stats.lingerSkipped.Add(1)
		if !s.lingerWarned.limited() {
			c.fields(s.log.Warn()).Int("lingering", maxLingering).Msg("connection closed at once after the server's DISCONNECT: " +
				"too many lingering (logged at most every 10 s; mqttd_linger_skipped_total counts them all)")
		}
	}
	s.lingering.Add(-1)
	c.closeSocket()
}

func (c *conn) closeLingering(err error, linger bool) {
	c.closeOnce.Do(func() {
		reason := reasonOf(err)
		c.srv.stats.disconnects[reason].Add(1)
		// A client that connected gets one line at info whatever the
		// reason; a connection that never did (a port scan, a health
		// check) only when something went wrong. Shutdown logs once for
		// all of them.
		connected := c.connected.Load()
		ev := c.srv.log.Info()
		switch {
		case reason == CloseShutdown || !connected && reason.quiet():
			ev = c.srv.log.Debug()
		case !connected && !c.srv.closeLog.allow():
			// At most loginLogBurst lines at info every warnInterval
			// (mqttd_disconnects_total counts them all): one client
			// refused as fast as it can connect would otherwise write
			// a line each time.
			ev = c.srv.log.Debug()
		}
		msg := "connection closed"
		if connected {
			msg = "client disconnected"
		}
		c.fields(ev).Stringer("reason", reason).Str("detail", err.Error()).Msg(msg)
		if b := c.link(); b != nil {
			b.closedFor(err)
		}
		c.out.close(&c.srv.stats.outboxBytes)
		if linger {
			c.lingerDue = true // endLinger closes it
		} else {
			c.closeSocket()
		}
		if c.srv.outboxWait.n.Load() > 0 {
			go c.srv.outboxWait.wake() // the caller may hold locks a pump takes
		}
	})
}

// shutdown is called by Server.Shutdown from another goroutine.
func (c *conn) shutdown() {
	if c.link() != nil {
		c.sendDisconnectAsync(packets.Success) // a client's DISCONNECT: the remote ends the session normally
	} else {
		c.sendDisconnectAsync(packets.ServerShuttingDown)
	}
	c.closeWith(errShutdown)
}

// sendDisconnectAsync writes a 5.0 DISCONNECT from a goroutine that is not
// the reader, before that goroutine closes the connection. When a writer
// is already running the frame waits behind what it is writing, so this
// waits for the outbox to drain; either way for at most a second, so that
// a stuck client cannot delay whoever is closing it.
func (c *conn) sendDisconnectAsync(code packets.ReasonCode) {
	// Only once CONNECT is accepted: before that the reader may still be
	// setting the version, and a DISCONNECT must not precede the CONNACK
	// [MQTT-3.14.0-1]. connected is stored after both.
	if !c.connected.Load() || c.version != packets.V5 && c.link() == nil {
		return
	}
	disconnect := &packets.Disconnect{ReasonCode: code}
	if !c.enqueue(inline, func(b []byte) []byte {
		b, _ = disconnect.Append(b, c.version)
		return b
	}) {
		return
	}
	c.drain(time.Now().Add(inlineWriteTimeout))
}

// drain waits until everything queued is written, or deadline.
func (c *conn) drain(deadline time.Time) {
	for c.out.pending() > 0 {
		room := c.drainSignal()
		if room == nil || !waitRoom(room, deadline) {
			return
		}
	}
}

// cleanup runs when the reader ends: the session is released (or dropped
// when it was clean) and the will is published if the close was abnormal.
//
// It runs after the readers' own recover, so it recovers its own panics
// (an inline subscriber's handler receiving the will, say): none may
// reach the connection loop.
func (c *conn) cleanup() {
	defer func() {
		if r := recover(); r != nil {
			c.panicked(r)
		}
	}()
	c.srv.forgetAuth(c)
	if c.cl != nil {
		c.srv.detach(c)
		c.srv.ends.Signal()
		c.settleWill()
	}
	if c.srv.dur != nil {
		// What the reader changed last is stored, though no answer waits.
		c.srv.dur.commit.Flush()
	}
	if b := c.link(); b != nil {
		b.linkEnded()
	}
}

// warnEvery logs msg at warn level unless it was logged for this
// connection within warnInterval; last holds the time it was.
func (c *conn) warnEvery(last *throttle, msg string) {
	if !last.limited() {
		c.fields(c.srv.log.Warn()).Msg(msg)
	}
}

// isTimeout reports a deadline that passed on a read, write or accept.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

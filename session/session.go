package session

import (
	"errors"
	"math"
	"time"
)

// Defaults used where Config leaves a field zero; the broker's defaults
// (mqttd.DefaultMaxInflight, ...) are these.
const (
	DefaultMaxInflight    = 100
	DefaultMaxQueued      = 100000
	DefaultMaxQueuedBytes = 16 << 20
	DefaultMaxAwaitingRel = 1000
)

// ErrAwaitingRelFull is returned by ReceiveQoS2 when the client already has
// the maximum number of QoS 2 messages waiting for PUBREL.
var ErrAwaitingRelFull = errors.New("session: too many QoS 2 messages awaiting PUBREL")

// Outbound is one message on its way to this session's client.
type Outbound struct {
	Msg *Message
	// Seq orders the session's entries; Deliver gives it, and the packet
	// id derives from it (PacketIDOf).
	Seq      uint64
	QoS      byte     // delivery QoS: min(published, granted)
	Retain   bool     // retain flag on the wire
	SubIDs   []uint32 // 5.0 subscription identifiers that matched
	PacketID uint16   // PacketIDOf(Seq), set when it enters the in-flight window
	Dup      bool     // it was sent before: resend with DUP set
	Released bool     // PUBREC received: PUBREL is the outstanding packet
	// Sends counts the times the PUBLISH was handed to a connection: once
	// as it enters the window, once more at each Resume (saturating). Not
	// stored: a restart counts again from the next connection.
	Sends  uint8
	resend bool // in the window, to be sent again on this connection (Resume)
	held   bool // queued until Stable passes its Seq (Target.Hold)
}

// Result says what Deliver did with a message.
type Result int

// Deliver results.
const (
	Send       Result = iota // in the window: encode and write it now
	Queued                   // waiting for the window or for the client
	DropFull                 // the queue is full: dropped
	DropQoS0                 // QoS 0 for an offline client: not kept
	DropExpiry               // expired before delivery
)

// Session is the protocol state of one client id. It is not safe for
// concurrent use: the broker serialises access with its own lock.
//
// It is kept small, since the broker holds one per client, idle or not:
// the limits are compact, the queues are allocated on first use, the
// subscriptions are a slice (clients typically hold a handful) and what
// an online client seldom has is behind one pointer, so that a Session
// fills an 80-byte allocation. It has no client id: the broker's client
// record has it, and a copy here took the Session to 96 bytes.
type Session struct {
	lim    *limits
	window int32
	live   int32  // inflight entries not yet acknowledged
	seq    uint64 // the Seq the next entry gets

	q        *queues
	subs     []Subscription
	subBytes int64 // SubscriptionCost of subs, together
	expireAt int64 // unix nanos the session expires at while offline; 0: online, or never
	rare     *rare // nil until one of its fields is first set
}

// queues are the outbound messages: those in the window in send order
// (entries acknowledged out of order are tombstoned) and those waiting.
type queues struct {
	inflight     ring
	pending      ring
	pendingBytes int // Message.Size and cost of everything in pending
	resends      int // inflight entries marked resend
	// resendAt is where nextResend goes on looking (inflight.popped plus
	// a position), valid while inflight.compactions is resendEpoch: all
	// marked entries are at or after it.
	resendAt    uint64
	resendEpoch uint32
	// stable is the Seq below which held entries may be sent (Stable);
	// here rather than in Session, which every idle client has.
	stable uint64
}

// New returns an empty session.
func New(lim *Limits) *Session {
	return &Session{lim: &lim.l, window: lim.l.maxInflight}
}

// SetLimits moves the session to other limits (a bridge whose bounds a
// reload changed), taking its counts along. Messages already queued past
// a lower bound stay; new ones wait for room.
func (s *Session) SetLimits(lim *Limits) {
	if &lim.l == s.lim {
		return
	}
	s.lim.inflight.Add(-int64(s.live))
	s.lim.subBytes.Add(-s.subBytes)
	s.lim = &lim.l
	s.lim.inflight.Add(int64(s.live))
	s.lim.subBytes.Add(s.subBytes)
	s.window = min(s.window, s.lim.maxInflight)
}

// queues returns the outbound queues, allocating them on first use.
func (s *Session) queues() *queues {
	if s.q == nil {
		s.q = new(queues)
	}
	return s.q
}

// SetReceiveMaximum lowers the outbound window to a 5.0 client's Receive
// Maximum for the current connection (0 restores the configured window).
func (s *Session) SetReceiveMaximum(n int) {
	s.window = s.lim.maxInflight
	if n > 0 && n < int(s.window) {
		s.window = int32(n)
	}
}

// Target is what a client can take when a message is offered to it.
type Target struct {
	Online  bool // the client is connected
	CanSend bool // its connection can take another packet now
	// Budget bounds the bytes of all sessions' queues together; Deliver,
	// Next and Clear must be given the same one.
	Budget *QueueBudget
	// Hold keeps a QoS 2 entry queued, not sent, until Stable passes its
	// Seq: the broker sends a QoS 2 message to a session it keeps on disk
	// only once it is stored, so that a crash cannot leave the client
	// holding a message the broker forgot (which it would then send again
	// as a new one, or whose packet id it would give to another).
	Hold bool
}

// Deliver offers o for delivery. When the client can take it now and the
// window has room, o gets a packet id, enters the window and Deliver
// returns Send with the entry to encode. Otherwise o is queued, or
// dropped: expired, QoS 0 for an offline client, or no room in the queue
// (limits.max_queued messages or limits.max_queued_bytes for the
// session, or to.Budget for all of them). QoS 0 messages never enter the
// window. now is read only to see whether o.Msg expired: for a message
// without an expiry the caller may pass the zero time instead of reading
// the clock.
func (s *Session) Deliver(o Outbound, to Target, now time.Time) (Outbound, Result) {
	if o.Msg.Expired(now) {
		return o, DropExpiry
	}
	if o.QoS == 0 && !to.Online && !s.lim.queueQoS0 {
		return o, DropQoS0
	}
	o.held = to.Hold && o.QoS == 2
	if to.CanSend && !o.held && s.MaySend(o.QoS) {
		if o.QoS > 0 {
			o.Seq = s.seq
			s.seq++
			o = s.enter(o)
		}
		return o, Send
	}
	size, cost := o.Msg.Size(), o.cost()
	if s.Queued() >= int(s.lim.maxQueued) || int64(s.QueuedBytes()+size+cost) > s.lim.maxQueuedBytes ||
		!to.Budget.hold(o.Msg, int64(size), int64(cost)) {
		return o, DropFull
	}
	o.Seq = s.seq
	s.seq++
	s.queues().pending.push(o)
	s.q.pendingBytes += size + cost
	return o, Queued
}

// MaySend reports whether Deliver would send a message of delivery QoS
// qos now, given a client that can take it (Target.CanSend) and a
// message not held for the store: nothing is queued or to be sent again,
// and for QoS 1/2 the window has room. A caller asks it before working
// out whether the client can take the message, which most messages of a
// client that keeps its window full never need.
func (s *Session) MaySend(qos byte) bool {
	return s.Queued() == 0 && !s.Resending() && (qos == 0 || s.live < s.window && s.free(s.seq))
}

// ReserveID returns a packet id for a packet of the client's own (a
// bridge's SUBSCRIBE to its remote): the Seq it derives from is skipped,
// so no message takes the id for the next 65,534 entries.
func (s *Session) ReserveID() uint16 {
	id := PacketIDOf(s.seq)
	s.seq++
	return id
}

// Stable lets the held entries up to seq be sent: they are stored.
func (s *Session) Stable(seq uint64) {
	q := s.queues()
	q.stable = max(q.stable, seq+1)
}

// PacketIDOf is the packet id of the entry with Seq seq. Derived rather
// than allocated, it is the same after the broker restarts from its
// store, so a message in flight is sent again under its own id
// [MQTT-4.4.0-1] (a QoS 2 receiver dedupes by it) without the id being
// written down as the message enters the window.
func PacketIDOf(seq uint64) uint16 { return uint16(seq%65535) + 1 }

// free reports whether the packet id of seq is free: an entry still in
// flight 65,535 entries later holds it, and the new one waits for it.
func (s *Session) free(seq uint64) bool {
	return s.q == nil || s.q.inflight.idFree(seq)
}

// Next takes what is to be sent next: first an entry of the window that
// Resume marked for sending again, then the oldest queued message that
// may be sent now: a QoS 0 message, or a QoS 1/2 message when the window
// has room (it gets a packet id). Expired messages are dropped and
// counted in expired. b is the budget Deliver was given.
func (s *Session) Next(now time.Time, b *QueueBudget) (o Outbound, ok bool, expired int) {
	o, ok = s.NextFit(func() time.Time { return now }, b, math.MaxInt, func(Outbound) { expired++ })
	return o, ok, expired
}

// NextFit is Next for a connection that has room for fit bytes only: a
// message whose Size is larger stays where it is, and ok is false. Each
// expired message dropped is given to expired. clock is called only for
// a message that can expire.
func (s *Session) NextFit(clock func() time.Time, b *QueueBudget, fit int, expired func(Outbound)) (o Outbound, ok bool) {
	if s.Resending() {
		return s.nextResend(fit)
	}
	for s.Queued() > 0 {
		pending := &s.q.pending
		head := pending.peek()
		if head.Msg.Expiry != 0 && head.Msg.Expired(clock()) {
			o := pending.pop()
			s.unqueue(o, b)
			expired(o)
			continue
		}
		if (head.QoS > 0 && (s.live >= s.window || !s.free(head.Seq))) || head.Msg.Size() > fit ||
			(head.held && head.Seq >= s.q.stable) {
			return Outbound{}, false
		}
		o = pending.pop()
		o.held = false
		s.unqueue(o, b)
		if o.QoS > 0 {
			o = s.enter(o)
		}
		return o, true
	}
	return Outbound{}, false
}

// unqueue accounts for o leaving the queue.
func (s *Session) unqueue(o Outbound, b *QueueBudget) {
	size, cost := o.Msg.Size(), o.cost()
	s.q.pendingBytes -= size + cost
	b.release(o.Msg, int64(size), int64(cost))
}

// DropOldest takes the oldest queued message out of the queue (not the
// window: those the client may have), for a queue that makes room for
// new messages by losing old ones. ok is false when nothing is queued. b
// is the budget Deliver was given.
func (s *Session) DropOldest(b *QueueBudget) (o Outbound, ok bool) {
	if s.Queued() == 0 {
		return Outbound{}, false
	}
	o = s.q.pending.pop()
	s.unqueue(o, b)
	return o, true
}

// TakeIf takes out of the session the messages its client has not
// received yet for which take reports true, and returns them in order:
// the window's entries not acknowledged (a QoS 2 message past PUBREC
// stays: its client has it), then the queued ones, each with the Seq it
// had here. b is the budget Deliver was given.
func (s *Session) TakeIf(take func(*Outbound) bool, b *QueueBudget) []Outbound {
	if s.q == nil {
		return nil
	}
	var out []Outbound
	var ids []uint16
	s.q.inflight.each(func(e *Outbound) {
		if !e.Released && take(e) {
			ids = append(ids, e.PacketID)
		}
	})
	for _, id := range ids { // the window is small: a find each is fine
		i := s.find(id)
		o := *s.q.inflight.at(i)
		o.PacketID, o.Dup, o.resend = 0, false, false
		out = append(out, o)
		s.complete(i)
	}
	for range s.q.pending.len() {
		o := s.q.pending.pop()
		if take(&o) {
			s.unqueue(o, b)
			out = append(out, o)
		} else {
			s.q.pending.push(o)
		}
	}
	return out
}

// Clear empties a session that ends: its queue goes back to b, the
// budget Deliver was given, and its window, subscriptions and QoS 2
// state are let go, so that whatever still points to the ended session
// (a closed connection waiting for the idle wheel to pass) pins none of
// them.
func (s *Session) Clear(b *QueueBudget) {
	for s.Queued() > 0 {
		s.unqueue(s.q.pending.pop(), b)
	}
	s.lim.inflight.Add(-int64(s.live))
	s.lim.subBytes.Add(-s.subBytes)
	s.q, s.live, s.subBytes = nil, 0, 0
	s.subs = nil
	if r := s.rare; r != nil {
		*r = rare{leftAt: r.leftAt}
	}
}

// enter puts o, whose packet id is free, into the window. Its DUP flag
// stays: an entry read back from the store may have been sent before.
func (s *Session) enter(o Outbound) Outbound {
	o.PacketID = PacketIDOf(o.Seq)
	o.Released = false
	o.Sends = 1
	s.queues().inflight.push(o)
	s.live++
	s.lim.inflight.Add(1)
	return o
}

// Puback completes a QoS 1 message and returns its Seq. It reports false
// for an id that is not a QoS 1 message in flight.
func (s *Session) Puback(id uint16) (seq uint64, ok bool) {
	i := s.find(id)
	if i < 0 || s.q.inflight.at(i).QoS != 1 {
		return 0, false
	}
	return s.complete(i), true
}

// Pubrec moves a QoS 2 message to the PUBREL step and returns the entry
// as it was, Released set: a PUBREL is to be sent. For an entry released
// before, the entry returned has no Msg. With failed (a 5.0
// reason code of 0x80 or above) the message is complete instead, and
// Released is false. ok is false for an id that is not a QoS 2 message
// in flight.
func (s *Session) Pubrec(id uint16, failed bool) (o Outbound, ok bool) {
	i := s.find(id)
	if i < 0 || s.q.inflight.at(i).QoS != 2 {
		return Outbound{}, false
	}
	e := s.q.inflight.at(i)
	o = *e
	if failed {
		s.complete(i)
		o.Released = false
		return o, true
	}
	e.Released = true
	e.Msg = nil // only the packet id is needed from now on
	o.Released = true
	return o, true
}

// Pubcomp completes a QoS 2 message whose PUBREL was sent and returns its
// Seq.
func (s *Session) Pubcomp(id uint16) (seq uint64, ok bool) {
	i := s.find(id)
	if i < 0 || !s.q.inflight.at(i).Released {
		return 0, false
	}
	return s.complete(i), true
}

// InFlight reports the QoS of the message in flight under packet id, and
// whether its PUBREL was sent; ok is false when none is. The broker asks
// it of an acknowledgement that completed nothing, to tell one for an
// unknown id (late, harmless) from one of the wrong kind for the flow (a
// protocol error).
func (s *Session) InFlight(id uint16) (qos byte, released, ok bool) {
	i := s.find(id)
	if i < 0 {
		return 0, false, false
	}
	e := s.q.inflight.at(i)
	return e.QoS, e.Released, true
}

// find returns the window position of packet id, or -1.
func (s *Session) find(id uint16) int {
	if s.q == nil {
		return -1
	}
	return s.q.inflight.find(id)
}

func (s *Session) complete(i int) (seq uint64) {
	e := s.q.inflight.at(i)
	if e.resend {
		s.q.resends-- // acknowledged before it was sent again
	}
	seq = e.Seq
	s.q.inflight.remove(i)
	s.live--
	s.lim.inflight.Add(-1)
	return seq
}

// Discard completes a message in flight that will never be sent, as if
// it had been acknowledged: a 5.0 client's Maximum Packet Size forbids it
// [MQTT-3.1.2-25]. It returns the entry's Seq, or false for an id not in
// flight.
func (s *Session) Discard(id uint16) (seq uint64, ok bool) {
	i := s.find(id)
	if i < 0 {
		return 0, false
	}
	return s.complete(i), true
}

// Resume prepares the window for a new connection: every entry is to be
// sent again, PUBLISH with DUP set and released ones as PUBREL, in send
// order [MQTT-4.6.0-1]. Next hands them out before any queued message, as
// the connection has room, so that a large window is not written into
// one outbox at once.
//
// With maxSends above 0, a PUBLISH already sent maxSends times is given
// up on instead: completed as if acknowledged, and returned (gaveUp, in
// send order), for the broker to set aside and take out of its store.
func (s *Session) Resume(maxSends uint8) (gaveUp []Outbound) {
	if s.q == nil {
		return nil
	}
	if maxSends > 0 {
		var ids []uint16
		s.q.inflight.each(func(e *Outbound) {
			if !e.Released && e.Sends >= maxSends {
				ids = append(ids, e.PacketID)
			}
		})
		for _, id := range ids {
			i := s.find(id)
			gaveUp = append(gaveUp, *s.q.inflight.at(i))
			s.complete(i)
		}
	}
	s.q.resends = 0
	s.q.resendAt, s.q.resendEpoch = s.q.inflight.popped, s.q.inflight.compactions
	s.q.inflight.each(func(e *Outbound) {
		if !e.Released {
			e.Dup = true
			e.Sends = max(e.Sends, e.Sends+1) // saturating
		}
		e.resend = true
		s.q.resends++
	})
	return gaveUp
}

// Resending reports whether entries marked by Resume wait to be sent.
func (s *Session) Resending() bool { return s.q != nil && s.q.resends > 0 }

// nextResend takes the oldest entry Resume marked, if any and if it fits
// in fit bytes. It goes on from where it stopped, so resending a window
// costs one pass over it.
func (s *Session) nextResend(fit int) (o Outbound, ok bool) {
	r := &s.q.inflight
	start := 0
	if s.q.resendEpoch == r.compactions && s.q.resendAt > r.popped {
		start = int(s.q.resendAt - r.popped)
	}
	for i := start; i < r.n; i++ {
		j := r.slot(i)
		if r.dead[j] || !r.buf[j].resend {
			continue
		}
		e := &r.buf[j]
		if !e.Released && e.Msg.Size() > fit {
			return Outbound{}, false
		}
		// The entries sent again and not acknowledged yet count against
		// the window: a client back with a lower Receive Maximum gets no
		// more than it [MQTT-3.3.4-9].
		if s.live-int32(s.q.resends) >= s.window {
			return Outbound{}, false
		}
		e.resend = false
		s.q.resends--
		s.q.resendAt, s.q.resendEpoch = r.popped+uint64(i)+1, r.compactions
		return *e, true
	}
	return Outbound{}, false
}

// SetExpireAt records when the session expires, in unix nanos; 0 means it
// does not (its client is online).
func (s *Session) SetExpireAt(at int64) { s.expireAt = at }

// ExpireAt reports when the session expires, as SetExpireAt recorded it.
func (s *Session) ExpireAt() int64 { return s.expireAt }

// SetLeftAt records when the session's client left, in unix nanos.
func (s *Session) SetLeftAt(at int64) { s.more().leftAt = at }

// LeftAt reports when the session's client last left, as SetLeftAt
// recorded it; 0 when not known.
func (s *Session) LeftAt() int64 {
	if s.rare == nil {
		return 0
	}
	return s.rare.leftAt
}

// Inflight reports how many QoS 1/2 messages are in the window.
func (s *Session) Inflight() int { return int(s.live) }

// Queued reports how many messages wait outside the window.
func (s *Session) Queued() int {
	if s.q == nil {
		return 0
	}
	return s.q.pending.len()
}

// QueuedBytes reports the Message.Size of the messages waiting outside
// the window and the cost of their entries (EntryCost, subscription
// identifiers).
func (s *Session) QueuedBytes() int {
	if s.q == nil {
		return 0
	}
	return s.q.pendingBytes
}

package session

import (
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"mqttd/packets"
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

// Message is an application message as routed. It is immutable once routed
// and shared by every session it is delivered to.
//
// It is allocated for every message a client publishes, so it is kept
// small (88 bytes): its expiry is in Unix nanoseconds rather than a
// time.Time, and the small fields share the last word.
type Message struct {
	Topic   string
	Payload []byte
	// Properties are the 5.0 properties to forward; nil when there are
	// none, which spares 3.x messages carrying a few hundred empty bytes.
	Properties *packets.Properties
	// Expiry is when the message expires, in Unix nanoseconds; 0: never.
	Expiry  int64
	Origin  string // client id of the publisher, for No Local
	storeID atomic.Uint64
	queued  atomic.Int32 // how many session queues hold it (QueueBudget)
	QoS     byte         // as published
	Retain  bool         // as published
}

// ExpiresAt returns when m expires, and false when it never does.
func (m *Message) ExpiresAt() (time.Time, bool) {
	if m.Expiry == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, m.Expiry), true
}

// SetExpiresAt makes m expire at t.
func (m *Message) SetExpiresAt(t time.Time) { m.Expiry = t.UnixNano() }

// StoreID returns the id under which the broker's store keeps m, giving
// it one from next on first use: a message delivered to many persistent
// sessions, or retained, is stored once.
func (m *Message) StoreID(next *atomic.Uint64) uint64 {
	if id := m.storeID.Load(); id != 0 {
		return id
	}
	id := next.Add(1)
	if m.storeID.CompareAndSwap(0, id) {
		return id
	}
	return m.storeID.Load()
}

// SetStoreID records the id a message read back from the store has.
func (m *Message) SetStoreID(id uint64) { m.storeID.Store(id) }

// QueueBudget bounds the bytes the queues of all sessions hold together.
// A message queued by many sessions is shared, so it counts once: from
// the first queue it enters until the last one lets it go; each entry
// that holds it counts its own cost (EntryCost, subscription identifiers).
type QueueBudget struct {
	// Max is the most bytes the queues may hold; 0 means no bound.
	Max   int64
	bytes atomic.Int64
}

// Bytes reports the Message.Size of the messages the queues hold, and
// the cost of their entries.
func (b *QueueBudget) Bytes() int64 { return b.bytes.Load() }

// hold counts one more queue holding m, whose Size is size, with an
// entry costing entry bytes: the message counts with the first queue, the
// entry with each. It is refused when the budget has no room for what it
// adds. A nil budget bounds and counts nothing.
func (b *QueueBudget) hold(m *Message, size, entry int64) bool {
	if b == nil {
		return true
	}
	for {
		n := m.queued.Load()
		add := entry
		if n == 0 {
			add += size
		}
		if b.Max > 0 && b.bytes.Load()+add > b.Max {
			return false
		}
		if m.queued.CompareAndSwap(n, n+1) {
			b.bytes.Add(add)
			return true
		}
	}
}

// release counts one queue fewer holding m, as hold counted it.
func (b *QueueBudget) release(m *Message, size, entry int64) {
	if b == nil {
		return
	}
	if m.queued.Add(-1) == 0 {
		entry += size
	}
	b.bytes.Add(-entry)
}

// Size is what m is counted as, queued or retained: its topic, payload
// and properties bytes.
func (m *Message) Size() int {
	n := len(m.Topic) + len(m.Payload)
	if m.Properties != nil {
		n += m.Properties.Size()
	}
	return n
}

// EntryCost is what a queued entry costs besides its message, in bytes,
// as the queue bounds count it: a message shared by a thousand offline
// sessions is held once, but each of them holds an Outbound for it in a
// ring that may have twice the room it uses (~120 bytes), and the store's
// index of a stored session's entries keeps about as much again.
// Counting only the message let 500 offline sessions hold 9 million
// entries of a one-byte message, 1.4 GB, within a 256 MiB bound.
const EntryCost = 160

// cost is what o costs in a queue besides its message: EntryCost and its
// subscription identifiers, one word each (a client with overlapping
// subscriptions can make every entry carry many).
func (o *Outbound) cost() int { return EntryCost + 4*cap(o.SubIDs) }

// Expired reports whether m has passed its expiry time at now.
func (m *Message) Expired(now time.Time) bool {
	return m.Expiry != 0 && now.UnixNano() >= m.Expiry
}

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
	resend   bool     // in the window, to be sent again on this connection (Resume)
	held     bool     // queued until Stable passes its Seq (Target.Hold)
}

// Config bounds a session.
type Config struct {
	// MaxInflight is the outbound window: QoS 1/2 messages sent and not yet
	// fully acknowledged. A 5.0 client's Receive Maximum lowers it.
	MaxInflight int
	// MaxQueued bounds the messages waiting for the window (or for the
	// client to come back).
	MaxQueued int
	// MaxQueuedBytes bounds their Message.Size and the cost of their
	// entries (EntryCost and subscription identifiers), together.
	MaxQueuedBytes int64
	// QueueQoS0 keeps QoS 0 messages for an offline client, as
	// Mosquitto's queue_qos0_messages does.
	QueueQoS0 bool
	// MaxAwaitingRel bounds inbound QoS 2 packet ids awaiting PUBREL.
	MaxAwaitingRel int
}

func (c Config) withDefaults() Config {
	if c.MaxInflight <= 0 {
		c.MaxInflight = DefaultMaxInflight
	}
	if c.MaxInflight > 65535 {
		c.MaxInflight = 65535
	}
	if c.MaxQueued <= 0 {
		c.MaxQueued = DefaultMaxQueued
	}
	if c.MaxQueuedBytes <= 0 {
		c.MaxQueuedBytes = DefaultMaxQueuedBytes
	}
	if c.MaxAwaitingRel <= 0 {
		c.MaxAwaitingRel = DefaultMaxAwaitingRel
	}
	return c
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
// the limits are compact, the queues are allocated on first use and the
// subscriptions are a slice (clients typically hold a handful).
type Session struct {
	ID     string
	lim    *limits
	window int32
	live   int32  // inflight entries not yet acknowledged
	seq    uint64 // the Seq the next entry gets

	q           *queues
	awaitingRel map[uint16]struct{}
	subs        []Subscription
	// subIndex finds a filter's place in subs once there are more than
	// subIndexMin: a client with thousands of subscriptions must not make
	// each SUBSCRIBE scan them all.
	subIndex map[string]int
	subBytes int64 // SubscriptionCost of subs, together
	expireAt int64 // unix nanos the session expires at while offline; 0: online, or never
}

// subIndexMin is the count of subscriptions past which they are indexed;
// below it a scan is cheaper than a map, and costs an idle client nothing.
const subIndexMin = 8

// limits is Config with defaults applied, in the width the session needs.
//
// Sessions made from one Config share it: a session holds a pointer, not
// a copy, since the broker keeps one session per client, idle or not.
type limits struct {
	maxInflight, maxQueued, maxAwaitingRel int32
	queueQoS0                              bool
	maxQueuedBytes                         int64
	// inflight counts the entries in the windows of every session sharing
	// these limits, for the broker's gauge: kept here because every change
	// of a window reaches it, with the session's lock held. On a cache
	// line of its own, since every delivery reads the limits above.
	_        [64]byte
	inflight atomic.Int64
	// subBytes counts the SubscriptionCost of every subscription the
	// sessions sharing these limits hold.
	subBytes atomic.Int64
}

// Limits are a Config with its defaults applied, for New. Make them once
// and share them between sessions.
type Limits struct{ l limits }

// Limits applies c's defaults.
func (c Config) Limits() *Limits {
	c = c.withDefaults()
	l := new(Limits)
	l.l.maxInflight = int32(c.MaxInflight)
	l.l.maxQueued = int32(min(c.MaxQueued, 1<<31-1))
	l.l.maxAwaitingRel = int32(min(c.MaxAwaitingRel, 1<<31-1))
	l.l.queueQoS0 = c.QueueQoS0
	l.l.maxQueuedBytes = c.MaxQueuedBytes
	return l
}

// Inflight reports how many QoS 1/2 messages are in the windows of the
// sessions made with l, online or not: sent (or to be sent again) and
// not completely acknowledged.
func (l *Limits) Inflight() int64 { return l.l.inflight.Load() }

// SubscriptionBytes reports the SubscriptionCost of the subscriptions
// the sessions made with l hold, together.
func (l *Limits) SubscriptionBytes() int64 { return l.l.subBytes.Load() }

// SubscriptionCost is what the broker counts a subscription to filter as
// holding, in bytes: the filter, a trie node for each level and a fixed
// part for the entries in the session, its index and the trie's set. It
// overstates what a filter sharing its first levels with others costs,
// and is near what one of unique levels does (heap measured per
// subscription: 14 bytes on 3 levels, 437 where this counts 750; 47 on 8
// unique levels, 1,381 for 1,583; 4,090 on 3, 4,393 for 4,826; 255 on
// 128 unique levels, 19,900 for 20,991).
func SubscriptionCost(filter string) int64 {
	return 256 + int64(len(filter)) + 160*int64(strings.Count(filter, "/")+1)
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

// Subscription is one topic filter a session holds.
type Subscription struct {
	Filter  string
	Options packets.SubOptions
	ID      uint32 // 5.0 subscription identifier; 0 when none
}

// New returns an empty session for client id.
func New(id string, lim *Limits) *Session {
	return &Session{ID: id, lim: &lim.l, window: lim.l.maxInflight}
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
	s.awaitingRel, s.subs, s.subIndex = nil, nil, nil
}

// enter puts o, whose packet id is free, into the window. Its DUP flag
// stays: an entry read back from the store may have been sent before.
func (s *Session) enter(o Outbound) Outbound {
	o.PacketID = PacketIDOf(o.Seq)
	o.Released = false
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

// Restore puts back an entry the broker read from its store, called in
// Seq order before the session's client connects: a QoS 2 message past
// PUBREC into the window, where Resume has its PUBREL sent again, and
// anything else into the queue, where it keeps its Seq (and so its packet
// id) and its DUP flag. The session's limits are not applied: what was
// kept is given back, though the limits may have been lowered since. b
// is the budget Deliver is given, which counts what is queued.
func (s *Session) Restore(o Outbound, b *QueueBudget) {
	s.seq = max(s.seq, o.Seq+1)
	o.held = false
	if o.Released {
		o.PacketID = PacketIDOf(o.Seq)
		s.queues().inflight.push(o)
		s.live++
		s.lim.inflight.Add(1)
		return
	}
	o.PacketID, o.resend = 0, false
	size, cost := o.Msg.Size(), o.cost()
	if b != nil {
		held := int64(cost)
		if o.Msg.queued.Add(1) == 1 {
			held += int64(size)
		}
		b.bytes.Add(held)
	}
	s.queues().pending.push(o)
	s.q.pendingBytes += size + cost
}

// Resume prepares the window for a new connection: every entry is to be
// sent again, PUBLISH with DUP set and released ones as PUBREL, in send
// order [MQTT-4.6.0-1]. Next hands them out before any queued message, as
// the connection has room, so that a large window is not written into
// one outbox at once.
func (s *Session) Resume() {
	if s.q == nil {
		return
	}
	s.q.resends = 0
	s.q.resendAt, s.q.resendEpoch = s.q.inflight.popped, s.q.inflight.compactions
	s.q.inflight.each(func(e *Outbound) {
		if !e.Released {
			e.Dup = true
		}
		e.resend = true
		s.q.resends++
	})
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

// ReceiveQoS2 records an inbound QoS 2 packet id. isNew is false for an id
// already awaiting PUBREL: the message must not be routed again.
func (s *Session) ReceiveQoS2(id uint16) (isNew bool, err error) {
	if _, dup := s.awaitingRel[id]; dup {
		return false, nil
	}
	if len(s.awaitingRel) >= int(s.lim.maxAwaitingRel) {
		return false, ErrAwaitingRelFull
	}
	if s.awaitingRel == nil {
		s.awaitingRel = make(map[uint16]struct{})
	}
	s.awaitingRel[id] = struct{}{}
	return true, nil
}

// Pubrel releases an inbound QoS 2 packet id; it reports whether the id
// was awaiting release.
func (s *Session) Pubrel(id uint16) bool {
	if _, ok := s.awaitingRel[id]; !ok {
		return false
	}
	delete(s.awaitingRel, id)
	return true
}

// AwaitingRel reports how many inbound QoS 2 ids wait for PUBREL.
func (s *Session) AwaitingRel() int { return len(s.awaitingRel) }

// Subscribe records a subscription; it reports whether the filter was
// already held (the new options replace the old).
func (s *Session) Subscribe(sub Subscription) (existed bool) {
	if i := s.findSub(sub.Filter); i >= 0 {
		s.subs[i] = sub
		return true
	}
	cost := SubscriptionCost(sub.Filter)
	s.subBytes += cost
	s.lim.subBytes.Add(cost)
	s.subs = append(s.subs, sub)
	if s.subIndex != nil {
		s.subIndex[sub.Filter] = len(s.subs) - 1
	} else if len(s.subs) > subIndexMin {
		s.subIndex = make(map[string]int, len(s.subs))
		for i, sub := range s.subs {
			s.subIndex[sub.Filter] = i
		}
	}
	return false
}

// Unsubscribe drops a subscription; it reports whether it existed.
func (s *Session) Unsubscribe(filter string) bool {
	i := s.findSub(filter)
	if i < 0 {
		return false
	}
	cost := SubscriptionCost(filter)
	s.subBytes -= cost
	s.lim.subBytes.Add(-cost)
	last := len(s.subs) - 1
	s.subs[i] = s.subs[last]
	s.subs[last] = Subscription{}
	s.subs = s.subs[:last]
	if s.subIndex != nil {
		delete(s.subIndex, filter)
		if i < last {
			s.subIndex[s.subs[i].Filter] = i
		}
	}
	return true
}

// findSub returns the place of filter in subs, or -1.
func (s *Session) findSub(filter string) int {
	if s.subIndex != nil {
		if i, ok := s.subIndex[filter]; ok {
			return i
		}
		return -1
	}
	for i := range s.subs {
		if s.subs[i].Filter == filter {
			return i
		}
	}
	return -1
}

// Subscribed reports whether the session holds filter.
func (s *Session) Subscribed(filter string) bool { return s.findSub(filter) >= 0 }

// SubscriptionCount reports how many subscriptions the session holds.
func (s *Session) SubscriptionCount() int { return len(s.subs) }

// SubscriptionBytes reports the SubscriptionCost of the subscriptions the
// session holds, together.
func (s *Session) SubscriptionBytes() int64 { return s.subBytes }

// Subscriptions calls fn for every subscription held.
func (s *Session) Subscriptions(fn func(Subscription)) {
	for _, sub := range s.subs {
		fn(sub)
	}
}

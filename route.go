package mqttd

import (
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"mqttd/auth"
	"mqttd/packets"
	"mqttd/persistence"
	"mqttd/session"
	"mqttd/topictrie"
)

// subOpts is what the trie keeps per subscription.
type subOpts struct {
	qos            byte
	noLocal        bool
	retainAsPub    bool
	retainHandling byte
	id             uint32
}

// options are the subscription options the trie's entry stands for, as
// the store keeps them.
func (o subOpts) options() packets.SubOptions {
	return packets.SubOptions{QoS: o.qos, NoLocal: o.noLocal, RetainAsPublished: o.retainAsPub, RetainHandling: o.retainHandling}
}

// subOptsOf is the trie's entry for a stored subscription.
func subOptsOf(sub persistence.Subscription) subOpts {
	o := sub.Options
	return subOpts{qos: min(o.QoS, maxQoS), noLocal: o.NoLocal, retainAsPub: o.RetainAsPublished, retainHandling: o.RetainHandling, id: sub.ID}
}

// router is the scratch one publish needs. It is pooled rather than kept
// per connection, so idle connections do not carry it.
type router struct {
	matches []topictrie.Sub[*client, subOpts]
	// srv, topic and gen say what matches holds, when matched says it may
	// be used again: the subscriptions of topic as srv's trie had them at
	// its Generation gen, none of them shared. Routers are pooled for
	// every Server in the process, and each trie counts its own
	// generations. A publisher sends its topic again and again, and the
	// trie's match (its read lock, its walk) showed in qos1's profile.
	srv     *Server
	topic   []byte
	gen     uint64
	matched bool
	alt     [1]topictrie.Sub[*client, subOpts] // another share group member
	enc     encoded
	now     time.Time // read once per message, and only when needed
	// msg is the message routed when nothing need keep it past its
	// routing (publishTransient): it costs an allocation only when
	// something keeps it (encoded.kept).
	msg session.Message
}

// clock returns the time the message is being routed at. Reading the
// clock for every message showed in fan-in's profile, and QoS 0
// deliveries to online clients never need it.
func (r *router) clock() time.Time {
	if r.now.IsZero() {
		r.now = time.Now()
	}
	return r.now
}

var routerPool = sync.Pool{New: func() any { return new(router) }}

// publish routes m to every matching subscription and updates the
// retained store, and reports how many clients it was delivered to (or
// dropped for), for the 5.0 "no matching subscribers" code. It runs on the
// publisher's goroutine; matches are collected under the trie's read
// lock, which is released before any session lock is taken. owner is the
// connection whose reader publishes m, which acknowledges it once what it
// changed is stored; nil for the broker's own messages.
func (s *Server) publish(m *session.Message, owner *conn) (clients int) {
	s.stats.messagesReceived.Add(1)
	if m.Retain {
		s.storeRetained(m, owner)
	}
	return s.route(m, owner)
}

// publishTransient publishes a QoS 0 message that is not retained and
// carries no properties, as publish does, without building it on the
// heap: most such messages are only encoded into outboxes. topic and
// payload need only stay unchanged until it returns (they may be in the
// read buffer): whatever keeps the message keeps a copy (encoded.kept).
func (s *Server) publishTransient(topic string, payload []byte, origin string, owner *conn) (clients int) {
	s.stats.messagesReceived.Add(1)
	r := routerPool.Get().(*router)
	m := &r.msg
	m.Topic, m.Payload, m.Origin = topic, payload, origin
	clients = s.routeWith(r, m, owner)
	m.Topic, m.Payload, m.Origin = "", nil, ""
	routerPool.Put(r)
	return clients
}

// route is publish without counting m as received or retaining it: the
// broker's $SYS values (sys.go) are neither.
func (s *Server) route(m *session.Message, owner *conn) (clients int) {
	r := routerPool.Get().(*router)
	clients = s.routeWith(r, m, owner)
	routerPool.Put(r)
	return clients
}

// routeWith routes m with r's scratch; m is borrowed when it is r.msg.
func (s *Server) routeWith(r *router, m *session.Message, owner *conn) (clients int) {
	s.matchInto(r, m.Topic)
	r.enc.reset(m, owner)
	r.enc.borrowed = m == &r.msg
	r.now = time.Time{}
	topictrie.ForEachDelivery(r.matches, func(run []topictrie.Sub[*client, subOpts]) {
		if s.deliverRun(r, m, run) {
			clients++
		}
	})
	if !r.matched {
		clear(r.matches) // drop references to clients that may leave
	}
	clear(r.alt[:])
	r.enc.reset(nil, nil)
	return clients
}

// matchInto leaves in r.matches the subscriptions topic matches: those
// of the last topic matched with r when it is the same, on s, and s's
// trie has not changed since, else the trie's. A result with a shared
// subscription is not kept, nor one for a topic longer than maxKeptTopic.
// What a kept result holds (clients, s) stays reachable from r until a
// match that cannot use it, or until the pool drops r.
func (s *Server) matchInto(r *router, topic string) {
	gen := s.subs.Generation() // before the match: a change after it is seen next time
	if r.matched && r.srv == s && r.gen == gen && string(r.topic) == topic {
		return
	}
	if r.matched {
		clear(r.matches) // kept since the last match, which may return fewer
	}
	r.matches = s.subs.Match(topic, r.matches[:0])
	r.matched = len(topic) <= maxKeptTopic && !slices.ContainsFunc(r.matches,
		func(sub topictrie.Sub[*client, subOpts]) bool { return sub.Group != "" })
	r.srv, r.topic, r.gen = nil, r.topic[:0], gen
	if r.matched {
		r.srv, r.topic = s, append(r.topic, topic...)
	}
}

// maxKeptTopic bounds the topic a router keeps its matches for, and so
// the buffer it keeps the topic in.
const maxKeptTopic = 256

// deliverRun delivers one copy to the client of run, every matching
// subscription of that client: at the highest QoS [MQTT-3.3.4-2], with
// every subscription identifier [MQTT-3.3.4-4]. It reports whether any
// subscription was for m (No Local leaves some out).
func (s *Server) deliverRun(r *router, m *session.Message, run []topictrie.Sub[*client, subOpts]) bool {
	if s.readCheck && run[0].Group != "" && !s.readable(run[0].Key, m) {
		// The member picked may not read it: another of the group takes it.
		sub := run[0]
		alt, ok := s.subs.ShareMember(sub.Group, sub.Filter, topictrie.Message{Topic: m.Topic},
			func(k *client) bool { return !s.readable(k, m) })
		if !ok {
			s.stats.readDenied.Add(1)
			return false
		}
		r.alt[0] = alt
		run = r.alt[:]
	}
	target := run[0].Key
	var qos byte
	var retain, matched bool
	var ids []uint32
	for _, sub := range run {
		o := sub.Value
		if o.noLocal && target.id == m.Origin {
			continue // [MQTT-3.8.3-3]
		}
		matched = true
		qos = max(qos, min(o.qos, m.QoS))
		retain = retain || (o.retainAsPub && m.Retain)
		if o.id != 0 {
			ids = append(ids, o.id)
		}
	}
	if matched {
		s.deliver(target, m, qos, retain, ids, &r.enc, r.clock)
	}
	return matched
}

// deliver hands one copy of m to a client: QoS 0 straight to an online
// client's outbox (dropped and counted when it is full); QoS 1/2 through
// the session, which sends it within the window or queues it.
func (s *Server) deliver(cl *client, m *session.Message, qos byte, retain bool, subIDs []uint32, enc *encoded, clock func() time.Time) {
	if cl.handler != nil {
		if !m.Expired(clock()) {
			deliverInline(cl.handler, enc.kept(), retain)
		}
		return
	}
	if s.readCheck && !s.mayRead(cl, m, qos, retain) {
		return
	}
	if qos == 0 && len(subIDs) == 0 && s.deliverQoS0(cl, retain, enc) {
		return
	}
	if full := s.deliverToSession(cl, enc.kept(), qos, retain, subIDs, enc, clock); full != nil {
		full.Msg("message dropped: the session queue is full (limits.max_queued, limits.max_queued_bytes) or all queues are " +
			"(limits.max_queued_bytes_total); logged at most every 10 s, mqttd_messages_dropped_total{reason=queue_full} counts them all")
	}
}

// readable is mayRead without counting a denial: for choosing among the
// members of a share group.
func (s *Server) readable(cl *client, m *session.Message) bool {
	return s.readableAs(cl, m, m.QoS, m.Retain)
}

// mayRead asks the Authorizer whether cl may receive m (auth.Read):
// whatever filter granted the subscription, and whether the message is
// routed now, retained, queued or resent, a topic the client may not read
// is not delivered. A denial is counted.
func (s *Server) mayRead(cl *client, m *session.Message, qos byte, retain bool) bool {
	if s.readableAs(cl, m, qos, retain) {
		return true
	}
	s.stats.readDenied.Add(1)
	return false
}

// readableAs is the Authorizer's answer for cl receiving m at qos and
// retain.
func (s *Server) readableAs(cl *client, m *session.Message, qos byte, retain bool) bool {
	who := cl.who.Load()
	return who == nil || s.authz.Authorize(*who, auth.Request{Action: auth.Read, Topic: m.Topic, QoS: qos, Retain: retain})
}

// deliverToSession is deliver through the session, under the client's lock,
// which it takes. When a queue-full warning is due it returns the event
// to log, for the caller to write once the lock is released.
func (s *Server) deliverToSession(cl *client, m *session.Message, qos byte, retain bool, subIDs []uint32, enc *encoded, clock func() time.Time) (warn *zerolog.Event) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.dropped {
		return nil // its subscriptions are on their way out of the trie
	}
	tc := cl.conn
	online := tc != nil
	canSend := false
	if online && cl.sess.MaySend(qos) { // the outbox's lock only when it matters
		fit, _ := tc.fit()
		canSend = fit >= m.Size()
	}
	var now time.Time // the session reads it only for m's expiry
	if m.Expiry != 0 {
		now = clock()
	}
	o, r := cl.sess.Deliver(session.Outbound{Msg: m, QoS: qos, Retain: retain, SubIDs: subIDs},
		session.Target{Online: online, CanSend: canSend, Budget: &s.queueBudget, Hold: cl.stored}, now)
	if cl.stored && (r == session.Send && o.QoS > 0 || r == session.Queued) {
		if enc.stored == nil {
			enc.stored = s.dur.stored(m)
		}
		var then func()
		if o.QoS == 2 && r == session.Queued {
			then = s.stableThen(cl, o.Seq)
		}
		s.dur.deliveredLocked(cl, o, enc.stored, enc.owner, then)
	}
	switch r {
	case session.Send:
		if !tc.writeOutboundLocked(o) && o.QoS > 0 {
			s.discardLocked(cl, o.PacketID, enc.owner)
		}
	case session.Queued:
		s.accountQueueLocked(cl)
	case session.DropFull:
		s.stats.dropped[dropQueueFull].Add(1)
		if !s.queueWarned.limited() {
			return s.log.Warn().Str("client_id", cl.id).Str("topic", m.Topic).Int("queued", cl.sess.Queued()).
				Int("queued_bytes", cl.sess.QueuedBytes()).Int64("all_queued_bytes", s.queueBudget.Bytes())
		}
	case session.DropQoS0:
		s.stats.dropped[dropOfflineQoS0].Add(1)
	case session.DropExpiry:
		s.stats.dropped[dropExpired].Add(1)
	}
	return nil
}

// maxStall bounds how long a publisher waits for subscribers' outboxes to
// make room for one message before QoS 0 copies are dropped: in total, not
// per subscriber, so a thousand slow subscribers cannot hold a PUBLISH for
// a thousand seconds.
const maxStall = time.Second

// deliverQoS0 appends the shared QoS 0 frame to an online client's
// outbox. It reports false when the session must take the message
// instead: the client is offline, or older messages wait in its queue
// and order must be kept.
//
// When the outbox is full the publisher stalls, with no lock held, until
// the subscriber's writer makes room or the message's maxStall passes, as
// NATS stalls fast producers: a burst then slows the publisher down
// instead of losing messages. A subscriber that made no room in time is
// marked stuck and its copies are dropped (and counted) without stalling
// until its writer makes progress again, so one stuck client cannot hold
// publishers back. Nobody stalls for room that only other connections'
// writes can free: past limits.max_outbox_bytes_total, or under memory
// pressure for a client with a backlog, the copy is dropped at once.
func (s *Server) deliverQoS0(cl *client, retain bool, enc *encoded) bool {
	for {
		cl.mu.Lock()
		tc := cl.conn
		if tc == nil || cl.sess.Queued() > 0 || cl.sess.Resending() {
			cl.mu.Unlock()
			return false
		}
		if tc.usesAliases() {
			// Encoded for this client alone: the shared frame has no alias.
			cl.mu.Unlock()
			return false
		}
		frame := enc.frame(tc.version, retain)
		if tc.maxOut != 0 && tc.tooLarge(len(frame)) {
			cl.mu.Unlock()
			return true // as if sent [MQTT-3.1.2-25]
		}
		if r, drop := s.refuseQoS0(tc, len(frame)); drop {
			cl.mu.Unlock()
			s.stats.dropped[r].Add(1)
			tc.warnEvery(&tc.dropWarned, "QoS 0 deliveries dropped: "+r.String()+
				" (limits.max_outbox_bytes_total, limits.max_memory); mqttd_messages_dropped_total counts them")
			return true
		}
		if tc.enqueue(bounded, func(b []byte) []byte { return append(b, frame...) }) {
			cl.mu.Unlock()
			s.stats.messagesSent.Add(1)
			return true
		}
		room := tc.roomSignal()
		cl.mu.Unlock()
		if enc.stallUntil.IsZero() {
			enc.stallUntil = time.Now().Add(maxStall)
		}
		if room == nil || !waitRoom(room, enc.stallUntil) {
			if room != nil {
				tc.out.markStuck()
			}
			s.stats.dropped[dropOutboxFull].Add(1)
			tc.warnEvery(&tc.dropWarned, "QoS 0 deliveries dropped: outbox full, the client reads too slowly")
			return true
		}
	}
}

// refuseQoS0 says whether a QoS 0 frame of size bytes for tc is dropped
// without waiting, and why: it would take every outbox together past
// their bound and tc's has no room of its own for it, or memory is short
// and tc already has a backlog.
func (s *Server) refuseQoS0(tc *conn, size int) (dropReason, bool) {
	// Atomic loads first, so that the common case takes no second lock
	// of the subscriber's outbox: in fan-in every publisher contends for
	// that one.
	if s.stats.outboxBytes.Load()+int64(size) > s.opts.Limits.MaxOutboxBytesTotal {
		if fit, global := tc.fit(); global && fit < size {
			return dropOutboxTotal, true
		}
	}
	if s.stats.memoryPressure.Load() && tc.out.pending() > 0 {
		return dropMemoryPressure, true
	}
	return 0, false
}

// storeRetained sets or, for an empty payload, clears the retained
// message of a topic [MQTT-3.3.1-5], [MQTT-3.3.1-10]. A message that does
// not fit limits.max_retained or limits.max_retained_bytes is not kept.
// With a store the change is written too, for owner's acknowledgement to
// wait for.
func (s *Server) storeRetained(m *session.Message, owner *conn) {
	if len(m.Payload) == 0 {
		s.deleteRetained(m.Topic, nil, owner)
		return
	}
	if !s.retainRoom(m) {
		s.refuseRetained(m)
		return
	}
	if s.dur != nil {
		s.retainMu.Lock()
		defer s.retainMu.Unlock()
	}
	old, replaced, err := s.retain.Swap(m.Topic, m)
	if err != nil {
		s.log.Warn().Err(err).Str("topic", m.Topic).Msg("retained message not stored")
		return
	}
	if s.dur != nil {
		var ops [2]persistence.Op
		b := persistence.Batch{Ops: ops[:0]}
		pm := s.dur.stored(m)
		b.PutMessage(pm)
		b.PutRetained(m.Topic, pm.ID)
		s.dur.add(&b, owner, true)
	}
	size := int64(m.Size())
	if replaced {
		size -= int64(old.Size())
	} else {
		s.stats.retained.Add(1)
	}
	s.stats.retainedBytes.Add(size)
}

// retainRoom reports whether m fits the retained store, in place of the
// message it would replace. Concurrent publishers may each see room for
// their own message, so the limits can be passed by at most one message
// per publishing connection.
func (s *Server) retainRoom(m *session.Message) bool {
	count, bytes := s.stats.retained.Load(), s.stats.retainedBytes.Load()+int64(m.Size())
	if old, ok := s.retain.Get(m.Topic); ok {
		bytes -= int64(old.Size())
	} else {
		count++
	}
	if s.stats.memoryPressure.Load() && (count > s.stats.retained.Load() || bytes > s.stats.retainedBytes.Load()) {
		return false // nothing that grows the store under memory pressure
	}
	return count <= int64(s.limits().MaxRetained) && bytes <= s.limits().MaxRetainedBytes
}

// refuseRetained counts a retained message the store had no room for.
func (s *Server) refuseRetained(m *session.Message) {
	s.stats.retainedRefused.Add(1)
	if !s.retainWarned.limited() {
		s.log.Warn().Str("topic", m.Topic).Int("size", m.Size()).
			Int("max_retained", s.limits().MaxRetained).Int64("max_retained_bytes", s.limits().MaxRetainedBytes).
			Msg("retained message not kept: the retained store is full (logged at most every 10 s; mqttd_retained_refused_total counts them all)")
	}
}

// deleteRetained clears the retained message of a topic; with stale set,
// only if it is still that message.
func (s *Server) deleteRetained(topic string, stale *session.Message, owner *conn) {
	var match func(*session.Message) bool
	if stale != nil {
		match = func(m *session.Message) bool { return m == stale }
	}
	if s.dur != nil {
		s.retainMu.Lock()
		defer s.retainMu.Unlock()
	}
	if old, ok := s.retain.RemoveIf(topic, match); ok {
		s.stats.retained.Add(-1)
		s.stats.retainedBytes.Add(-int64(old.Size()))
		if s.dur != nil {
			var ops [1]persistence.Op
			b := persistence.Batch{Ops: ops[:0]}
			b.DeleteRetained(topic)
			s.dur.add(&b, owner, true)
		}
	}
}

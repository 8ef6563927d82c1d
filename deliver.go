package mqttd

import (
	"sync"
	"time"

	"github.com/rs/zerolog"

	"mqttd/bridge"
	"mqttd/packets"
	"mqttd/session"
)

// Delivery: one copy of a routed message to one client, QoS 0 straight
// to its outbox, QoS 1/2 through its session; the pump that refills an
// outbox from the session's queue; and the encoding of a session's
// outbound messages into frames.

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
	if qos == 0 && len(subIDs) == 0 && enc.stamp.IsZero() && s.deliverQoS0(cl, retain, enc) {
		return
	}
	if w := s.deliverToSession(cl, enc.kept(), qos, retain, subIDs, enc, clock); w.ev != nil {
		w.ev.Msg(w.msg)
	}
}

// queueFullMsg is the warning of a message dropped for a full queue.
const queueFullMsg = "message dropped: the session queue is full (limits.max_queued, limits.max_queued_bytes; for a bridge's " +
	"session its max_queued_messages, max_queued_bytes and queue_policy) or all queues are (limits.max_queued_bytes_total); " +
	"logged at most every 10 s, mqttd_messages_dropped_total{reason=queue_full} counts them all"

// stampsMsg is the warning of a stamp a session forgot before its time.
const stampsMsg = "a session forgot the stamp of a QoS 2 message from another node before its time (more than max_stamps " +
	"within stamp_ttl): a copy sent again may be delivered twice; logged at most every 10 s, " +
	"mqttd_cluster_qos2_total{event=stamp_evicted} counts them all"

// warning is a log event due, with its message, to be written once the
// lock held while it was found is released.
type warning struct {
	ev  *zerolog.Event
	msg string
}

// deliverToSession is deliver through the session, under the client's lock,
// which it takes. When a warning is due (a queue full, a stamp forgotten)
// it returns it, for the caller to write once the lock is released.
func (s *Server) deliverToSession(cl *client, m *session.Message, qos byte, retain bool, subIDs []uint32, enc *encoded, clock func() time.Time) (w warning) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.dropped {
		return w // its subscriptions are on their way out of the trie
	}
	stamp := session.Stamp(enc.stamp)
	if !stamp.IsZero() && cl.sess.Seen(stamp, enc.stampNow) {
		s.stats.qos2Duplicates.Add(1) // it has the message already
		return w
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
	madeRoom := false
	if r == session.DropFull {
		if b := cl.bridge.Load(); b != nil {
			for r == session.DropFull && b.makeRoom(cl) {
				madeRoom = true
				o, r = cl.sess.Deliver(session.Outbound{Msg: m, QoS: qos, Retain: retain, SubIDs: subIDs},
					session.Target{Online: online, CanSend: canSend, Budget: &s.queueBudget, Hold: cl.stored}, now)
			}
		}
	}
	if !stamp.IsZero() && (r == session.Send || r == session.Queued) && cl.sess.Remember(stamp, enc.stampExpiry, enc.stampNow) {
		s.stats.stampsEvicted.Add(1)
		if !s.stampsWarned.limited() {
			w = warning{s.log.Warn().Str("client_id", cl.id).Int("max_stamps", session.MaxStamps).Dur("stamp_ttl", stampTTL), stampsMsg}
		}
	}
	if cl.stored && (r == session.Send && o.QoS > 0 || r == session.Queued) {
		if enc.stored == nil {
			enc.stored = s.dur.stored(m)
		}
		var then func()
		if o.QoS == 2 && r == session.Queued {
			then = s.stableThen(cl, o.Seq)
		}
		if stamp.IsZero() {
			s.dur.deliveredLocked(s, cl, o, enc.stored, enc.owner, then)
		} else {
			s.dur.stampedLocked(s, cl, o, enc.stored, enc.owner, then, enc.stamp, enc.stampExpiry)
		}
	}
	switch r {
	case session.Send:
		if !tc.writeOutboundLocked(o) && o.QoS > 0 {
			s.dlq.add(letterTooLarge, m, o.QoS, cl.id, int(o.Sends))
			s.discardLocked(cl, o.PacketID, enc.owner)
		}
	case session.Queued:
		s.accountQueueLocked(cl)
		if b := cl.bridge.Load(); b != nil {
			b.queuedLocked(cl)
		}
		if s.cluster != nil && online {
			s.noteQueuedLocked(cl)
		}
	case session.DropFull:
		s.stats.dropped[dropQueueFull].Add(1)
		s.dlq.add(letterQueueFull, m, qos, cl.id, 0)
		if !s.queueWarned.limited() {
			return warning{s.log.Warn().Str("client_id", cl.id).Str("topic", m.Topic).Int("queued", cl.sess.Queued()).
				Int("queued_bytes", cl.sess.QueuedBytes()).Int64("all_queued_bytes", s.queueBudget.Bytes()), queueFullMsg}
		}
	case session.DropQoS0:
		s.stats.dropped[dropOfflineQoS0].Add(1)
	case session.DropExpiry:
		s.stats.dropped[dropExpired].Add(1)
		s.dlq.add(letterExpired, m, qos, cl.id, 0)
	}
	if madeRoom && !s.queueWarned.limited() {
		return warning{s.log.Warn().Str("client_id", cl.id).Str("topic", m.Topic).Str("queue_policy", bridge.DropOldest).
			Int("queued", cl.sess.Queued()).Int("queued_bytes", cl.sess.QueuedBytes()).Int64("all_queued_bytes", s.queueBudget.Bytes()), queueFullMsg}
	}
	return w
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
		if tc.usesAliases() || cl.bridge.Load() != nil {
			// Encoded for this client alone: the shared frame has no
			// alias, nor a bridge's remote topic.
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

// pump moves the window's resends and then queued messages into the
// outbox of the client's current connection while it has room and the
// session's window allows: after a connection takes the session, after a
// write drained an outbox, and after an acknowledgement freed the window.
// The acknowledgement may come late on a connection already taken over;
// the window it freed is then filled on the new one.
func (c *conn) pump() { c.pumpFrom(c, c) }

// pumpIfDue pumps once for the acknowledgements handled since the last
// time, on the reader's goroutine: after each read of the poller's
// reader, and before serve's reader refills its buffer. A window of 100
// acknowledged in one read took the client's lock, the outbox's for its
// room and the pump's set-up a hundred times.
func (c *conn) pumpIfDue() {
	if c.pumpDue {
		c.pumpDue = false
		c.pump()
	}
}

// pumpFrom is pump run by the goroutine that reads from, a connection
// whose own frames wait for its flush; frames for any other connection
// (all of them, with from nil) wake that connection's writer.
//
// owner is the connection whose reader pumps, for the changes to the
// store to be committed at the end of its read; nil commits them at once.
func (c *conn) pumpFrom(from, owner *conn) {
	cl := c.cl
	if cl == nil {
		return
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	target := cl.conn
	if target == nil || (cl.sess.Queued() == 0 && !cl.sess.Resending()) {
		return
	}
	defer c.srv.accountQueueLocked(cl)
	// Read once, and only for a message that can expire: reading the
	// clock per message showed in qos1's profile.
	var now time.Time
	clock := func() time.Time {
		if now.IsZero() {
			now = time.Now()
		}
		return now
	}
	expired := func(o session.Outbound) {
		c.srv.stats.dropped[dropExpired].Add(1)
		c.srv.dlq.add(letterExpired, o.Msg, o.QoS, cl.id, int(o.Sends))
		if cl.stored {
			c.srv.dur.removedLocked(cl, o.Seq, owner)
		}
	}
	runp, used := pumpRuns.Get().(*[]session.Outbound), 0
	defer func() {
		clear((*runp)[:used]) // drop the messages
		pumpRuns.Put(runp)
	}()
	for fit, _ := target.fit(); fit >= 0; {
		// Taken under the client's lock alone, then written under one
		// hold of the outbox's: what the session's side does (expired and
		// discarded entries reach the store) is not done under it.
		run, room, more := (*runp)[:0], fit, true
		for len(run) < cap(run) {
			o, ok := cl.sess.NextFit(clock, &c.srv.queueBudget, room, expired)
			if !ok {
				more = false
				break
			}
			// Rules reloaded since it was queued, or since the client last
			// connected, may deny it now: it is completed unsent.
			if c.srv.readCheck && !o.Released && !c.srv.mayRead(cl, o.Msg, o.QoS, o.Retain) {
				if o.QoS > 0 {
					c.srv.discardLocked(cl, o.PacketID, owner)
				}
				continue
			}
			run = append(run, o)
			room -= outboundBound(&o)
		}
		used = max(used, len(run))
		if len(run) == 0 {
			return
		}
		// Frames for this connection wait for its own flush; another
		// connection's writer is woken.
		var unsent uint64
		unsent, fit = target.writeOutboundRun(run, target != from)
		for i, o := range run {
			if unsent&(1<<i) != 0 && o.QoS > 0 {
				c.srv.dlq.add(letterTooLarge, o.Msg, o.QoS, cl.id, int(o.Sends))
				c.srv.discardLocked(cl, o.PacketID, owner)
			}
		}
		if !more {
			return
		}
	}
}

// pumpRuns holds the slices pumpFrom takes a run of session entries in:
// on the reader's stack, 64 entries would take a TLS or WebSocket
// reader's stack past 4 KiB, which Go keeps while the connection idles.
var pumpRuns = sync.Pool{New: func() any {
	run := make([]session.Outbound, 0, 64)
	return &run
}}

// discardLocked completes an entry that will never be sent (too large for
// the client's Maximum Packet Size). The caller holds cl.mu.
func (s *Server) discardLocked(cl *client, id uint16, owner *conn) {
	if seq, ok := cl.sess.Discard(id); ok && cl.stored {
		s.dur.removedLocked(cl, seq, owner)
	}
}

// appendPublish encodes one delivery of a message as a PUBLISH for
// version v: QoS, retain, DUP and packet id as the delivery has them and,
// for 5.0, the publisher's properties as forwardProperties gives them.
// Every PUBLISH the broker sends is encoded here.
func appendPublish(b []byte, v packets.Version, o session.Outbound) ([]byte, error) {
	return appendPublishAlias(b, v, o, 0, true)
}

// appendPublishAlias is appendPublish with a 5.0 Topic Alias, when alias
// is not 0; without sendTopic the topic is left empty, for the alias to
// stand for it.
func appendPublishAlias(b []byte, v packets.Version, o session.Outbound, alias uint16, sendTopic bool) ([]byte, error) {
	m := o.Msg
	if v != packets.V5 || m.Properties == nil && m.Expiry == 0 && len(o.SubIDs) == 0 && alias == 0 {
		return packets.AppendPublishPlain(b, v, o.Dup, o.QoS, o.Retain, m.Topic, o.PacketID, m.Payload)
	}
	p := packets.Publish{
		Dup:        o.Dup,
		QoS:        o.QoS,
		Retain:     o.Retain,
		Topic:      m.Topic,
		PacketID:   o.PacketID,
		Payload:    m.Payload,
		Properties: forwardProperties(m, o.SubIDs),
	}
	if alias != 0 {
		p.Properties.TopicAlias = alias
		p.Properties.Set(packets.PropTopicAlias)
		if !sendTopic {
			p.Topic = ""
		}
	}
	return p.Append(b, v)
}

// forwardProperties are the 5.0 properties a subscriber receives: the
// publisher's, with the remaining expiry [MQTT-3.3.2-6], no topic alias
// (aliases are per connection) and the matching subscription identifiers.
func forwardProperties(m *session.Message, subIDs []uint32) packets.Properties {
	var p packets.Properties
	if m.Properties != nil {
		p = *m.Properties
	}
	p.Present &^= 1<<packets.PropTopicAlias | 1<<packets.PropSubscriptionID
	p.TopicAlias = 0
	p.SubscriptionIDs = nil
	if at, ok := m.ExpiresAt(); ok {
		left := time.Until(at)
		p.MessageExpiry = uint32(max(left.Round(time.Second)/time.Second, 1))
	}
	if len(subIDs) > 0 {
		p.SubscriptionIDs = subIDs
		p.Set(packets.PropSubscriptionID)
	}
	return p
}

// writeOutboundLocked encodes one session entry (a PUBLISH, or a PUBREL
// for a released QoS 2 message) into the outbox, and a writer is started
// for it. The caller holds the client's lock, so entries reach the wire
// in session order. A PUBLISH larger than the client's Maximum Packet
// Size is not sent and the result is false: the caller completes it in
// the session [MQTT-3.1.2-25].
func (c *conn) writeOutboundLocked(o session.Outbound) (sent bool) {
	sent = true
	queued := c.enqueue(woken, func(b []byte) []byte {
		b, sent = c.appendOutbound(b, o)
		return b
	})
	if queued && sent && !o.Released {
		c.srv.stats.messagesSent.Add(1)
	}
	return sent
}

// writeOutboundRun is writeOutboundLocked for the entries of run, under
// one hold of the outbox's lock (the pump's, which took one per message
// before). Bit i of unsent is set for run[i] not sent; fit is what fit
// returns afterwards, -1 when nothing was added. run has at most 64
// entries.
func (c *conn) writeOutboundRun(run []session.Outbound, wake bool) (unsent uint64, fit int) {
	published := 0
	_, fit = c.enqueueFit(outboundMode(wake), func(b []byte) []byte {
		for i, o := range run {
			var sent bool
			if b, sent = c.appendOutbound(b, o); !sent {
				unsent |= 1 << i
			} else if !o.Released {
				published++
			}
		}
		return b
	}, true)
	// Counted once a run: an atomic addition a message showed in qos1's
	// profile.
	if published > 0 {
		c.srv.stats.messagesSent.Add(uint64(published))
	}
	return unsent, fit
}

// outboundMode is how session entries are enqueued: woken for another
// connection's, deferred (to the reader's flush) for the reader's own.
func outboundMode(wake bool) enqueueMode {
	if wake {
		return woken
	}
	return deferred
}

// appendOutbound encodes one session entry: a PUBREL for a released QoS 2
// message, otherwise a PUBLISH (appendDelivery).
func (c *conn) appendOutbound(b []byte, o session.Outbound) ([]byte, bool) {
	if o.Released {
		b, _ = (&packets.Pubrel{PacketID: o.PacketID}).Append(b, c.version)
		return b, true
	}
	return c.appendDelivery(b, o)
}

// outboundBound is at least the bytes o takes encoded: its Size and what
// a PUBLISH adds to it (fixed header, topic length, packet id, property
// length, topic alias, subscription identifiers).
func outboundBound(o *session.Outbound) int {
	if o.Released {
		return 4
	}
	return o.Msg.Size() + 16 + 5*len(o.SubIDs)
}

// appendDelivery encodes one PUBLISH for this connection, under its
// outbox lock: with the topic alias the connection gives its topic, if
// it takes aliases. A PUBLISH larger than the client's Maximum Packet
// Size is not appended, and the result is false.
func (c *conn) appendDelivery(b []byte, o session.Outbound) ([]byte, bool) {
	var out *outAliases
	if a := c.aliases.Load(); a != nil {
		out = a.out
	}
	var alias uint16
	sendTopic := true
	if out != nil {
		alias, sendTopic = out.assign(o.Msg.Topic)
	}
	start := len(b)
	var err error
	link := c.cl.bridge.Load()
	if link != nil {
		b, err = link.appendPublish(b, c.version, o)
	} else {
		b, err = appendPublishAlias(b, c.version, o, alias, sendTopic)
	}
	if err != nil {
		c.fields(c.srv.log.Error()).Err(err).Msg("cannot encode PUBLISH")
	}
	if c.tooLarge(len(b) - start) {
		if alias != 0 && sendTopic {
			out.forget(alias)
		}
		if link != nil {
			link.stats.dropped[bridgeDropTooLarge].Add(1)
		}
		return b[:start], false
	}
	if link != nil && o.QoS == 0 {
		link.stats.forwardedOut.Add(1)
	}
	return b, true
}

// usesAliases reports whether the broker gives this client topic aliases:
// its deliveries are then encoded for it alone.
func (c *conn) usesAliases() bool {
	a := c.aliases.Load()
	return a != nil && a.out != nil
}

// tooLarge reports whether a packet of size bytes exceeds the client's
// Maximum Packet Size, counting the drop when it does.
func (c *conn) tooLarge(size int) bool {
	if c.maxOut == 0 || int64(size) <= int64(c.maxOut) { // int64: on 32-bit builds int(maxOut) may be negative
		return false
	}
	c.srv.stats.dropped[dropTooLarge].Add(1)
	return true
}

package mqttd

import (
	"sync"
	"time"

	"mqttd/persistence"
	"mqttd/session"
)

// Retained messages: storing and clearing them as they are published
// (bounded by limits.max_retained_bytes), and sending them to new
// subscriptions under a per-client allowance.

// Retained messages sent for new subscriptions are bounded per client over
// time, not only per SUBSCRIBE: a client looping SUBSCRIBE and UNSUBSCRIBE
// "#" against 100,000 retained messages sent 14 KB and was sent 537 MB,
// keeping a core busy. Each client id has an allowance of one session's worth
// (limits.max_inflight + limits.max_queued messages, limits.max_queued_bytes
// bytes: a dashboard subscribing to "#" gets every retained message once),
// which refills in limits.retained_send_refill. Past it the retained
// messages of a subscription are not sent, as when one SUBSCRIBE matches
// more than the session holds.
//
// The allowance is kept by client id, so that a client reconnecting
// under the same id does not start afresh, and only while it is not full:
// a client that subscribed to nothing with retained messages lately costs
// nothing here.

// retainedSends are the allowances in use, by client id.
type retainedSends struct {
	mu      sync.Mutex
	clients map[string]*retainedBucket
	// sweepAt is the count of allowances at which full ones are dropped.
	sweepAt int
}

// retainedBucket is what is left of a client's allowance at a time.
type retainedBucket struct {
	msgs, bytes float64
	at          int64 // unix nanos
}

// minSweep is the least count of allowances kept before full ones are
// looked for.
const minSweep = 64

// retainedAllowance is what the retained messages of one SUBSCRIBE may
// use, and what they used.
type retainedAllowance struct {
	msgs  int
	bytes int64
	// full says the client's allowance was whole: a subscription cut
	// short then matched more than the session holds (limits.max_queued),
	// otherwise the client used its allowance up
	// (limits.retained_send_refill).
	full bool
	// sent and sentBytes are what the SUBSCRIBE was sent.
	sent      int
	sentBytes int64
}

// retainedAllowance returns what the client's retained messages may use
// now.
func (s *Server) retainedAllowance(id string, now time.Time) retainedAllowance {
	burstMsgs, burstBytes := s.retainedBurst()
	a := retainedAllowance{msgs: burstMsgs, bytes: burstBytes, full: true}
	rs := &s.retainedSends
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if b := rs.clients[id]; b != nil {
		b.refill(now.UnixNano(), burstMsgs, burstBytes, s.limits().RetainedSendRefill)
		a.msgs, a.bytes = int(b.msgs), int64(b.bytes)
		a.full = a.msgs >= burstMsgs && a.bytes >= burstBytes
	}
	return a
}

// retainedSent takes what one SUBSCRIBE was sent from the client's
// allowance.
func (s *Server) retainedSent(id string, a *retainedAllowance, now time.Time) {
	if a.sent == 0 {
		return
	}
	burstMsgs, burstBytes := s.retainedBurst()
	rs := &s.retainedSends
	rs.mu.Lock()
	defer rs.mu.Unlock()
	b := rs.clients[id]
	at := now.UnixNano()
	if b == nil {
		if rs.clients == nil {
			rs.clients = make(map[string]*retainedBucket)
		}
		if len(rs.clients) >= rs.sweepAt {
			rs.sweep(at, burstMsgs, burstBytes, s.limits().RetainedSendRefill)
		}
		b = &retainedBucket{msgs: float64(burstMsgs), bytes: float64(burstBytes), at: at}
		rs.clients[id] = b
	} else {
		b.refill(at, burstMsgs, burstBytes, s.limits().RetainedSendRefill)
	}
	// Below zero when the last message sent was larger than what was
	// left: the debt is refilled first.
	b.msgs -= float64(a.sent)
	b.bytes -= float64(a.sentBytes)
}

// retainedBurst is a whole allowance: what a session holds.
func (s *Server) retainedBurst() (msgs int, bytes int64) {
	return s.opts.Limits.MaxInflight + s.opts.Limits.MaxQueued, s.opts.Limits.MaxQueuedBytes
}

// refill adds what the time since b.at gives back, up to a whole
// allowance, which takes refill to come back from nothing.
func (b *retainedBucket) refill(now int64, burstMsgs int, burstBytes int64, refill time.Duration) {
	share := 1.0
	if d := now - b.at; d < int64(refill) {
		share = float64(max(d, 0)) / float64(refill)
	}
	b.msgs = min(b.msgs+share*float64(burstMsgs), float64(burstMsgs))
	b.bytes = min(b.bytes+share*float64(burstBytes), float64(burstBytes))
	b.at = now
}

// sweep drops the allowances that are whole again, and sets when to look
// next: at twice the count left, so that the sweeps cost O(1) per
// allowance added. The caller holds rs.mu.
func (rs *retainedSends) sweep(now int64, burstMsgs int, burstBytes int64, refill time.Duration) {
	for id, b := range rs.clients {
		if now-b.at >= int64(refill) {
			delete(rs.clients, id)
			continue
		}
		b.refill(now, burstMsgs, burstBytes, refill)
		if b.msgs >= float64(burstMsgs) && b.bytes >= float64(burstBytes) {
			delete(rs.clients, id)
		}
	}
	rs.sweepAt = max(2*len(rs.clients), minSweep)
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

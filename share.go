package mqttd

import (
	"strings"
	"time"

	"mqttd/session"
	"mqttd/topictrie"
)

// Shared subscriptions hand work on: the messages a member of a share
// group received through the group and had not acknowledged (or not yet
// been sent) when its connection ended go to another member, so that a
// worker that dies mid-task does not lose the task (§4.8.2 says SHOULD
// once the session ends; the issue asks it at the disconnect, for
// persistent members too).

// handoff is a message taken from a leaving member, with the shared
// subscription it came through.
type handoff struct {
	o session.Outbound
	f topictrie.Filter
}

// takeSharedLocked takes out of cl's session the messages it holds only
// through one of its shared subscriptions, and only when the group has
// another member to take them. The caller holds s.mu and cl.mu; the
// trie's read lock is taken under them, as SUBSCRIBE does.
func (s *Server) takeSharedLocked(cl *client) []handoff {
	if cl.sess.Inflight() == 0 && cl.sess.Queued() == 0 {
		return nil
	}
	var shared []topictrie.Filter
	var plain []string
	cl.sess.Subscriptions(func(sub session.Subscription) {
		if !strings.HasPrefix(sub.Filter, "$share/") {
			plain = append(plain, sub.Filter)
		} else if f, err := s.topics.ParseFilter(sub.Filter); err == nil {
			shared = append(shared, f)
		}
	})
	if len(shared) == 0 {
		return nil
	}
	// Decided once per topic: a queue repeats its topics, this runs under
	// the registry lock, and each ShareMember moves the group's round
	// robin on.
	type decision struct {
		f    topictrie.Filter
		take bool
	}
	decided := make(map[string]decision)
	var filters []topictrie.Filter // in the order TakeIf takes
	taken := cl.sess.TakeIf(func(o *session.Outbound) bool {
		topic := o.Msg.Topic
		v, ok := decided[topic]
		if !ok {
			v.f, v.take = sharedFilterOf(topic, shared, plain)
			if v.take {
				_, v.take = s.subs.ShareMember(v.f.Group, v.f.Topic, topictrie.Message{Topic: topic},
					func(k *client) bool { return k == cl })
			}
			decided[topic] = v
		}
		if v.take {
			filters = append(filters, v.f)
		}
		return v.take
	}, &s.queueBudget)
	s.accountQueueLocked(cl)
	out := make([]handoff, len(taken))
	for i, o := range taken {
		out[i] = handoff{o, filters[i]}
	}
	return out
}

// sharedFilterOf is the shared subscription through which a client with
// these subscriptions received a message on topic: none when a plain
// subscription of its own matches too, since then the client would have
// had it anyway.
func sharedFilterOf(topic string, shared []topictrie.Filter, plain []string) (topictrie.Filter, bool) {
	for _, f := range plain {
		if topictrie.Matches(f, topic) {
			return topictrie.Filter{}, false
		}
	}
	for _, f := range shared {
		if topictrie.Matches(f.Topic, topic) {
			return f, true
		}
	}
	return topictrie.Filter{}, false
}

// handOffShared delivers the messages takeSharedLocked took from cl to
// other members of their groups, with the options of that member's own
// subscription. The caller holds no lock.
func (s *Server) handOffShared(cl *client, handed []handoff) {
	if len(handed) == 0 {
		return
	}
	now := time.Now()
	clock := func() time.Time { return now }
	var enc encoded
	for _, h := range handed {
		m := h.o.Msg
		sub, ok := s.subs.ShareMember(h.f.Group, h.f.Topic, topictrie.Message{Topic: m.Topic},
			func(k *client) bool { return k == cl || s.readCheck && !s.readable(k, m) })
		if !ok {
			s.stats.dropped[dropNoMember].Add(1) // the last other member left meanwhile
			s.forgetHanded(cl, h.o.Seq)
			continue
		}
		opts := sub.Value
		var ids []uint32
		if opts.id != 0 {
			ids = []uint32{opts.id}
		}
		enc.reset(m, nil)
		s.deliver(sub.Key, m, min(opts.qos, m.QoS), opts.retainAsPub && m.Retain, ids, &enc, clock)
		s.forgetHanded(cl, h.o.Seq)
		s.stats.sharedHandedOff.Add(1) // once the store knows too
	}
}

// forgetHanded takes out of the store an entry of cl handed to another
// member: only now, after that member's copy was added, so that a crash
// in between leaves the message in one session or both, never in none.
func (s *Server) forgetHanded(cl *client, seq uint64) {
	cl.mu.Lock()
	if cl.stored {
		s.dur.handedLocked(cl, seq)
	}
	cl.mu.Unlock()
}

package mqttd

import (
	"strings"
	"time"

	"mqttd/auth"
	"mqttd/packets"
	"mqttd/persistence"
	"mqttd/session"
	"mqttd/topictrie"
)

// SUBSCRIBE and UNSUBSCRIBE: each filter checked, authorized and
// bounded (limits.max_subscriptions_per_client, the byte bounds, the
// overlap bound), then the retained messages it matches sent.

// maxQoS is the highest QoS the broker grants.
const maxQoS = 2

// handleSubscribe subscribes each filter on its own and answers with one
// code per filter [MQTT-3.8.4-5]; retained messages follow the SUBACK.
func (c *conn) handleSubscribe(p *packets.Subscribe) error {
	if err := c.checkSharedNoLocal(p); err != nil {
		return err
	}
	s := c.srv
	cl := c.cl
	codes := make([]packets.ReasonCode, len(p.Subscriptions))
	var subID uint32
	if len(p.Properties.SubscriptionIDs) > 0 {
		subID = p.Properties.SubscriptionIDs[0]
	}
	type retainedReq struct {
		filter topictrie.Filter
		opts   subOpts
	}
	var sendRetained []retainedReq
	// A filter listed again in the same SUBSCRIBE replaces the earlier
	// one [MQTT-3.8.4-3]: its retained messages are sent once, not once
	// per listing (500 x "#" against 20,000 retained messages was 10
	// million sends).
	var retainedAt map[string]int
	wakeSys := false
	if len(p.Subscriptions) > 1 {
		retainedAt = make(map[string]int)
	}
	for i, sub := range p.Subscriptions {
		if max := s.limits().MaxFilterLength; len(sub.Filter) > max {
			codes[i] = c.refusal(packets.TopicFilterInvalid)
			s.refuseSubscription(c, "max_filter_length", int64(max))
			continue
		}
		f, err := s.topics.ParseFilter(sub.Filter)
		if err != nil {
			codes[i] = c.refusal(packets.TopicFilterInvalid)
			c.fields(c.srv.log.Debug()).Err(err).Str("filter", sub.Filter).Msg("subscription refused")
			continue
		}
		if !s.authz.Authorize(*c.info, auth.Request{Action: auth.Subscribe,
			Topic: f.Topic, Group: f.Group, QoS: sub.Options.QoS}) {
			codes[i] = c.refusal(packets.NotAuthorized)
			s.stats.subscribeDenied.Add(1)
			continue
		}
		opts := subOpts{
			qos:            min(sub.Options.QoS, maxQoS),
			noLocal:        sub.Options.NoLocal,
			retainAsPub:    sub.Options.RetainAsPublished,
			retainHandling: sub.Options.RetainHandling,
			id:             subID,
		}
		if c.version != packets.V5 {
			opts.noLocal, opts.retainAsPub, opts.retainHandling = c.info.Bridge, c.info.Bridge, 0
		}
		// Under the session lock, so that a takeover dropping this
		// session's subscriptions sees this one or stops it (LOCKING.md).
		cl.mu.Lock()
		if cl.dropped {
			cl.mu.Unlock()
			codes[i] = c.refusal(packets.UnspecifiedError)
			continue
		}
		if limit, value := s.subscriptionRoom(cl, sub.Filter, f.Topic); limit != "" {
			cl.mu.Unlock()
			codes[i] = c.refusal(packets.QuotaExceeded)
			s.refuseSubscription(c, limit, value)
			continue
		}
		// Kept for the session's life: copied, so that it does not pin
		// the SUBSCRIBE frame (a short filter among large properties).
		filter := strings.Clone(sub.Filter)
		isNew, err := s.addSubscription(filter, cl, opts)
		if err == nil {
			cl.sess.Subscribe(session.Subscription{Filter: filter, Options: sub.Options, ID: subID})
			if cl.stored {
				s.dur.oneLocked(persistence.PutSubscription(cl.id,
					persistence.Subscription{Filter: filter, Options: opts.options(), ID: subID}), c)
			}
		}
		cl.mu.Unlock()
		if err != nil {
			codes[i] = c.refusal(packets.TopicFilterInvalid)
			continue
		}
		if isNew {
			s.stats.subscriptions.Add(1)
			wakeSys = wakeSys || wakesSys(f.Topic)
		}
		codes[i] = packets.ReasonCode(opts.qos)
		// Shared subscriptions get no retained messages (§4.8.2); retain
		// handling 1 sends them only for a new subscription, 2 never.
		if f.Group == "" && (opts.retainHandling == 0 || opts.retainHandling == 1 && isNew) {
			if j, again := retainedAt[sub.Filter]; again {
				sendRetained[j] = retainedReq{f, opts}
			} else {
				if retainedAt != nil {
					retainedAt[sub.Filter] = len(sendRetained)
				}
				sendRetained = append(sendRetained, retainedReq{f, opts})
			}
		}
	}
	c.answerSuback(p.PacketID, codes)
	// However many filters it lists, one SUBSCRIBE is sent at most what
	// the session could hold (its window and queue) of retained messages,
	// and a client at most that much per limits.retained_send_refill
	// (retain.go), which bounds the CPU it costs as well.
	if len(sendRetained) > 0 {
		now := time.Now()
		a := s.retainedAllowance(cl.id, now)
		for _, r := range sendRetained {
			c.sendRetained(r.filter.Topic, r.opts, &a, now)
		}
		s.retainedSent(cl.id, &a, now)
	}
	// After the retained messages: fresher values published meanwhile
	// must not be overtaken by the older ones retained.
	if wakeSys {
		s.sys.wakeUp()
	}
	return nil
}

// subscriptionRoom says which limit, if any, refuses cl a new
// subscription to filter, whose part matched against topics is topic,
// and the limit's value: what subscriptions hold is memory (their count
// and cost, per client and together), and a topic matching many of one
// client's subscriptions costs CPU on every message. A filter cl holds
// already is replaced, and refused by none. The caller holds cl.mu.
func (s *Server) subscriptionRoom(cl *client, filter, topic string) (limit string, value int64) {
	if cl.sess.Subscribed(filter) {
		return "", 0
	}
	lim := s.limits()
	cost := session.SubscriptionCost(filter)
	switch {
	case s.stats.memoryPressure.Load():
		return "max_memory", lim.MaxMemory
	case cl.sess.SubscriptionCount() >= lim.MaxSubscriptionsPerClient:
		return "max_subscriptions_per_client", int64(lim.MaxSubscriptionsPerClient)
	case cl.sess.SubscriptionBytes()+cost > lim.MaxSubscriptionBytesPerClient:
		return "max_subscription_bytes_per_client", lim.MaxSubscriptionBytesPerClient
	case s.sessLim.SubscriptionBytes()+cost > lim.MaxSubscriptionBytesTotal &&
		(cl.sess.SubscriptionBytes()+cost > subscriptionFloor ||
			s.sessLim.SubscriptionBytes()+cost > lim.MaxSubscriptionBytesTotal+lim.MaxSubscriptionBytesTotal/8):
		return "max_subscription_bytes_total", lim.MaxSubscriptionBytesTotal
	case overlapping(cl.sess, topic, lim.MaxOverlappingSubscriptions) >= lim.MaxOverlappingSubscriptions:
		return "max_overlapping_subscriptions", int64(lim.MaxOverlappingSubscriptions)
	}
	return "", 0
}

// subscriptionFloor is what a client's subscriptions may cost past
// limits.max_subscription_bytes_total, a few dozen filters, from a
// reserve of an eighth more: clients that filled the total do not keep
// every other client from subscribing, and since subscriptions outlive
// their connections, the reserve bounds what sessions taken one after
// another for their floor can hold.
const subscriptionFloor = 32 << 10

// overlapping counts the wildcard subscriptions of sess, plain or shared,
// that overlap topic, a filter with a wildcard, up to most. Two filters
// without wildcards never overlap, so a client whose new wildcard filter
// overlaps fewer than most of its others can never have a topic match
// more than most of its wildcard filters and one more: the last of them
// subscribed overlapped all the others.
func overlapping(sess *session.Session, topic string, most int) (n int) {
	if !strings.ContainsAny(topic, "+#") {
		return 0
	}
	sess.Subscriptions(func(sub session.Subscription) {
		if n < most {
			other := filterTopic(sub.Filter)
			if strings.ContainsAny(other, "+#") && topictrie.Overlap(topic, other) {
				n++
			}
		}
	})
	return n
}

// filterTopic is the part of a valid filter matched against topics: the
// whole filter, or what follows the share name of a shared one.
func filterTopic(filter string) string {
	if rest, ok := strings.CutPrefix(filter, "$share/"); ok {
		if _, topic, ok := strings.Cut(rest, "/"); ok {
			return topic
		}
	}
	return filter
}

// refuseSubscription counts a subscription a limit refused, and says so
// (at most every 10 s) naming the limit.
func (s *Server) refuseSubscription(c *conn, limit string, value int64) {
	s.stats.subscriptionsRefused.Add(1)
	if !s.subsWarned.limited() {
		c.fields(s.log.Warn()).Int64(limit, value).
			Msg("subscription refused by limits." + limit + " (logged at most every 10 s; mqttd_subscriptions_refused_total counts them all)")
	}
}

// checkSharedNoLocal refuses the whole SUBSCRIBE, before any filter of it
// takes effect, when a shared subscription asks for No Local: that is a
// Protocol Error [MQTT-3.8.3-4], which closes the connection (§4.13.1),
// and 0x82 is not a SUBACK code.
func (c *conn) checkSharedNoLocal(p *packets.Subscribe) error {
	for _, sub := range p.Subscriptions {
		if !sub.Options.NoLocal {
			continue
		}
		if f, err := c.srv.topics.ParseFilter(sub.Filter); err == nil && f.Group != "" {
			return c.protocolError("[MQTT-3.8.3-4]", "No Local on shared subscription "+sub.Filter)
		}
	}
	return nil
}

// refusal is the per-filter failure code: 0x80 before 5.0, the reason in 5.0.
func (c *conn) refusal(code packets.ReasonCode) packets.ReasonCode {
	if c.version == packets.V5 {
		return code
	}
	return packets.SubackFailure
}

// sendRetained delivers the retained messages matching a new subscription,
// with the retain flag set [MQTT-3.3.1-8], as many as a allows, and counts
// them in a; a subscription that matched more is counted.
func (c *conn) sendRetained(filter string, opts subOpts, a *retainedAllowance, now time.Time) {
	s := c.srv
	items := s.retain.MatchN(filter, nil, max(a.msgs, 0)+1)
	var ids []uint32
	if opts.id != 0 {
		ids = []uint32{opts.id}
	}
	var enc encoded
	clock := func() time.Time { return now }
	for _, it := range items {
		if a.msgs <= 0 || a.bytes <= 0 {
			c.retainedCut(filter, a)
			break
		}
		m := it.Value
		if m.Expired(now) {
			s.deleteRetained(it.Topic, m, c) // not a message stored since the match
			continue
		}
		enc.reset(m, c)
		s.deliver(c.cl, m, min(m.QoS, opts.qos), true, ids, &enc, clock)
		a.msgs--
		a.bytes -= int64(m.Size())
		a.sent++
		a.sentBytes += int64(m.Size())
	}
}

// retainedCut counts a subscription whose retained messages were not all
// sent, and says why in the log (rate-limited).
func (c *conn) retainedCut(filter string, a *retainedAllowance) {
	s := c.srv
	if a.full {
		s.stats.retainedTruncated.Add(1)
		if !s.retainSendWarned.limited() {
			c.fields(s.log.Warn()).Str("filter", filter).Int("limit", s.opts.Limits.MaxInflight+s.opts.Limits.MaxQueued).
				Msg("retained messages not all sent: a SUBSCRIBE matched more than the session can hold (limits.max_inflight + " +
					"limits.max_queued messages, limits.max_queued_bytes bytes); logged at most every 10 s, " +
					"mqttd_retained_sends_truncated_total counts them")
		}
		return
	}
	s.stats.retainedLimited.Add(1)
	if !s.retainLimitWarned.limited() {
		c.fields(s.log.Warn()).Str("filter", filter).Dur("retained_send_refill", s.limits().RetainedSendRefill).
			Msg("retained messages not all sent: the client was sent a session's worth (limits.max_inflight + limits.max_queued " +
				"messages, limits.max_queued_bytes bytes) within limits.retained_send_refill; logged at most every 10 s, " +
				"mqttd_retained_sends_limited_total counts them")
	}
}

// handleUnsubscribe removes each filter and answers UNSUBACK; 5.0 gets a
// code per filter.
func (c *conn) handleUnsubscribe(p *packets.Unsubscribe) {
	s := c.srv
	cl := c.cl
	var codes []packets.ReasonCode
	if c.version == packets.V5 {
		codes = make([]packets.ReasonCode, len(p.Filters))
	}
	for i, f := range p.Filters {
		existed := s.removeSubscription(f, cl)
		if existed {
			s.stats.subscriptions.Add(-1)
		}
		cl.mu.Lock()
		if cl.sess.Unsubscribe(f) && cl.stored {
			s.dur.oneLocked(persistence.DeleteSubscription(cl.id, f), c)
		}
		cl.mu.Unlock()
		if codes != nil && !existed {
			codes[i] = packets.NoSubscriptionExisted
		}
	}
	c.answer(&packets.Unsuback{PacketID: p.PacketID, ReasonCodes: codes})
}

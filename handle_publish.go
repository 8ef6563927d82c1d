package mqttd

import (
	"errors"
	"fmt"
	"strings"

	"mqttd/auth"
	"mqttd/packets"
	"mqttd/persistence"
	"mqttd/session"
)

// A PUBLISH from a client: checked, authorized, routed and acknowledged
// (PUBACK, or PUBREC then PUBCOMP for QoS 2) once the routing and, with a
// store, the commit are done (conn_answer.go).

// handlePublish acts on a PUBLISH; borrowed says its topic and payload
// lie in the reader's buffer (inPlace), which the next read reuses.
func (c *conn) handlePublish(p *packets.Publish, borrowed bool) error {
	s := c.srv
	if p.Properties.Has(packets.PropSubscriptionID) {
		return c.protocolError("[MQTT-3.3.4-6]", "PUBLISH from a client carries a subscription identifier")
	}
	if err := c.resolveAlias(p); err != nil {
		return err
	}
	mapped := true
	link := c.cl.bridge.Load()
	if link != nil {
		p.Topic, mapped = link.localTopic(p.Topic)
	}
	if err := s.topics.ValidTopicName(p.Topic); err != nil {
		return c.fail(&packets.Error{Code: packets.TopicNameInvalid, Ref: "[MQTT-4.7.3]", Msg: err.Error()})
	}
	v := verdict{code: packets.Success}
	switch {
	case !mapped:
		// The remote sent what no in rule takes (a subscription of an
		// earlier configuration kept in its session): taken, not routed.
		v = verdict{packets.NoMatchingSubscribers, ""}
	case isBrokerTopic(p.Topic):
		v = verdict{packets.NotAuthorized, "$SYS/ and $DLQ/ topics are the broker's"}
	case link == nil && !s.authz.Authorize(*c.info, auth.Request{Action: auth.Publish, Topic: p.Topic, QoS: p.QoS, Retain: p.Retain}):
		v = verdict{packets.NotAuthorized, "not authorized to publish to this topic"}
	case !c.userPropertiesFit(&p.Properties):
		v = verdict{packets.QuotaExceeded, "more user properties than the broker's limit"}
	case p.QoS > 0 && s.bridgeFull.Load() && s.bridgeBlocks(p.Topic):
		if c.version != packets.V5 {
			// 3.1.1 has no refusal in PUBACK: the publisher is told by
			// losing its connection, and sends the message again later.
			return closing(CloseBridgeFull, errors.New("a bridge's queue is full (queue_policy block_publishers)"))
		}
		v = verdict{packets.QuotaExceeded, "a bridge's queue is full (queue_policy block_publishers)"}
	}
	if v.code == packets.NotAuthorized {
		s.stats.publishDenied.Add(1)
		c.fields(c.srv.log.Debug()).Str("topic", p.Topic).Msg("publish not authorized")
	}
	switch p.QoS {
	case 0:
		switch {
		case v.code != packets.Success:
		case !p.Retain && p.Properties.Present == 0: // publishTransient: borrowed or not, it copies what it keeps
			c.srv.publishTransient(p.Topic, p.Payload, c.info.ClientID, c)
		default:
			c.srv.publish(c.message(p, borrowed), c)
		}
	case 1:
		if v.code == packets.Success {
			v = c.routeAcked(p, borrowed)
		}
		c.answerAck(&packets.Ack{Type: packets.TypePuback, PacketID: p.PacketID, ReasonCode: c.ackCode(v.code), Properties: c.ackProblem(v)})
	case 2:
		return c.publishQoS2(p, v, borrowed)
	}
	return nil
}

// inPlace reports whether the frame in body may be handled where it was
// read, without a copy of its own: nothing decoded from it outlives its
// dispatch but the copies its handler makes. So are an acknowledgement
// without properties and a PUBLISH without (publishInPlace).
func (c *conn) inPlace(fh packets.FixedHeader, body []byte) bool {
	return packets.IsAck(fh.Type) && fh.Remaining <= 4 || c.publishInPlace(fh, body)
}

// publishInPlace reports whether the frame in body is a PUBLISH without
// properties (the property length right after the topic is 0) from a
// connected client. Nothing keeps its bytes past its handling but the
// copies handlePublish makes: a plain QoS 0 message is routed borrowed
// (publishTransient, encoded.kept), any other copied with the message
// that keeps it (conn.message), in one allocation where the copy of the
// frame and the message were two. With properties the frame is copied:
// they alias it, and a kept message keeps them.
func (c *conn) publishInPlace(fh packets.FixedHeader, body []byte) bool {
	if fh.Type != packets.TypePublish || c.cl == nil {
		return false
	}
	if c.version != packets.V5 {
		return true
	}
	if len(body) < 2 {
		return false
	}
	n := 2 + (int(body[0])<<8 | int(body[1]))
	if fh.Flags&0x06 != 0 { // QoS 1 or 2: the packet id follows the topic
		n += 2
	}
	return n < len(body) && body[n] == 0
}

// routeAcked publishes an acknowledged (QoS 1/2) PUBLISH. A 5.0 client can be
// told that its retained message does not fit the retained store: the
// message is then refused with 0x97 and not routed. Otherwise (3.1.1, or
// QoS 0) a retained message that does not fit is routed but not kept. A
// message nobody subscribed to is acknowledged with 0x10 (no matching
// subscribers), which 3.1.1 reads as success.
func (c *conn) routeAcked(p *packets.Publish, borrowed bool) verdict {
	m := c.message(p, borrowed)
	if c.version == packets.V5 && m.Retain && len(m.Payload) > 0 && !c.srv.retainRoom(m) {
		c.srv.refuseRetained(m)
		return verdict{packets.QuotaExceeded, "the retained store is full"}
	}
	if c.srv.publish(m, c) == 0 {
		c.srv.dlq.add(letterNoSubscribers, m, m.QoS, c.info.ClientID, 0)
		return verdict{code: packets.NoMatchingSubscribers}
	}
	return verdict{code: packets.Success}
}

// userPropertiesFit reports whether a message's user properties are within
// limits.max_user_properties, counting and logging a refusal: decoded,
// each costs far more than its bytes on the wire, and a kept message
// (retained, queued) keeps them all.
func (c *conn) userPropertiesFit(p *packets.Properties) bool {
	max := c.srv.opts.Limits.MaxUserProperties
	if len(p.User) <= max {
		return true
	}
	c.srv.stats.userPropsRefused.Add(1)
	if !c.srv.userPropsWarned.limited() {
		c.fields(c.srv.log.Warn()).Int("max_user_properties", max).
			Msg("message refused: too many user properties (logged at most every 10 s; mqttd_user_properties_refused_total counts them all)")
	}
	return false
}

// isBrokerTopic reports a topic under $SYS or $DLQ (dead letters), which
// only the broker publishes to (through the inline API): a client may
// neither publish nor retain there, nor leave a will there.
func isBrokerTopic(topic string) bool {
	return topic == "$SYS" || strings.HasPrefix(topic, "$SYS/") || topic == "$DLQ" || strings.HasPrefix(topic, dlqPrefix)
}

// ackCode is the reason code a PUBACK or PUBREC carries: 3.1.1 has no way
// to say a PUBLISH was refused, so there it is acknowledged and dropped.
func (c *conn) ackCode(code packets.ReasonCode) packets.ReasonCode {
	if c.version != packets.V5 {
		return packets.Success
	}
	return code
}

// publishQoS2 routes a QoS 2 message once: a repeated packet id before
// PUBREL is answered with PUBREC again but not routed (§4.3.3).
//
// A refused message (a PUBREC of 0x80 or above) does not keep its packet
// id: the client's next PUBLISH with it is a new message [MQTT-4.3.3-9].
func (c *conn) publishQoS2(p *packets.Publish, v verdict, borrowed bool) error {
	if v.code != packets.Success {
		c.answerAck(&packets.Ack{Type: packets.TypePubrec, PacketID: p.PacketID, ReasonCode: c.ackCode(v.code), Properties: c.ackProblem(v)})
		return nil
	}
	cl := c.cl
	cl.mu.Lock()
	isNew, err := cl.sess.ReceiveQoS2(p.PacketID)
	group := uint64(0)
	var resend *session.Forward
	if isNew && cl.stored {
		// The packet id and what the message changes in every session it
		// reaches are stored together or not at all: with the id alone, a
		// DUP sent again after a crash would not be routed; without it,
		// it would be routed twice.
		group = c.srv.dur.commit.Begin()
		c.srv.dur.oneLocked(persistence.PutAwaitingRel(cl.id, p.PacketID), c)
		if c.srv.replicated() != nil {
			c.fwd = &qos2Forward{pid: p.PacketID}
		}
	} else if !isNew && err == nil && p.Dup && c.srv.replicated() != nil {
		resend = cl.sess.ForwardOf(p.PacketID) // not yet confirmed by the nodes
	}
	cl.mu.Unlock()
	end := func() {
		if group != 0 {
			c.srv.dur.commit.End(group)
			group = 0
		}
	}
	defer end() // should routing panic: an open group would stop every commit
	if errors.Is(err, session.ErrAwaitingRelFull) {
		return c.fail(&packets.Error{Code: packets.ReceiveMaximumExceeded, Ref: "§3.3.4",
			Msg: fmt.Sprintf("more than %d QoS 2 messages awaiting PUBREL", c.srv.opts.Limits.MaxAwaitingRel)})
	}
	if isNew {
		c.committing = group != 0
		v = c.routeAcked(p, borrowed)
		c.committing = false
		if f := c.fwd; f != nil {
			c.fwd = nil
			if !f.stamp.IsZero() && v.code < 0x80 {
				c.srv.forwardNew(c, cl, f)
			}
		}
		if v.code >= 0x80 {
			cl.mu.Lock()
			c.pubrelLocked(p.PacketID)
			cl.mu.Unlock()
		}
	} else if resend != nil {
		c.srv.resendForward(c, cl, p.PacketID, resend)
	}
	end() // before answer, which may wait for a commit
	c.answerAck(&packets.Ack{Type: packets.TypePubrec, PacketID: p.PacketID, ReasonCode: c.ackCode(v.code), Properties: c.ackProblem(v)})
	return nil
}

// message turns a received PUBLISH into a routed message. It keeps the
// packet's topic and payload, which alias the packet's own frame, or,
// when the frame is borrowed (a PUBLISH without properties left in the
// read buffer), copies them, with the message, into one allocation.
func (c *conn) message(p *packets.Publish, borrowed bool) *session.Message {
	if borrowed {
		return copiedMessage(&session.Message{Topic: p.Topic, Payload: p.Payload, QoS: p.QoS, Retain: p.Retain,
			Origin: c.info.ClientID})
	}
	return newMessage(p.Topic, p.Payload, p.QoS, p.Retain, &p.Properties, c.info.ClientID)
}

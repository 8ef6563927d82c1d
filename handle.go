package mqttd

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"mqttd/auth"
	"mqttd/packets"
	"mqttd/persistence"
	"mqttd/session"
)

// handle acts on one packet from a connected client.
func (c *conn) handle(p packets.Packet) error {
	switch p := p.(type) {
	case *packets.Publish:
		return c.handlePublish(p, false)
	case *packets.Subscribe:
		return c.handleSubscribe(p)
	case *packets.Unsubscribe:
		c.handleUnsubscribe(p)
	case *packets.Pingreq:
		c.send(&packets.Pingresp{})
	case *packets.Disconnect:
		return c.handleDisconnect(p)
	case *packets.Connect:
		return c.protocolError("[MQTT-3.1.0-2]", "second CONNECT on one connection")
	case *packets.Auth:
		return c.reauth(p)
	default:
		return c.protocolError("CVE-2021-28166", fmt.Sprintf("client sent %s, which only a server sends", p.Type()))
	}
	return nil
}

// protocolError ends the connection: 5.0 with DISCONNECT 0x82 first.
func (c *conn) protocolError(ref, msg string) error {
	return c.fail(&packets.Error{Code: packets.ProtocolError, Ref: ref, Msg: msg})
}

// fail tells a 5.0 client the reason code of err and returns err.
func (c *conn) fail(err *packets.Error) error {
	c.sendDisconnectWhy(err.Code, err.Msg)
	return err
}

// verdict is the answer to an acknowledged PUBLISH: its reason code and,
// for a refusal, why, which a 5.0 client is told unless it asked for no
// problem information.
type verdict struct {
	code packets.ReasonCode
	why  string
}

// reasonString is a Reason String property saying why, for a packet of
// size bytes without it: none for 3.1.1, for an empty why, or when the
// string would take the packet past the client's Maximum Packet Size,
// which a Reason String must not [MQTT-3.1.2-25].
func (c *conn) reasonString(why string, size int) packets.Properties {
	var p packets.Properties
	if c.version != packets.V5 || why == "" || (c.maxOut != 0 && int64(size+4+len(why)) > int64(c.maxOut)) {
		return p
	}
	p.ReasonString = why
	p.Set(packets.PropReasonString)
	return p
}

// ackProblem is the Reason String of an acknowledgement refusing
// something, when the client wants problem information.
func (c *conn) ackProblem(v verdict) packets.Properties {
	if c.noProblemInfo || v.code < 0x80 {
		return packets.Properties{}
	}
	return c.reasonString(v.why, 6)
}

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
	if err := s.topics.ValidTopicName(p.Topic); err != nil {
		return c.fail(&packets.Error{Code: packets.TopicNameInvalid, Ref: "[MQTT-4.7.3]", Msg: err.Error()})
	}
	v := verdict{code: packets.Success}
	switch {
	case isSys(p.Topic):
		v = verdict{packets.NotAuthorized, "$SYS/ topics are the broker's"}
	case !s.authz.Authorize(*c.info, auth.Request{Action: auth.Publish, Topic: p.Topic, QoS: p.QoS, Retain: p.Retain}):
		v = verdict{packets.NotAuthorized, "not authorized to publish to this topic"}
	case !c.userPropertiesFit(&p.Properties):
		v = verdict{packets.QuotaExceeded, "more user properties than the broker's limit"}
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

// isSys reports a topic under $SYS, which only the broker publishes to
// (through the inline API): a client may neither publish nor retain
// there, nor leave a will there.
func isSys(topic string) bool {
	return topic == "$SYS" || strings.HasPrefix(topic, "$SYS/")
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
	if isNew && cl.stored {
		// The packet id and what the message changes in every session it
		// reaches are stored together or not at all: with the id alone, a
		// DUP sent again after a crash would not be routed; without it,
		// it would be routed twice.
		group = c.srv.dur.commit.Begin()
		c.srv.dur.oneLocked(persistence.PutAwaitingRel(cl.id, p.PacketID), c)
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
		if v = c.routeAcked(p, borrowed); v.code >= 0x80 {
			cl.mu.Lock()
			c.pubrelLocked(p.PacketID)
			cl.mu.Unlock()
		}
	}
	end() // before answer, which may wait for a commit
	c.answerAck(&packets.Ack{Type: packets.TypePubrec, PacketID: p.PacketID, ReasonCode: c.ackCode(v.code), Properties: c.ackProblem(v)})
	return nil
}

// handleAck acts on a PUBACK, PUBREC, PUBREL or PUBCOMP.
func (c *conn) handleAck(a *packets.Ack) error {
	switch a.Type {
	case packets.TypePubrec:
		return c.handlePubrec(a)
	case packets.TypePubrel:
		c.handlePubrel(a)
		return nil
	}
	return c.ack(a.Type, a.PacketID)
}

func (c *conn) handlePubrec(p *packets.Ack) error {
	cl := c.cl
	cl.mu.Lock()
	o, ok := cl.sess.Pubrec(p.PacketID, p.ReasonCode >= 0x80)
	if ok && cl.stored {
		switch {
		case o.Released && o.Msg != nil:
			// The PUBREL waits for this: sent before it is stored, a crash
			// would have the PUBLISH sent again, a new message to a client
			// that completed the first.
			c.srv.dur.releasedLocked(cl, o, c)
		case !o.Released:
			c.srv.dur.removedLocked(cl, o.Seq, c)
		}
		// Released before (a PUBREC again after a reconnect): stored so.
	}
	cl.mu.Unlock()
	release := ok && o.Released
	if !ok {
		if err := c.wrongAck(p.Type, p.PacketID); err != nil {
			return err
		}
	}
	if release {
		c.answerAck(&packets.Ack{Type: packets.TypePubrel, PacketID: p.PacketID})
	} else if !ok && p.ReasonCode < 0x80 && c.version == packets.V5 {
		c.answerAck(&packets.Ack{Type: packets.TypePubrel, PacketID: p.PacketID, ReasonCode: packets.PacketIDNotFound})
	}
	c.pumpDue = true
	return nil
}

// handlePubrel always answers with PUBCOMP; for an unknown id 5.0 says
// so with 0x92 (§4.3.3).
func (c *conn) handlePubrel(p *packets.Ack) {
	cl := c.cl
	cl.mu.Lock()
	found := c.pubrelLocked(p.PacketID)
	cl.mu.Unlock()
	code := packets.Success
	if !found && c.version == packets.V5 {
		code = packets.PacketIDNotFound
	}
	c.answerAck(&packets.Ack{Type: packets.TypePubcomp, PacketID: p.PacketID, ReasonCode: code})
}

// pubrelLocked releases an inbound QoS 2 packet id, and reports whether
// it was awaiting release. The caller holds the client's lock.
func (c *conn) pubrelLocked(id uint16) bool {
	cl := c.cl
	if !cl.sess.Pubrel(id) {
		return false
	}
	if cl.stored {
		// The PUBCOMP waits for this: sent before it is stored, a crash
		// would keep the id, and the client's next message under it
		// would be taken for this one again and dropped.
		c.srv.dur.oneLocked(persistence.DeleteAwaitingRel(cl.id, id), c)
	}
	return true
}

// ack applies a PUBACK or PUBCOMP to the session and refills the window.
func (c *conn) ack(t packets.Type, id uint16) error {
	c.cl.mu.Lock()
	ok := c.completeLocked(t, id)
	c.cl.mu.Unlock()
	if !ok {
		if err := c.wrongAck(t, id); err != nil {
			return err
		}
		c.fields(c.srv.log.Debug()).Stringer("type", t).Uint16("packet_id", id).Msg("acknowledgement for a packet id not in flight ignored")
		return nil
	}
	c.pumpDue = true
	return nil
}

// completeLocked completes the message in flight a PUBACK (t) or PUBCOMP
// acknowledges, under the client's lock, and has the store forget it; it
// reports false, changing nothing, when id is not such a message.
func (c *conn) completeLocked(t packets.Type, id uint16) bool {
	cl := c.cl
	var seq uint64
	var ok bool
	if t == packets.TypePuback {
		seq, ok = cl.sess.Puback(id)
	} else {
		seq, ok = cl.sess.Pubcomp(id)
	}
	if ok && cl.stored {
		c.srv.dur.removedLocked(cl, seq, c)
	}
	return ok
}

// wrongAck is a protocol error for an acknowledgement of the wrong kind
// for the message in flight under id: PUBACK for QoS 2, PUBREC for QoS 1,
// PUBCOMP for QoS 1 or before PUBREC (§4.3). One for an id not in flight
// is no error: it may be late, from before a reconnect. Asked only of an
// acknowledgement that completed nothing, so the common path takes the
// session lock once.
func (c *conn) wrongAck(t packets.Type, id uint16) error {
	cl := c.cl
	cl.mu.Lock()
	qos, released, ok := cl.sess.InFlight(id)
	cl.mu.Unlock()
	if !ok {
		return nil
	}
	switch {
	case t == packets.TypePuback && qos == 2, t == packets.TypePubrec && qos == 1,
		t == packets.TypePubcomp && (qos == 1 || !released):
		return c.protocolError("§4.3", fmt.Sprintf("%s for packet id %d, a QoS %d message in flight (released %v)", t, id, qos, released))
	}
	return nil
}

// handleDisconnect ends the connection normally: the will is discarded
// [MQTT-3.1.2-10], except for 5.0 reason 0x04 [MQTT-3.14.4-3].
func (c *conn) handleDisconnect(p *packets.Disconnect) error {
	if p.Properties.Has(packets.PropSessionExpiry) {
		if c.expiry == 0 && p.Properties.SessionExpiry != 0 {
			// A session that was to end with the connection cannot be kept
			// by DISCONNECT (§3.14.2.2.2); the close is then abnormal.
			return c.protocolError("§3.14.2.2.2", "DISCONNECT sets a Session Expiry Interval after CONNECT had none")
		}
		c.expiry = min(p.Properties.SessionExpiry, uint32(c.srv.limits().MaxSessionExpiry/time.Second))
		if c.expiry == 0 {
			c.cl.mu.Lock()
			if c.cl.conn == c { // not if a newer connection took the session over
				c.cl.clean = true // the session ends with this connection
			}
			c.cl.mu.Unlock()
		}
	}
	c.graceful = p.ReasonCode != packets.DisconnectWithWill
	return errDisconnect
}

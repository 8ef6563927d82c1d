package mqttd

import (
	"bytes"
	"strings"
	"time"
	"unsafe"

	"mqttd/packets"
	"mqttd/persistence"
	"mqttd/session"
)

// Messages are built here, from a PUBLISH or a will, and encoded here for
// each subscriber.

// willMessage is the will of a CONNECT, published as client id. It is
// kept for the connection's life, so it is copied out of the frame.
func willMessage(cp *packets.Connect, id string) *session.Message {
	if !cp.WillFlag {
		return nil
	}
	props := cp.WillProperties.Clone()
	// Not a PUBLISH property: a subscriber's client library would drop the
	// connection over it.
	props.Present &^= 1 << packets.PropWillDelay
	props.WillDelay = 0
	return newMessage(strings.Clone(cp.WillTopic), bytes.Clone(cp.WillPayload), cp.WillQoS, cp.WillRetain, &props, id)
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

// withBytes is a message allocated together with the bytes of its topic
// and payload, B an array of one of the sizes newWithBytes picks.
type withBytes[B any] struct {
	m session.Message
	b B
}

// newWithBytes allocates a message and n bytes for its topic and payload
// as one object, in the smallest of the sizes below that holds them: each
// puts the object (88 bytes of message) at the top of one of Go's size
// classes, so that none of it is rounding. A QoS 1 message cost the copy
// of its frame and the message, two allocations and the collector's work
// for each; past 424 bytes the copy is what costs, and the bytes are
// allocated apart.
func newWithBytes(n int) (*session.Message, []byte) {
	switch {
	case n <= 24:
		return withRoom[[24]byte](n)
	case n <= 40:
		return withRoom[[40]byte](n)
	case n <= 56:
		return withRoom[[56]byte](n)
	case n <= 72:
		return withRoom[[72]byte](n)
	case n <= 88:
		return withRoom[[88]byte](n)
	case n <= 104:
		return withRoom[[104]byte](n)
	case n <= 120:
		return withRoom[[120]byte](n)
	case n <= 136:
		return withRoom[[136]byte](n)
	case n <= 168:
		return withRoom[[168]byte](n)
	case n <= 200:
		return withRoom[[200]byte](n)
	case n <= 232:
		return withRoom[[232]byte](n)
	case n <= 296:
		return withRoom[[296]byte](n)
	case n <= 360:
		return withRoom[[360]byte](n)
	case n <= 424:
		return withRoom[[424]byte](n)
	}
	return &session.Message{}, make([]byte, n)
}

// withRoom allocates a withBytes with an array B of at least n bytes, and
// returns its message and its first n bytes.
func withRoom[B any](n int) (*session.Message, []byte) {
	w := new(withBytes[B])
	return &w.m, unsafe.Slice((*byte)(unsafe.Pointer(&w.b)), n)
}

// copiedMessage returns a copy of m with topic and payload of its own,
// allocated with it (newWithBytes). The payload's capacity ends with it,
// so nothing appended to one message's payload can reach another's bytes.
func copiedMessage(m *session.Message) *session.Message {
	c, b := newWithBytes(len(m.Topic) + len(m.Payload))
	n := copy(b, m.Topic)
	copy(b[n:], m.Payload)
	c.Topic, c.Payload = unsafe.String(unsafe.SliceData(b), n), b[n:len(b):len(b)]
	c.QoS, c.Retain, c.Properties, c.Expiry, c.Origin = m.QoS, m.Retain, m.Properties, m.Expiry, m.Origin
	return c
}

// messageWithProperties allocates a message and its properties together.
type messageWithProperties struct {
	m session.Message
	p packets.Properties
}

// newMessage builds a routed message; props are copied only when any is
// present, in the same allocation.
func newMessage(topic string, payload []byte, qos byte, retain bool, props *packets.Properties, origin string) *session.Message {
	var m *session.Message
	if props.Present == 0 {
		m = &session.Message{}
	} else {
		mp := &messageWithProperties{p: *props}
		m = &mp.m
		m.Properties = &mp.p
		if props.Has(packets.PropMessageExpiry) {
			m.SetExpiresAt(time.Now().Add(time.Duration(props.MessageExpiry) * time.Second))
		}
	}
	m.Topic, m.Payload, m.QoS, m.Retain, m.Origin = topic, payload, qos, retain, origin
	return m
}

// encoded caches the QoS 0 wire forms of the message being routed, so a
// fan-out encodes each form once and copies bytes to every subscriber.
// 3.1 and 3.1.1 share a form; 5.0 carries properties. It also holds the
// message's stored form, made for the first persistent session that takes
// it, and the connection whose reader routes it (owner; nil for the
// broker's own messages), whose acknowledgement waits for the store.
type encoded struct {
	msg *session.Message
	// borrowed says msg is the router's scratch, whose topic and payload
	// may point into the publisher's read buffer: both are valid only
	// while it is routed, and whatever keeps the message takes kept().
	borrowed bool
	forms    [2][2][]byte // [v5][retain]
	valid    [2][2]bool
	// stallUntil is when publishing the message stops waiting for slow
	// subscribers (deliverQoS0); zero until one is waited for.
	stallUntil time.Time
	stored     *persistence.Message
	owner      *conn
}

func (e *encoded) reset(m *session.Message, owner *conn) {
	e.msg, e.borrowed = m, false
	e.valid = [2][2]bool{}
	e.stallUntil = time.Time{}
	e.stored, e.owner = nil, owner
}

// kept returns the message routed, copied on first use to a heap object
// of its own, with its topic and payload, when it was borrowed: a session
// queue, window or store, or an inline handler, may hold it for as long
// as it likes.
func (e *encoded) kept() *session.Message {
	if e.borrowed {
		e.msg = copiedMessage(e.msg)
		e.borrowed = false
	}
	return e.msg
}

// frame returns the QoS 0 PUBLISH of the message for version v with the
// retain flag as given, encoding it on first use.
func (e *encoded) frame(v packets.Version, retain bool) []byte {
	vi, ri := 0, 0
	if v == packets.V5 {
		vi = 1
	}
	if retain {
		ri = 1
	}
	if !e.valid[vi][ri] {
		e.forms[vi][ri], _ = appendPublish(e.forms[vi][ri][:0], v, session.Outbound{Msg: e.msg, Retain: retain})
		e.valid[vi][ri] = true
	}
	return e.forms[vi][ri]
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
	b, err := appendPublishAlias(b, c.version, o, alias, sendTopic)
	if err != nil {
		c.fields(c.srv.log.Error()).Err(err).Msg("cannot encode PUBLISH")
	}
	if c.tooLarge(len(b) - start) {
		if alias != 0 && sendTopic {
			out.forget(alias)
		}
		return b[:start], false
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

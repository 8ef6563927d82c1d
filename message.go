package mqttd

import (
	"bytes"
	"strings"
	"time"
	"unsafe"

	"mqttd/packets"
	"mqttd/session"
)

// Messages are built here, from a PUBLISH or a will; deliver.go encodes
// them for each subscriber.

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

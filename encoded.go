package mqttd

import (
	"time"

	"mqttd/packets"
	"mqttd/persistence"
	"mqttd/session"
)

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
	// stamp is the message's across a cluster's nodes (cluster_qos2.go),
	// zero for none; stampNow is when it is routed and stampExpiry when
	// the sessions it reaches forget it (unix nanos).
	stamp                 persistence.Stamp
	stampNow, stampExpiry int64
}

func (e *encoded) reset(m *session.Message, owner *conn) {
	e.msg, e.borrowed = m, false
	e.valid = [2][2]bool{}
	e.stallUntil = time.Time{}
	e.stored, e.owner = nil, owner
	e.stamp = persistence.Stamp{}
}

// stamped marks the message routed as stamp's.
func (e *encoded) stamped(stamp persistence.Stamp) {
	e.stamp = stamp
	e.stampNow = time.Now().UnixNano()
	e.stampExpiry = e.stampNow + int64(stampTTL)
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

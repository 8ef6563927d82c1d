package storetest

import (
	"testing"

	"mqttd/packets"
	"mqttd/persistence"
)

func testMessageRoundTrip(t *testing.T, h *harness) {
	rich := richMessage(1)
	empty := &persistence.Message{ID: 2, Topic: "e", Payload: []byte{}}
	nilPayload := &persistence.Message{ID: 3, Topic: "n", QoS: 1, Expiry: 1}
	nilPayload.Properties.Set(packets.PropUserProperty)
	nilPayload.Properties.User = []packets.UserProperty{{Key: "only", Value: "user"}}
	large := &persistence.Message{ID: 4, Topic: "large", QoS: 1, Payload: make([]byte, 100_000)}
	for i := range large.Payload {
		large.Payload[i] = byte(i * 7)
	}
	// Present but zero must stay present: it is sent on.
	zeroes := &persistence.Message{ID: ^uint64(0), Topic: "z", QoS: 2, Payload: []byte{0}}
	zeroes.Properties.Set(packets.PropPayloadFormat)
	zeroes.Properties.Set(packets.PropMessageExpiry)
	zeroes.Properties.Set(packets.PropContentType)
	h.do(func(b *persistence.Batch) {
		b.PutSession(session("a"))
		for i, m := range []*persistence.Message{rich, empty, nilPayload, large, zeroes} {
			b.PutMessage(m)
			b.PutOutbound("a", outbound(uint64(i+1), m.ID))
		}
		b.PutRetained(rich.Topic, rich.ID)
	})
	st := persistence.SessionState{Session: session("a")}
	for i, m := range []*persistence.Message{rich, empty, nilPayload, large, zeroes} {
		st.Outbound = append(st.Outbound, outbound(uint64(i+1), m.ID))
	}
	h.check(snap(map[string]uint64{rich.Topic: rich.ID}, messages(rich, empty, nilPayload, large, zeroes), st))
}

// testMessageShared drops the references to a message one by one: it
// stays until the last one goes.
func testMessageShared(t *testing.T, h *harness) {
	shared, own := message(10, "shared"), message(11, "own")
	h.do(func(b *persistence.Batch) {
		b.PutSession(session("a"))
		b.PutSession(session("b"))
		b.PutMessage(shared)
		b.PutMessage(own)
		b.PutOutbound("a", outbound(1, 10))
		b.PutOutbound("a", outbound(2, 10))
		b.PutOutbound("a", outbound(3, 11))
		b.PutOutbound("b", outbound(1, 10))
		b.PutRetained("shared", 10)
	})
	stA := persistence.SessionState{Session: session("a"),
		Outbound: []persistence.Outbound{outbound(1, 10), outbound(2, 10), outbound(3, 11)}}
	stB := persistence.SessionState{Session: session("b"), Outbound: []persistence.Outbound{outbound(1, 10)}}
	retained := map[string]uint64{"shared": 10}
	h.check(snap(retained, messages(shared, own), stA, stB))

	h.do(func(b *persistence.Batch) { b.DeleteOutbound("a", 1) })
	stA.Outbound = stA.Outbound[1:]
	h.check(snap(retained, messages(shared, own), stA, stB))

	h.do(func(b *persistence.Batch) { b.DeleteOutbound("a", 3) })
	stA.Outbound = stA.Outbound[:1]
	h.check(snap(retained, messages(shared), stA, stB))

	h.do(func(b *persistence.Batch) { b.DeleteSession("a") })
	h.check(snap(retained, messages(shared), stB))

	h.do(func(b *persistence.Batch) { b.DeleteRetained("shared") })
	h.check(snap(nil, messages(shared), stB))

	h.do(func(b *persistence.Batch) { b.DeleteOutbound("b", 1) })
	h.check(snap(nil, nil, bare(session("b"))))
}

func testMessageUnreferenced(t *testing.T, h *harness) {
	h.do(func(b *persistence.Batch) {
		b.PutSession(session("a"))
		b.PutMessage(message(1, "alone"))
	})
	h.check(snap(nil, nil, bare(session("a"))))
	// Not kept means not there for a later batch either.
	h.fail(persistence.ErrNoMessage, func(b *persistence.Batch) { b.PutOutbound("a", outbound(1, 1)) })
	h.fail(persistence.ErrNoMessage, func(b *persistence.Batch) { b.PutRetained("t", 1) })

	// Referred to, then not, within the batch.
	h.do(func(b *persistence.Batch) {
		b.PutMessage(message(2, "brief"))
		b.PutOutbound("a", outbound(1, 2))
		b.PutRetained("brief", 2)
		b.DeleteOutbound("a", 1)
		b.DeleteRetained("brief")
	})
	h.check(snap(nil, nil, bare(session("a"))))
}

func testMessageFirstKept(t *testing.T, h *harness) {
	first := message(5, "first")
	h.do(func(b *persistence.Batch) {
		b.PutSession(session("a"))
		b.PutMessage(first)
		b.PutMessage(message(5, "second"))
		b.PutOutbound("a", outbound(1, 5))
	})
	st := persistence.SessionState{Session: session("a"), Outbound: []persistence.Outbound{outbound(1, 5)}}
	h.check(snap(nil, messages(first), st))

	h.do(func(b *persistence.Batch) {
		b.PutMessage(message(5, "third"))
		b.PutRetained("t", 5)
	})
	h.check(snap(map[string]uint64{"t": 5}, messages(first), st))
}

// testMessageOrder: ops apply in order, so a reference must come after
// the message it refers to.
func testMessageOrder(t *testing.T, h *harness) {
	h.do(func(b *persistence.Batch) { b.PutSession(session("a")) })
	h.fail(persistence.ErrNoMessage, func(b *persistence.Batch) {
		b.PutOutbound("a", outbound(1, 1))
		b.PutMessage(message(1, "late"))
	})
	h.fail(persistence.ErrNoMessage, func(b *persistence.Batch) {
		b.PutRetained("late", 1)
		b.PutMessage(message(1, "late"))
	})
}

// testMessageRetaken: a message is dropped when the batch as a whole
// leaves nothing referring to it, so it may be referred to again after
// its last reference went earlier in the same batch (a message moved from
// one entry to another).
func testMessageRetaken(t *testing.T, h *harness) {
	m1, m2, m3 := message(1, "one"), message(2, "two"), message(3, "three")
	h.do(func(b *persistence.Batch) {
		b.PutSession(session("a"))
		b.PutMessage(m1)
		b.PutMessage(m2)
		b.PutMessage(m3)
		b.PutOutbound("a", outbound(1, 1))
		b.PutRetained("two", 2)
		b.PutOutbound("a", outbound(3, 3))
	})
	h.do(func(b *persistence.Batch) {
		b.DeleteOutbound("a", 1)
		b.PutOutbound("a", outbound(2, 1))
		b.DeleteRetained("two")
		b.PutRetained("two/again", 2)
		b.DeleteSession("a")
		b.PutSession(session("a"))
		b.PutOutbound("a", outbound(5, 3))
		b.PutOutbound("a", outbound(4, 1))
	})
	st := persistence.SessionState{Session: session("a"),
		Outbound: []persistence.Outbound{outbound(4, 1), outbound(5, 3)}}
	h.check(snap(map[string]uint64{"two/again": 2}, messages(m1, m2, m3), st))
}

func testRetained(t *testing.T, h *harness) {
	m1, m2, m3, m4 := message(1, "a"), message(2, "b/c"), message(3, "a"), message(4, "b/c")
	unicode := message(5, "$SYS/ünïcode/😀")
	h.do(func(b *persistence.Batch) {
		b.PutSession(session("s"))
		b.PutMessage(m1)
		b.PutMessage(m2)
		b.PutMessage(unicode)
		b.PutRetained("a", 1)
		b.PutRetained("b/c", 2)
		b.PutRetained(unicode.Topic, 5)
		b.PutOutbound("s", outbound(1, 2))
	})
	st := persistence.SessionState{Session: session("s"), Outbound: []persistence.Outbound{outbound(1, 2)}}
	h.check(snap(map[string]uint64{"a": 1, "b/c": 2, unicode.Topic: 5}, messages(m1, m2, unicode), st))

	// m1 goes with its topic; m2 stays for s.
	h.do(func(b *persistence.Batch) {
		b.PutMessage(m3)
		b.PutMessage(m4)
		b.PutRetained("a", 3)
		b.PutRetained("b/c", 4)
	})
	h.check(snap(map[string]uint64{"a": 3, "b/c": 4, unicode.Topic: 5}, messages(m2, m3, m4, unicode), st))

	// Made retained again with the same message, it is not counted twice.
	h.do(func(b *persistence.Batch) { b.PutRetained("a", 3) })
	h.do(func(b *persistence.Batch) {
		b.DeleteRetained("a")
		b.DeleteRetained("never/retained")
	})
	h.check(snap(map[string]uint64{"b/c": 4, unicode.Topic: 5}, messages(m2, m4, unicode), st))

	// Two topics may share a message.
	h.do(func(b *persistence.Batch) { b.PutRetained("x", 4) })
	h.do(func(b *persistence.Batch) { b.DeleteRetained("b/c") })
	h.check(snap(map[string]uint64{"x": 4, unicode.Topic: 5}, messages(m2, m4, unicode), st))
	h.do(func(b *persistence.Batch) {
		b.DeleteRetained("x")
		b.DeleteRetained(unicode.Topic)
	})
	h.check(snap(nil, messages(m2), st))
}

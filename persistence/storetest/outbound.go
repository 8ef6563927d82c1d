package storetest

import (
	"cmp"
	"slices"
	"testing"

	"mqttd/packets"
	"mqttd/persistence"
)

// seqs straddle byte boundaries, so that keys encoded in anything but a
// big-endian fixed width sort wrong.
var seqs = []uint64{65536, 1, ^uint64(0), 255, 1 << 40, 256, 2}

func testOutboundOrder(t *testing.T, h *harness) {
	m1, m2 := message(1, "one"), message(1<<63, "two")
	entries := make([]persistence.Outbound, len(seqs))
	for i, seq := range seqs {
		entries[i] = persistence.Outbound{
			Seq:       seq,
			MessageID: []uint64{m1.ID, m2.ID}[i%2],
			QoS:       byte(i % 3),
			Retain:    i%2 == 0,
			SubIDs:    [][]uint32{nil, {1}, {3, 1, 268435455}}[i%3],
			PacketID:  []uint16{0, 1, 65535}[i%3],
			Released:  i%3 == 2,
		}
	}
	h.do(func(b *persistence.Batch) {
		b.PutSession(session("a"))
		b.PutMessage(m1)
		b.PutMessage(m2)
		for _, o := range entries[:4] {
			b.PutOutbound("a", o)
		}
	})
	h.do(func(b *persistence.Batch) {
		for _, o := range entries[4:] {
			b.PutOutbound("a", o)
		}
	})
	sorted := slices.SortedFunc(slices.Values(entries), func(a, b persistence.Outbound) int {
		return cmp.Compare(a.Seq, b.Seq)
	})
	h.check(snap(nil, messages(m1, m2), persistence.SessionState{Session: session("a"), Outbound: sorted}))
}

func testOutboundReplace(t *testing.T, h *harness) {
	m1, m2, m3 := message(1, "one"), message(2, "two"), message(3, "three")
	h.do(func(b *persistence.Batch) {
		b.PutSession(session("a"))
		b.PutMessage(m1)
		b.PutMessage(m2)
		b.PutOutbound("a", outbound(1, 1))
		b.PutOutbound("a", outbound(2, 2))
	})
	st := persistence.SessionState{Session: session("a"), Outbound: []persistence.Outbound{outbound(1, 1), outbound(2, 2)}}

	// Sent: a packet id.
	inflight := outbound(1, 1)
	inflight.QoS, inflight.PacketID, inflight.SubIDs = 2, 17, []uint32{5}
	h.do(func(b *persistence.Batch) { b.PutOutbound("a", inflight) })
	st.Outbound[0] = inflight
	h.check(snap(nil, messages(m1, m2), st))

	// PUBREC came.
	inflight.Released = true
	h.do(func(b *persistence.Batch) { b.PutOutbound("a", inflight) })
	st.Outbound[0] = inflight
	h.check(snap(nil, messages(m1, m2), st))

	// Seq 2 now points at m3: m2, which only it referred to, goes.
	h.do(func(b *persistence.Batch) {
		b.PutMessage(m3)
		b.PutOutbound("a", outbound(2, 3))
	})
	st.Outbound[1] = outbound(2, 3)
	h.check(snap(nil, messages(m1, m3), st))

	// Replacing with the same message must not count it twice: once seq 2
	// is deleted nothing holds m3.
	h.do(func(b *persistence.Batch) {
		b.PutOutbound("a", outbound(2, 3))
		b.PutOutbound("a", outbound(2, 3))
	})
	h.do(func(b *persistence.Batch) { b.DeleteOutbound("a", 2) })
	st.Outbound = st.Outbound[:1]
	h.check(snap(nil, messages(m1), st))
}

func testOutboundDelete(t *testing.T, h *harness) {
	m1, m2 := message(1, "one"), message(2, "two")
	h.do(func(b *persistence.Batch) {
		b.PutSession(session("a"))
		b.PutSession(session("b"))
		b.PutMessage(m1)
		b.PutMessage(m2)
		for seq := uint64(1); seq <= 4; seq++ {
			b.PutOutbound("a", outbound(seq, 1+seq%2))
		}
		b.PutOutbound("b", outbound(3, 1))
	})
	h.do(func(b *persistence.Batch) {
		b.DeleteOutbound("a", 3)
		b.DeleteOutbound("a", 1)
		b.DeleteOutbound("a", 99)
	})
	stA := persistence.SessionState{Session: session("a"), Outbound: []persistence.Outbound{outbound(2, 1), outbound(4, 1)}}
	stB := persistence.SessionState{Session: session("b"), Outbound: []persistence.Outbound{outbound(3, 1)}}
	h.check(snap(nil, messages(m1), stA, stB))

	h.do(func(b *persistence.Batch) {
		b.DeleteOutbound("a", 2)
		b.DeleteOutbound("a", 4)
	})
	stA.Outbound = nil
	h.check(snap(nil, messages(m1), stA, stB))
	h.do(func(b *persistence.Batch) { b.DeleteOutbound("b", 3) })
	h.check(snap(nil, nil, bare(session("a")), bare(session("b"))))
}

func testOutboundNoMessage(t *testing.T, h *harness) {
	m1 := message(1, "one")
	h.do(func(b *persistence.Batch) {
		b.PutSession(session("a"))
		b.PutMessage(m1)
		b.PutOutbound("a", outbound(1, 1))
	})
	h.fail(persistence.ErrNoMessage, func(b *persistence.Batch) {
		b.PutSubscription("a", persistence.Subscription{Filter: "x", Options: packets.SubOptions{QoS: 1}})
		b.PutMessage(message(2, "two"))
		b.PutOutbound("a", outbound(2, 2))
		b.DeleteOutbound("a", 1)
		b.PutOutbound("a", outbound(3, 12345))
		b.PutAwaitingRel("a", 1)
	})
	// Replacing an entry with one whose message is missing is refused too.
	h.fail(persistence.ErrNoMessage, func(b *persistence.Batch) {
		b.PutOutbound("a", outbound(1, 12345))
	})
}

// testNoSession tries each session op on a session that is not stored,
// after ops of the same batch that must then not take effect.
func testNoSession(t *testing.T, h *harness) {
	m1 := message(1, "one")
	fill, _ := fullSession("a", m1, 1)
	h.do(fill)
	ops := []struct {
		name string
		op   func(b *persistence.Batch, id string)
	}{
		{"PutSubscription", func(b *persistence.Batch, id string) {
			b.PutSubscription(id, persistence.Subscription{Filter: "x"})
		}},
		{"DeleteSubscription", func(b *persistence.Batch, id string) { b.DeleteSubscription(id, "x") }},
		{"PutOutbound", func(b *persistence.Batch, id string) { b.PutOutbound(id, outbound(5, 1)) }},
		{"DeleteOutbound", func(b *persistence.Batch, id string) { b.DeleteOutbound(id, 1) }},
		{"PutAwaitingRel", func(b *persistence.Batch, id string) { b.PutAwaitingRel(id, 1) }},
		{"DeleteAwaitingRel", func(b *persistence.Batch, id string) { b.DeleteAwaitingRel(id, 7) }},
		{"PutWill", func(b *persistence.Batch, id string) {
			b.PutWill(id, &persistence.Will{Message: *message(9, "w")})
		}},
		{"DeleteWill", func(b *persistence.Batch, id string) { b.DeleteWill(id) }},
	}
	for _, o := range ops {
		h.run(o.name, func() {
			h.fail(persistence.ErrNoSession, func(b *persistence.Batch) {
				b.PutSession(session("b"))
				b.PutAwaitingRel("a", 2)
				b.PutMessage(message(2, "r"))
				b.PutRetained("r", 2)
				o.op(b, "never-stored")
			})
			// Deleted earlier in the same batch.
			h.fail(persistence.ErrNoSession, func(b *persistence.Batch) {
				b.PutAwaitingRel("a", 3)
				b.DeleteSession("a")
				o.op(b, "a")
			})
		})
	}
}

func testBadOp(t *testing.T, h *harness) {
	h.do(func(b *persistence.Batch) { b.PutSession(session("a")) })
	bad := []struct {
		name string
		op   persistence.Op
	}{
		{"Kind0", persistence.Op{SessionID: "a"}},
		{"KindUnknown", persistence.Op{Kind: 200, SessionID: "a"}},
		{"PutMessageNil", persistence.Op{Kind: persistence.OpPutMessage}},
		{"PutWillNil", persistence.Op{Kind: persistence.OpPutWill, SessionID: "a"}},
	}
	for _, c := range bad {
		h.run(c.name, func() {
			h.fail(persistence.ErrBadOp, func(b *persistence.Batch) {
				b.PutSession(session("b"))
				b.PutAwaitingRel("a", 1)
				b.Ops = append(b.Ops, c.op)
			})
		})
	}
}

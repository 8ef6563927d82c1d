package storetest

import (
	"testing"
	"time"

	"mqttd/packets"
	"mqttd/persistence"
)

func testEmpty(t *testing.T, h *harness) {
	s := h.load()
	if len(s.Sessions) != 0 || len(s.Retained) != 0 || len(s.Messages) != 0 {
		t.Fatalf("new store Loads %d sessions, %d retained, %d messages",
			len(s.Sessions), len(s.Retained), len(s.Messages))
	}
	h.do(func(b *persistence.Batch) {}) // the zero Batch is empty and ready to use
	h.check(snap(nil, nil))
}

func testSessions(t *testing.T, h *harness) {
	a := persistence.Session{ID: "a", Username: "alice", Version: 4, Listener: "tcp:127.0.0.1:1883"}
	b := persistence.Session{
		ID: "b", Username: "bob", Version: 5, Expiry: 0xFFFFFFFF,
		ExpireAt: time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC).UnixNano(),
	}
	c := persistence.Session{ID: "clé/ü 😀#+", Version: 3, Expiry: 1}
	h.do(func(bt *persistence.Batch) {
		bt.PutSession(a)
		bt.PutSession(b)
		bt.PutSession(c)
	})
	h.check(snap(nil, nil, bare(a), bare(b), bare(c)))

	a2 := persistence.Session{ID: "a", Username: "alice2", Version: 5, Expiry: 60, ExpireAt: 1}
	h.do(func(bt *persistence.Batch) { bt.PutSession(a2) })
	h.check(snap(nil, nil, bare(a2), bare(b), bare(c)))

	// Twice in one batch: the last one stands.
	b2 := b
	b2.ExpireAt = 0
	h.do(func(bt *persistence.Batch) {
		bt.PutSession(persistence.Session{ID: "b", Username: "intermediate"})
		bt.PutSession(b2)
	})
	h.check(snap(nil, nil, bare(a2), bare(b2), bare(c)))

	h.do(func(bt *persistence.Batch) {
		bt.DeleteSession("a")
		bt.DeleteSession("never-stored")
	})
	h.check(snap(nil, nil, bare(b2), bare(c)))
	h.do(func(bt *persistence.Batch) { bt.DeleteSession("a") })
	h.check(snap(nil, nil, bare(b2), bare(c)))
}

// fullSession fills session id with one of everything a session holds,
// its outbound entry referring to message msg.
func fullSession(id string, msg *persistence.Message, seq uint64) (func(*persistence.Batch), persistence.SessionState) {
	sub := persistence.Subscription{Filter: "f/" + id, Options: packets.SubOptions{QoS: 1}}
	will := &persistence.Will{Message: *message(1000+seq, "will/"+id), At: 42}
	st := persistence.SessionState{
		Session:       session(id),
		Subscriptions: []persistence.Subscription{sub},
		Outbound:      []persistence.Outbound{outbound(seq, msg.ID)},
		AwaitingRel:   []uint16{7},
		Will:          will,
	}
	return func(b *persistence.Batch) {
		b.PutSession(session(id))
		b.PutMessage(msg)
		b.PutSubscription(id, sub)
		b.PutOutbound(id, outbound(seq, msg.ID))
		b.PutAwaitingRel(id, 7)
		b.PutWill(id, will)
	}, st
}

func testSessionReplaceKeeps(t *testing.T, h *harness) {
	m := message(1, "t")
	fill, st := fullSession("a", m, 1)
	h.do(fill)
	h.check(snap(nil, messages(m), st))

	s2 := session("a")
	s2.Username, s2.ExpireAt = "other", 123456789
	h.do(func(b *persistence.Batch) { b.PutSession(s2) })
	st.Session = s2
	h.check(snap(nil, messages(m), st))
}

func testSessionDelete(t *testing.T, h *harness) {
	own, shared := message(1, "own"), message(2, "shared")
	fill, _ := fullSession("a", own, 1)
	fillB, stB := fullSession("b", shared, 1)
	h.do(func(b *persistence.Batch) {
		fill(b)
		b.PutMessage(shared)
		b.PutOutbound("a", outbound(2, shared.ID))
		fillB(b)
	})
	h.do(func(b *persistence.Batch) { b.DeleteSession("a") })
	// own went with a; shared stays for b.
	h.check(snap(nil, messages(shared), stB))

	// Gone, not hidden: a put again holds nothing.
	h.do(func(b *persistence.Batch) { b.PutSession(session("a")) })
	h.check(snap(nil, messages(shared), bare(session("a")), stB))
}

func testSessionDeleteAndPut(t *testing.T, h *harness) {
	m := message(1, "t")
	fill, _ := fullSession("a", m, 1)
	h.do(fill)
	s2 := session("a")
	s2.Version = 4
	h.do(func(b *persistence.Batch) {
		b.DeleteSession("a")
		b.PutSession(s2)
	})
	h.check(snap(nil, nil, bare(s2)))
}

func testSubscriptions(t *testing.T, h *harness) {
	subs := []persistence.Subscription{
		{Filter: "a/b", Options: packets.SubOptions{QoS: 0}},
		{Filter: "a/+", Options: packets.SubOptions{QoS: 1, NoLocal: true}, ID: 1},
		{Filter: "#", Options: packets.SubOptions{QoS: 2, RetainAsPublished: true, RetainHandling: 2}, ID: 268435455},
		{Filter: "$share/group/x/+/ü", Options: packets.SubOptions{QoS: 1, RetainHandling: 1}, ID: 7},
		{Filter: "$SYS/#", Options: packets.SubOptions{QoS: 2, NoLocal: true, RetainAsPublished: true, RetainHandling: 1}},
	}
	other := persistence.Subscription{Filter: "a/b", Options: packets.SubOptions{QoS: 2}, ID: 9}
	h.do(func(b *persistence.Batch) {
		b.PutSession(session("a"))
		b.PutSession(session("b"))
		for _, s := range subs {
			b.PutSubscription("a", s)
		}
		b.PutSubscription("b", other)
	})
	stA := persistence.SessionState{Session: session("a"), Subscriptions: subs}
	stB := persistence.SessionState{Session: session("b"), Subscriptions: []persistence.Subscription{other}}
	h.check(snap(nil, nil, stA, stB))

	// Replaced by filter, options and ID both; the same filter in b stays.
	r1 := persistence.Subscription{Filter: "a/+", Options: packets.SubOptions{QoS: 2, RetainHandling: 1}, ID: 99}
	r2 := persistence.Subscription{Filter: "#", Options: packets.SubOptions{QoS: 0}}
	h.do(func(b *persistence.Batch) {
		b.PutSubscription("a", r1)
		b.PutSubscription("a", r2)
	})
	stA.Subscriptions = []persistence.Subscription{subs[0], r1, r2, subs[3], subs[4]}
	h.check(snap(nil, nil, stA, stB))

	h.do(func(b *persistence.Batch) {
		b.DeleteSubscription("a", "a/b")
		b.DeleteSubscription("a", "not/subscribed")
		b.DeleteSubscription("a", "$share/group/x/+/ü")
	})
	stA.Subscriptions = []persistence.Subscription{r1, r2, subs[4]}
	h.check(snap(nil, nil, stA, stB))
}

func testAwaitingRel(t *testing.T, h *harness) {
	h.do(func(b *persistence.Batch) {
		b.PutSession(session("a"))
		b.PutSession(session("b"))
		b.PutAwaitingRel("a", 1)
		b.PutAwaitingRel("a", 65535)
		b.PutAwaitingRel("a", 256)
		b.PutAwaitingRel("a", 1)
		b.PutAwaitingRel("b", 256)
	})
	h.do(func(b *persistence.Batch) { b.PutAwaitingRel("a", 256) })
	stA := persistence.SessionState{Session: session("a"), AwaitingRel: []uint16{1, 256, 65535}}
	stB := persistence.SessionState{Session: session("b"), AwaitingRel: []uint16{256}}
	h.check(snap(nil, nil, stA, stB))

	h.do(func(b *persistence.Batch) {
		b.DeleteAwaitingRel("a", 256)
		b.DeleteAwaitingRel("a", 999)
		b.DeleteAwaitingRel("a", 1)
		b.DeleteAwaitingRel("a", 1)
	})
	stA.AwaitingRel = []uint16{65535}
	h.check(snap(nil, nil, stA, stB))

	h.do(func(b *persistence.Batch) { b.PutAwaitingRel("a", 1) })
	stA.AwaitingRel = []uint16{1, 65535}
	h.check(snap(nil, nil, stA, stB))
}

// testForwardsAndStamps: a ForwardKeeper gives back each awaiting-rel id's
// Forward (a plain put of the id clears it) and the unexpired stamps, and
// a deleted session takes them with it; another store refuses both.
func testForwardsAndStamps(t *testing.T, h *harness) {
	h.do(func(b *persistence.Batch) { b.PutSession(session("a")) })
	s1, s2 := persistence.Stamp{Node: 7, Seq: 1}, persistence.Stamp{Node: 7, Seq: 2}
	farFuture := time.Now().Add(time.Hour).UnixNano()
	m := richMessage(0)
	if _, ok := h.s.(persistence.ForwardKeeper); !ok {
		h.fail(persistence.ErrBadOp, func(b *persistence.Batch) { b.PutForward("a", 1, s1, m) })
		h.fail(persistence.ErrBadOp, func(b *persistence.Batch) { b.PutStamp("a", s1, farFuture) })
		return
	}
	h.fail(persistence.ErrBadOp, func(b *persistence.Batch) { b.PutStamp("a", persistence.Stamp{}, farFuture) })
	h.fail(persistence.ErrBadOp, func(b *persistence.Batch) {
		b.PutForward("a", 1, persistence.Stamp{}, m)
	})
	h.fail(persistence.ErrNoSession, func(b *persistence.Batch) { b.PutStamp("b", s1, farFuture) })
	past := time.Now().Add(-time.Minute).UnixNano()
	h.do(func(b *persistence.Batch) {
		b.PutForward("a", 1, s1, m)
		b.PutForward("a", 2, s2, m)
		b.PutStamp("a", s1, farFuture)
		b.PutStamp("a", s2, past)
		b.PutAwaitingRel("a", 3)
	})
	st := persistence.SessionState{Session: session("a"), AwaitingRel: []uint16{1, 2, 3},
		Forwards: []persistence.Forward{{PacketID: 1, Stamp: s1, Message: *m}, {PacketID: 2, Stamp: s2, Message: *m}},
		Stamps:   []persistence.SeenStamp{{Stamp: s1, Expiry: farFuture}}}
	h.check(snap(nil, nil, st))

	// Forwarded: the id stays, its message goes.
	h.do(func(b *persistence.Batch) { b.PutAwaitingRel("a", 2) })
	st.Forwards = st.Forwards[:1]
	h.check(snap(nil, nil, st))

	h.do(func(b *persistence.Batch) { b.DeleteAwaitingRel("a", 1) })
	st.AwaitingRel, st.Forwards = []uint16{2, 3}, nil
	h.check(snap(nil, nil, st))

	h.do(func(b *persistence.Batch) { b.DeleteSession("a") })
	h.do(func(b *persistence.Batch) { b.PutSession(session("a")) })
	h.check(snap(nil, nil, bare(session("a"))))
}

func testWills(t *testing.T, h *harness) {
	// The will's message ID is stored nowhere: a will holds its own copy.
	w1 := &persistence.Will{Message: *richMessage(42), At: time.Date(2030, 1, 1, 0, 0, 0, 1, time.UTC).UnixNano()}
	h.do(func(b *persistence.Batch) {
		b.PutSession(session("a"))
		b.PutSession(session("b"))
		b.PutWill("a", w1)
		b.DeleteWill("b")
	})
	stA := persistence.SessionState{Session: session("a"), Will: w1}
	h.check(snap(nil, nil, stA, bare(session("b"))))

	empty := persistence.Will{Message: persistence.Message{Topic: "bye", Payload: []byte{}}, At: 1}
	h.do(func(b *persistence.Batch) { b.PutWill("a", &empty) })
	stA.Will = &empty
	h.check(snap(nil, nil, stA, bare(session("b"))))

	h.do(func(b *persistence.Batch) { b.DeleteWill("a") })
	h.check(snap(nil, nil, bare(session("a")), bare(session("b"))))

	// A will whose message ID is that of a stored message is unaffected by
	// that message going, and does not keep it.
	m := message(7, "queued")
	w2 := &persistence.Will{Message: *message(7, "will/a"), At: 5}
	h.do(func(b *persistence.Batch) {
		b.PutMessage(m)
		b.PutOutbound("a", outbound(1, 7))
		b.PutWill("a", w2)
	})
	stA = persistence.SessionState{Session: session("a"), Outbound: []persistence.Outbound{outbound(1, 7)}, Will: w2}
	h.check(snap(nil, messages(m), stA, bare(session("b"))))
	h.do(func(b *persistence.Batch) { b.DeleteOutbound("a", 1) })
	stA.Outbound = nil
	h.check(snap(nil, nil, stA, bare(session("b"))))

	h.do(func(b *persistence.Batch) {
		b.PutWill("b", w1)
		b.DeleteSession("a")
	})
	h.check(snap(nil, nil, persistence.SessionState{Session: session("b"), Will: w1}))
	h.do(func(b *persistence.Batch) { b.PutSession(session("a")) })
	h.check(snap(nil, nil, bare(session("a")), persistence.SessionState{Session: session("b"), Will: w1}))
}

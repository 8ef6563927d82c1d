package storetest

import (
	"errors"
	"testing"

	"mqttd/packets"
	"mqttd/persistence"
)

// populate puts a bit of everything in the store and returns what Load
// must give back.
func populate(h *harness) *persistence.Snapshot {
	h.t.Helper()
	rich, shared, kept := richMessage(1), message(2, "shared"), message(3, "kept")
	fillA, stA := fullSession("a", rich, 1)
	fillB, stB := fullSession("b", shared, 1)
	subB := persistence.Subscription{Filter: "$share/g/#", Options: packets.SubOptions{QoS: 2, NoLocal: true}, ID: 3}
	inflight := persistence.Outbound{Seq: 2, MessageID: 2, QoS: 2, SubIDs: []uint32{3, 4}, PacketID: 9, Released: true}
	c := persistence.Session{ID: "c", Version: 3}
	h.do(func(b *persistence.Batch) {
		fillA(b)
		fillB(b)
		b.PutSession(c)
		b.PutSubscription("b", subB)
		b.PutOutbound("a", inflight)
		b.PutAwaitingRel("b", 65535)
		b.PutMessage(kept)
		b.PutRetained(rich.Topic, 1)
		b.PutRetained("kept", 3)
	})
	stA.Outbound = append(stA.Outbound, inflight)
	stB.Subscriptions = append(stB.Subscriptions, subB)
	stB.AwaitingRel = append(stB.AwaitingRel, 65535)
	return snap(map[string]uint64{rich.Topic: 1, "kept": 3}, messages(rich, shared, kept), stA, stB, bare(c))
}

// validPrefix touches every kind of op, each valid on populate's state.
func validPrefix(b *persistence.Batch) {
	b.DeleteSession("a")
	b.PutSession(persistence.Session{ID: "b", Username: "changed", Version: 4})
	b.PutMessage(message(100, "new"))
	b.PutOutbound("c", outbound(1, 100))
	b.PutOutbound("b", outbound(1, 100))
	b.DeleteOutbound("b", 2)
	b.DeleteRetained("kept")
	b.PutRetained("new", 100)
	b.PutSubscription("b", persistence.Subscription{Filter: "new/#", ID: 5})
	b.DeleteSubscription("b", "f/b")
	b.DeleteWill("b")
	b.PutWill("c", &persistence.Will{Message: *message(7, "will/c"), At: 1})
	b.PutAwaitingRel("c", 5)
	b.DeleteAwaitingRel("b", 7)
}

func testAtomic(t *testing.T, h *harness) {
	populate(h)
	failing := []struct {
		name string
		err  error
		op   func(b *persistence.Batch)
	}{
		{"NoSession", persistence.ErrNoSession, func(b *persistence.Batch) {
			b.PutSubscription("ghost", persistence.Subscription{Filter: "x"})
		}},
		{"NoMessageOutbound", persistence.ErrNoMessage, func(b *persistence.Batch) { b.PutOutbound("c", outbound(2, 9999)) }},
		{"NoMessageRetained", persistence.ErrNoMessage, func(b *persistence.Batch) { b.PutRetained("x", 9999) }},
		{"BadOp", persistence.ErrBadOp, func(b *persistence.Batch) { b.Ops = append(b.Ops, persistence.Op{}) }},
	}
	for _, f := range failing {
		h.run(f.name, func() {
			h.fail(f.err, func(b *persistence.Batch) {
				validPrefix(b)
				f.op(b)
				b.PutSession(session("d"))
			})
		})
	}
	// Message 100 was put by every failed batch, and kept by none.
	h.fail(persistence.ErrNoMessage, func(b *persistence.Batch) { b.PutOutbound("c", outbound(1, 100)) })

	// The prefix alone applies, and then shows.
	h.do(validPrefix)
	got := h.load()
	if _, ok := got.Retained["kept"]; ok || got.Retained["new"] != 100 || got.Messages[3] != nil {
		t.Errorf("after the valid prefix: retained %v, message 3 kept: %t", got.Retained, got.Messages[3] != nil)
	}
	if len(got.Sessions) != 2 {
		t.Errorf("after the valid prefix: %d sessions, want 2 (b, c)", len(got.Sessions))
	}
}

func testReopen(t *testing.T, h *harness) {
	want := populate(h)
	h.reopen()
	h.reopen()
	h.check(want)

	// Counts survive a reopen: message 2 is held by a and b.
	h.do(func(b *persistence.Batch) { b.DeleteOutbound("a", 2) })
	h.reopen()
	if got := h.load(); got.Messages[2] == nil {
		t.Fatalf("message 2 gone while session b still refers to it")
	}
	h.do(func(b *persistence.Batch) { b.DeleteSession("b") })
	h.reopen()
	if got := h.load(); got.Messages[2] != nil {
		t.Fatalf("message 2 kept after its last reference went")
	}

	// Still usable after reopening.
	h.do(func(b *persistence.Batch) {
		b.PutMessage(message(2, "again"))
		b.PutOutbound("c", outbound(1, 2))
	})
	h.reopen()
	if got := h.load(); !equal(got.Messages[2], message(2, "again")) {
		t.Fatalf("message 2 = %s after reopen", fmtMessage(got.Messages[2]))
	}
}

func testCopiesOnApply(t *testing.T, h *harness) {
	m, will := richMessage(1), &persistence.Will{Message: *richMessage(2), At: 3}
	o := persistence.Outbound{Seq: 1, MessageID: 1, SubIDs: []uint32{1, 2}}
	var b persistence.Batch
	b.PutSession(session("a"))
	b.PutMessage(m)
	b.PutOutbound("a", o)
	b.PutWill("a", will)
	if err := h.s.Apply(&b); err != nil {
		t.Fatalf("Apply: %v", err)
	}

	for _, msg := range []*persistence.Message{m, &will.Message} {
		msg.ID++
		msg.Topic = "mutated"
		msg.Payload[0] ^= 0xff
		msg.Properties.CorrelationData[0] ^= 0xff
		msg.Properties.User[0] = packets.UserProperty{Key: "mutated", Value: "mutated"}
		msg.Properties.ContentType = "mutated"
	}
	will.At = 0
	o.SubIDs[0] = 77
	b.Reset()
	b.DeleteSession("a")

	want := persistence.SessionState{
		Session:  session("a"),
		Outbound: []persistence.Outbound{{Seq: 1, MessageID: 1, SubIDs: []uint32{1, 2}}},
		Will:     &persistence.Will{Message: *richMessage(2), At: 3},
	}
	h.check(snap(nil, messages(richMessage(1)), want))
}

func testCopiesOnLoad(t *testing.T, h *harness) {
	want := populate(h)
	got := h.load()
	for _, m := range got.Messages {
		m.Topic = "mutated"
		if len(m.Payload) > 0 {
			m.Payload[0] ^= 0xff
		}
		if len(m.Properties.User) > 0 {
			m.Properties.User[0].Key = "mutated"
			m.Properties.CorrelationData[0] ^= 0xff
		}
	}
	delete(got.Messages, 2)
	got.Retained["mutated"] = 1
	for i := range got.Sessions {
		st := &got.Sessions[i]
		st.Session.Username = "mutated"
		for j := range st.Subscriptions {
			st.Subscriptions[j].Filter = "mutated"
			st.Subscriptions[j].Options.QoS = 0
		}
		for j := range st.Outbound {
			st.Outbound[j].MessageID = 3
			if len(st.Outbound[j].SubIDs) > 0 {
				st.Outbound[j].SubIDs[0] = 77
			}
		}
		for j := range st.AwaitingRel {
			st.AwaitingRel[j] = 1
		}
		if st.Will != nil {
			st.Will.At = 0
			st.Will.Message.Payload[0] ^= 0xff
		}
	}
	h.check(want)
}

// testInvalidOps checks that every store refuses what Op.Valid refuses,
// applying nothing: an empty session ID or retained topic.
func testInvalidOps(t *testing.T, h *harness) {
	st := h.s
	for name, op := range map[string]func(b *persistence.Batch){
		"empty session id": func(b *persistence.Batch) { b.PutSession(persistence.Session{}) },
		"empty topic":      func(b *persistence.Batch) { b.DeleteRetained("") },
		"empty topic put":  func(b *persistence.Batch) { b.PutRetained("", 1) },
	} {
		before, err := st.Load()
		if err != nil {
			t.Fatal(err)
		}
		var b persistence.Batch
		b.PutSession(persistence.Session{ID: "new"})
		op(&b)
		if err := st.Apply(&b); !errors.Is(err, persistence.ErrBadOp) {
			t.Errorf("%s: %v, want ErrBadOp", name, err)
		}
		after, err := st.Load()
		if err != nil {
			t.Fatal(err)
		}
		if len(after.Sessions) != len(before.Sessions) {
			t.Errorf("%s: a refused batch applied its other operations", name)
		}
	}
}

package session

import (
	"fmt"
	"testing"
	"time"

	"mqttd/packets"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func msg(topic string, qos byte) *Message {
	return &Message{Topic: topic, Payload: []byte(topic), QoS: qos}
}

func deliver(t *testing.T, s *Session, topic string, qos byte, canSend bool, want Result) Outbound {
	t.Helper()
	o, r := s.Deliver(Outbound{Msg: msg(topic, qos), QoS: qos}, Target{Online: true, CanSend: canSend}, t0)
	if r != want {
		t.Fatalf("Deliver(%s, qos %d) = %v, want %v", topic, qos, r, want)
	}
	return o
}

func TestWindowFillsThenQueues(t *testing.T) {
	s := New(Config{MaxInflight: 2, MaxQueued: 2}.Limits())
	a := deliver(t, s, "a", 1, true, Send)
	b := deliver(t, s, "b", 2, true, Send)
	if a.PacketID == 0 || b.PacketID == 0 || a.PacketID == b.PacketID {
		t.Fatalf("packet ids %d, %d: want distinct and non-zero", a.PacketID, b.PacketID)
	}
	deliver(t, s, "c", 1, true, Queued)
	deliver(t, s, "d", 0, true, Queued) // behind c: order is kept
	deliver(t, s, "e", 1, true, DropFull)
	if _, ok, _ := s.Next(t0, nil); ok {
		t.Fatal("Next with a full window returned a message")
	}
	if !done(s.Puback(a.PacketID)) {
		t.Fatal("Puback of an in-flight QoS 1 id failed")
	}
	c, ok, _ := s.Next(t0, nil)
	if !ok || c.Msg.Topic != "c" || c.PacketID == 0 {
		t.Fatalf("Next = %+v, %v; want c with a packet id", c, ok)
	}
	d, ok, _ := s.Next(t0, nil)
	if !ok || d.Msg.Topic != "d" || d.PacketID != 0 {
		t.Fatalf("Next = %+v, %v; want QoS 0 d without a packet id", d, ok)
	}
	if s.Inflight() != 2 || s.Queued() != 0 {
		t.Fatalf("inflight %d queued %d, want 2 and 0", s.Inflight(), s.Queued())
	}
}

func TestAckRules(t *testing.T) {
	s := New(Config{}.Limits())
	q1 := deliver(t, s, "q1", 1, true, Send)
	q2 := deliver(t, s, "q2", 2, true, Send)
	if done(s.Puback(q2.PacketID)) {
		t.Error("PUBACK accepted for a QoS 2 message")
	}
	if done(s.Pubcomp(q2.PacketID)) {
		t.Error("PUBCOMP accepted before PUBREC")
	}
	if released(s.Pubrec(q1.PacketID, false)) {
		t.Error("PUBREC accepted for a QoS 1 message")
	}
	for i := 0; i < 2; i++ {
		if !released(s.Pubrec(q2.PacketID, false)) {
			t.Errorf("PUBREC number %d must ask for PUBREL", i+1)
		}
	}
	if !done(s.Pubcomp(q2.PacketID)) || done(s.Pubcomp(q2.PacketID)) {
		t.Error("PUBCOMP must complete once")
	}
	if !done(s.Puback(q1.PacketID)) || done(s.Puback(q1.PacketID)) {
		t.Error("PUBACK must complete once")
	}
	if s.Inflight() != 0 {
		t.Fatalf("inflight %d after all acks", s.Inflight())
	}
	q3 := deliver(t, s, "q3", 2, true, Send)
	if released(s.Pubrec(q3.PacketID, true)) || s.Inflight() != 0 {
		t.Error("a failed PUBREC must complete the message without PUBREL")
	}
}

func TestOutOfOrderAcksAndIDReuse(t *testing.T) {
	s := New(Config{MaxInflight: 3}.Limits())
	a := deliver(t, s, "a", 1, true, Send)
	b := deliver(t, s, "b", 1, true, Send)
	c := deliver(t, s, "c", 1, true, Send)
	if !done(s.Puback(b.PacketID)) {
		t.Fatal("out-of-order PUBACK refused")
	}
	if a.PacketID != PacketIDOf(a.Seq) || c.PacketID != PacketIDOf(c.Seq) || a.PacketID == c.PacketID {
		t.Fatalf("packet ids %d, %d not derived from seqs %d, %d", a.PacketID, c.PacketID, a.Seq, c.Seq)
	}
	// 65,535 entries later the ids come round to a's, still in flight:
	// the entry waits for it rather than taking another id, which a
	// restart from the store could not give it again.
	s.seq = a.Seq + 65535
	d := deliver(t, s, "d", 1, true, Queued)
	if _, ok, _ := s.Next(t0, nil); ok {
		t.Fatalf("entry %d sent while its packet id %d is in flight", d.Seq, a.PacketID)
	}
	if !done(s.Puback(a.PacketID)) {
		t.Fatal("PUBACK refused")
	}
	got, ok, _ := s.Next(t0, nil)
	if !ok || got.Msg.Topic != "d" || got.PacketID != a.PacketID {
		t.Fatalf("after the PUBACK got %+v (ok %v), want d under id %d", got, ok, a.PacketID)
	}
	var order []string
	for _, o := range resumed(s) {
		order = append(order, o.Msg.Topic)
	}
	if got := len(order); got != 2 || order[0] != "c" || order[1] != "d" {
		t.Fatalf("resend order %v, want [c d]", order)
	}
}

// resumed is what Next hands out after Resume, up to the first queued
// message.
func resumed(s *Session) []Outbound {
	s.Resume(0)
	var got []Outbound
	for s.Resending() {
		o, _, _ := s.Next(t0, nil)
		got = append(got, o)
	}
	return got
}

func TestResumeSetsDupAndPubrel(t *testing.T) {
	s := New(Config{}.Limits())
	a := deliver(t, s, "a", 1, true, Send)
	b := deliver(t, s, "b", 2, true, Send)
	s.Pubrec(b.PacketID, false)
	got := resumed(s)
	if len(got) != 2 {
		t.Fatalf("resume gave %d entries, want 2", len(got))
	}
	if got[0].PacketID != a.PacketID || !got[0].Dup || got[0].Released {
		t.Errorf("first resend %+v: want PUBLISH %d with DUP", got[0], a.PacketID)
	}
	if got[1].PacketID != b.PacketID || !got[1].Released {
		t.Errorf("second resend %+v: want PUBREL %d", got[1], b.PacketID)
	}
}

func TestOfflineQueueing(t *testing.T) {
	s := New(Config{MaxQueued: 10}.Limits())
	m := msg("x", 0)
	if _, r := s.Deliver(Outbound{Msg: m}, Target{}, t0); r != DropQoS0 {
		t.Fatalf("offline QoS 0 = %v, want DropQoS0", r)
	}
	q := New(Config{QueueQoS0: true}.Limits())
	if _, r := q.Deliver(Outbound{Msg: m}, Target{}, t0); r != Queued {
		t.Fatalf("offline QoS 0 with QueueQoS0 = %v, want Queued", r)
	}
	if _, r := s.Deliver(Outbound{Msg: msg("y", 1), QoS: 1}, Target{}, t0); r != Queued {
		t.Fatalf("offline QoS 1 = %v, want Queued", r)
	}
}

func TestExpiry(t *testing.T) {
	s := New(Config{MaxInflight: 1}.Limits())
	deliver(t, s, "a", 1, true, Send)
	m := msg("b", 1)
	m.SetExpiresAt(t0.Add(time.Second))
	if _, r := s.Deliver(Outbound{Msg: m, QoS: 1}, Target{Online: true, CanSend: true}, t0); r != Queued {
		t.Fatalf("Deliver = %v, want Queued", r)
	}
	if _, r := s.Deliver(Outbound{Msg: m, QoS: 1}, Target{Online: true, CanSend: true}, t0.Add(time.Second)); r != DropExpiry {
		t.Fatalf("Deliver of an expired message = %v, want DropExpiry", r)
	}
	s.Puback(1)
	if _, ok, expired := s.Next(t0.Add(2*time.Second), nil); ok || expired != 1 {
		t.Fatalf("Next after expiry: ok=%v expired=%d, want false and 1", ok, expired)
	}
}

func TestReceiveMaximum(t *testing.T) {
	s := New(Config{MaxInflight: 10}.Limits())
	s.SetReceiveMaximum(1)
	deliver(t, s, "a", 1, true, Send)
	deliver(t, s, "b", 1, true, Queued)
	s.SetReceiveMaximum(0)
	if _, ok, _ := s.Next(t0, nil); !ok {
		t.Fatal("window not restored by SetReceiveMaximum(0)")
	}
}

func TestInboundQoS2(t *testing.T) {
	s := New(Config{MaxAwaitingRel: 2}.Limits())
	if isNew, err := s.ReceiveQoS2(7); !isNew || err != nil {
		t.Fatalf("first receive: %v %v", isNew, err)
	}
	if isNew, err := s.ReceiveQoS2(7); isNew || err != nil {
		t.Fatalf("duplicate receive: isNew=%v err=%v, want false nil", isNew, err)
	}
	s.ReceiveQoS2(8)
	if _, err := s.ReceiveQoS2(9); err != ErrAwaitingRelFull {
		t.Fatalf("third id: err=%v, want ErrAwaitingRelFull", err)
	}
	if !s.Pubrel(7) || s.Pubrel(7) {
		t.Fatal("PUBREL must release an id exactly once")
	}
	if s.AwaitingRel() != 1 {
		t.Fatalf("awaiting %d, want 1", s.AwaitingRel())
	}
}

func TestSubscriptions(t *testing.T) {
	s := New(Config{}.Limits())
	if s.Subscribe(Subscription{Filter: "a/#"}) {
		t.Fatal("new filter reported as existing")
	}
	if !s.Subscribe(Subscription{Filter: "a/#", ID: 4}) {
		t.Fatal("resubscribe not reported as existing")
	}
	n := 0
	s.Subscriptions(func(sub Subscription) {
		n++
		if sub.ID != 4 {
			t.Errorf("options not replaced: %+v", sub)
		}
	})
	if n != 1 || !s.Unsubscribe("a/#") || s.Unsubscribe("a/#") {
		t.Fatal("unsubscribe must remove the filter exactly once")
	}
}

func TestRingGrowsAcrossWrap(t *testing.T) {
	s := New(Config{MaxInflight: 1000}.Limits())
	var ids []uint16
	for i := 0; i < 300; i++ {
		ids = append(ids, deliver(t, s, "t", 1, true, Send).PacketID)
		if i%3 == 0 {
			s.Puback(ids[0])
			ids = ids[1:]
		}
	}
	for _, id := range ids {
		if !done(s.Puback(id)) {
			t.Fatalf("id %d lost in the ring", id)
		}
	}
	if s.Inflight() != 0 {
		t.Fatalf("inflight %d, want 0", s.Inflight())
	}
}

// One message never acknowledged while every later one is must not leave
// a tombstone per message behind it.
func TestUnackedHeadDoesNotGrowRing(t *testing.T) {
	s := New(Config{MaxInflight: 10}.Limits())
	m := msg("t", 1)
	if _, r := s.Deliver(Outbound{Msg: m, QoS: 1}, Target{Online: true, CanSend: true}, t0); r != Send {
		t.Fatal("first message not sent")
	}
	for range 60000 { // under 65,535: then the head's packet id would come round
		o, _ := s.Deliver(Outbound{Msg: m, QoS: 1}, Target{Online: true, CanSend: true}, t0)
		if !done(s.Puback(o.PacketID)) {
			t.Fatal("PUBACK refused")
		}
	}
	if s.Inflight() != 1 || len(s.q.inflight.buf) > 64 {
		t.Errorf("%d in flight, ring of %d slots; want 1 and a small ring", s.Inflight(), len(s.q.inflight.buf))
	}
}

// TestQueuedBytes checks the queue's byte count follows what enters and
// leaves it: queued, sent into the window, and skipped as expired.
func TestQueuedBytes(t *testing.T) {
	s := New(Config{MaxInflight: 1}.Limits())
	a, b, c := msg("a/1", 1), msg("b/22", 1), msg("c/333", 1)
	a.Payload, b.Payload, c.Payload = []byte("1234"), []byte("12"), nil
	c.SetExpiresAt(t0.Add(time.Second))
	for _, m := range []*Message{a, b, c} {
		s.Deliver(Outbound{Msg: m, QoS: 1}, Target{}, t0)
	}
	if got, want := s.QueuedBytes(), a.Size()+b.Size()+c.Size()+3*EntryCost; got != want || want != 7+6+5+3*EntryCost {
		t.Fatalf("QueuedBytes = %d, want %d (7+6+5 and three entries)", got, want)
	}
	if _, ok, _ := s.Next(t0, nil); !ok || s.QueuedBytes() != b.Size()+c.Size()+2*EntryCost {
		t.Fatalf("after one sent: QueuedBytes = %d, want %d", s.QueuedBytes(), b.Size()+c.Size()+2*EntryCost)
	}
	s.Puback(1)
	s.Next(t0, nil)
	s.Puback(2)
	if _, ok, expired := s.Next(t0.Add(time.Second), nil); ok || expired != 1 || s.QueuedBytes() != 0 {
		t.Fatalf("after the expired one was skipped: ok %v, expired %d, QueuedBytes %d; want false, 1, 0", ok, expired, s.QueuedBytes())
	}
}

// TestDiscard checks that a message in flight that may not be sent is
// completed as if acknowledged: the window it held is free again.
func TestDiscard(t *testing.T) {
	s := New(Config{MaxInflight: 1}.Limits())
	o := deliver(t, s, "a", 2, true, Send)
	deliver(t, s, "b", 1, true, Queued)
	if !done(s.Discard(o.PacketID)) || s.Inflight() != 0 {
		t.Fatalf("Discard(%d): in flight %d, want 0", o.PacketID, s.Inflight())
	}
	if done(s.Discard(o.PacketID)) {
		t.Error("a second Discard of the same id reported true")
	}
	if next, ok, _ := s.Next(t0, nil); !ok || next.Msg.Topic != "b" {
		t.Errorf("Next after Discard = %+v, %v; want b", next, ok)
	}
}

// TestSubscriptionIndex checks subscribe, replace and unsubscribe on both
// sides of subIndexMin, against a map kept alongside.
func TestSubscriptionIndex(t *testing.T) {
	s := New(Config{}.Limits())
	want := map[string]byte{}
	check := func(step string) {
		t.Helper()
		got := map[string]byte{}
		s.Subscriptions(func(sub Subscription) { got[sub.Filter] = sub.Options.QoS })
		if len(got) != len(want) {
			t.Fatalf("%s: %d subscriptions, want %d", step, len(got), len(want))
		}
		for f, q := range want {
			if g, ok := got[f]; !ok || g != q {
				t.Fatalf("%s: %s has QoS %d (held %v), want %d", step, f, g, ok, q)
			}
		}
	}
	for i := range 3 * subIndexMin {
		f := fmt.Sprintf("t/%d", i)
		if s.Subscribe(Subscription{Filter: f, Options: packets.SubOptions{QoS: 1}}) {
			t.Fatalf("new filter %s reported as existing", f)
		}
		want[f] = 1
	}
	check("after subscribing")
	if !s.Subscribe(Subscription{Filter: "t/3", Options: packets.SubOptions{QoS: 2}}) {
		t.Fatal("t/3 again not reported as existing")
	}
	want["t/3"] = 2
	for i := 0; i < 3*subIndexMin; i += 2 {
		f := fmt.Sprintf("t/%d", i)
		if !s.Unsubscribe(f) || s.Unsubscribe(f) {
			t.Fatalf("Unsubscribe(%s) twice: want true then false", f)
		}
		delete(want, f)
	}
	check("after unsubscribing every other one")
	for f := range want {
		s.Unsubscribe(f)
	}
	want = map[string]byte{}
	check("after unsubscribing all")
	if s.Subscribe(Subscription{Filter: "t/1"}) {
		t.Error("t/1 reported as existing after everything was unsubscribed")
	}
}

// TestQueueBounds checks the queue refuses a message past its byte limit,
// which counts each entry's cost besides its message.
func TestQueueBounds(t *testing.T) {
	s := New(Config{MaxQueuedBytes: 12 + 2*EntryCost}.Limits())
	m := msg("abcd", 1) // Size 8: topic and payload; "ab" makes 12
	if _, r := s.Deliver(Outbound{Msg: m, QoS: 1}, Target{}, t0); r != Queued {
		t.Fatalf("first message: %v, want Queued", r)
	}
	if _, r := s.Deliver(Outbound{Msg: msg("ab", 1), QoS: 1}, Target{}, t0); r != Queued {
		t.Fatalf("a message reaching the byte limit exactly: %v, want Queued", r)
	}
	if _, r := s.Deliver(Outbound{Msg: msg("a", 1), QoS: 1}, Target{}, t0); r != DropFull {
		t.Fatalf("a message past the byte limit: %v, want DropFull", r)
	}
}

// TestQueueCountsSubscriptionIDs checks an entry's subscription
// identifiers count against the session's bytes and the budget: a client
// with many overlapping subscriptions makes every entry carry one per
// subscription, while the message is shared.
func TestQueueCountsSubscriptionIDs(t *testing.T) {
	ids := make([]uint32, 1000)
	b := &QueueBudget{Max: int64(3 * (EntryCost + 4*len(ids)))}
	s := New(Config{MaxQueuedBytes: 1 << 30}.Limits())
	m := msg("t", 0)
	queued := 0
	for range 10 {
		if _, r := s.Deliver(Outbound{Msg: m, QoS: 1, SubIDs: ids}, Target{Budget: b}, t0); r == Queued {
			queued++
		}
	}
	entry := EntryCost + 4*len(ids)
	if queued != 2 || b.Bytes() != int64(m.Size()+2*entry) || s.QueuedBytes() != 2*(m.Size()+entry) {
		t.Fatalf("queued %d, budget %d bytes, session %d; want 2, %d (the message once), %d",
			queued, b.Bytes(), s.QueuedBytes(), m.Size()+2*entry, 2*(m.Size()+entry))
	}
	s.Clear(b)
	if b.Bytes() != 0 {
		t.Fatalf("%d bytes held after Clear, want 0", b.Bytes())
	}
}

// TestQueueBudget checks the budget all queues share: a message queued by
// two sessions counts once, a new message past the budget is refused
// while one already held is not, a message that can be sent now is sent,
// and the bytes come back when the last queue lets a message go, by Next,
// by expiry or by Clear.
func TestQueueBudget(t *testing.T) {
	b := &QueueBudget{Max: 20 + 2*EntryCost}
	s1, s2 := New(Config{}.Limits()), New(Config{}.Limits())
	big := msg("0123456789", 1) // Size 20
	if _, r := s1.Deliver(Outbound{Msg: big, QoS: 1}, Target{Budget: b}, t0); r != Queued || b.Bytes() != 20+EntryCost {
		t.Fatalf("first: %v with %d bytes held, want Queued with 20 and an entry", r, b.Bytes())
	}
	if _, r := s2.Deliver(Outbound{Msg: big, QoS: 1}, Target{Budget: b}, t0); r != Queued || b.Bytes() != 20+2*EntryCost {
		t.Fatalf("the same message for another session: %v with %d bytes held, want Queued, 20 and two entries", r, b.Bytes())
	}
	small := msg("a", 1)
	if _, r := s2.Deliver(Outbound{Msg: small, QoS: 1}, Target{Budget: b}, t0); r != DropFull {
		t.Fatalf("a new message past the budget: %v, want DropFull", r)
	}
	if _, r := New(Config{}.Limits()).Deliver(Outbound{Msg: small, QoS: 1}, Target{Online: true, CanSend: true, Budget: b}, t0); r != Send {
		t.Fatalf("a message sent at once with the budget spent: %v, want Send", r)
	}
	s1.Next(t0, b)
	if b.Bytes() != 20+EntryCost {
		t.Fatalf("%d bytes held after one of two queues let go, want 20 and an entry", b.Bytes())
	}
	s2.Clear(b)
	if b.Bytes() != 0 || s2.Queued() != 0 {
		t.Fatalf("after Clear: %d bytes held, %d queued; want 0, 0", b.Bytes(), s2.Queued())
	}
	old := msg("x", 1)
	old.SetExpiresAt(t0.Add(time.Second))
	s1.Deliver(Outbound{Msg: old, QoS: 1}, Target{Budget: b}, t0)
	if _, ok, expired := s1.Next(t0.Add(time.Second), b); ok || expired != 1 || b.Bytes() != 0 {
		t.Fatalf("after expiry: ok %v, expired %d, %d bytes held; want false, 1, 0", ok, expired, b.Bytes())
	}
}

// TestResendBeforeNew checks the window is sent again before anything
// new after Resume, new messages queue behind it, and an entry
// acknowledged before it was sent again is not sent.
func TestResendBeforeNew(t *testing.T) {
	s := New(Config{MaxInflight: 10}.Limits())
	a := deliver(t, s, "a", 1, true, Send)
	b := deliver(t, s, "b", 1, true, Send)
	s.Resume(0)
	deliver(t, s, "new", 1, true, Queued) // the window has room, but the resends come first
	if !done(s.Puback(b.PacketID)) {
		t.Fatal("PUBACK of an entry waiting to be sent again refused")
	}
	var order []string
	for {
		o, ok, _ := s.Next(t0, nil)
		if !ok {
			break
		}
		order = append(order, o.Msg.Topic)
		if o.Msg.Topic == "a" && (!o.Dup || o.PacketID != a.PacketID) {
			t.Errorf("resend of a: %+v, want DUP with id %d", o, a.PacketID)
		}
	}
	if len(order) != 2 || order[0] != "a" || order[1] != "new" {
		t.Errorf("Next order %v, want [a new]", order)
	}
}

// TestResendLargeWindow checks a large window is sent again entirely, in
// order, in one pass (BenchmarkResendWindow shows the cost), with the
// entries acknowledged meanwhile skipped, enough of them that the window
// is compacted underway.
func TestResendLargeWindow(t *testing.T) {
	const n = 2000
	s := New(Config{MaxInflight: n}.Limits())
	ids := make([]uint16, n)
	at := map[uint16]int{}
	for i := range ids {
		ids[i] = deliver(t, s, fmt.Sprint(i), 1, true, Send).PacketID
		at[ids[i]] = i
	}
	s.Puback(ids[0]) // the head: trimmed, so positions shift
	s.Resume(0)
	acked := map[uint16]bool{ids[0]: true}
	var got []uint16
	for {
		o, ok, _ := s.Next(t0, nil)
		if !ok {
			break
		}
		got = append(got, o.PacketID)
		// Acknowledge the next two before they are sent again: past half
		// the window in tombstones, it is compacted.
		for k := at[o.PacketID] + 1; k <= at[o.PacketID]+2 && k < n; k++ {
			if !acked[ids[k]] && done(s.Puback(ids[k])) {
				acked[ids[k]] = true
			}
		}
	}
	var want []uint16
	for _, id := range ids {
		if !acked[id] || containsID(got, id) {
			want = append(want, id)
		}
	}
	if len(got) != len(want) || len(got) == 0 || len(got) == n {
		t.Fatalf("%d entries sent again, want %d (of %d)", len(got), len(want), n)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("resend %d: id %d, want %d", i, got[i], want[i])
		}
	}
	if s.Resending() {
		t.Error("still resending after the window was sent")
	}
}

func containsID(ids []uint16, id uint16) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// TestInFlight checks what InFlight says of each step of the window: the
// QoS of a message in flight, whether its PUBREL was sent, and nothing
// for an id not in flight, before or after its completion.
func TestInFlight(t *testing.T) {
	s := New(Config{}.Limits())
	one := deliver(t, s, "one", 1, true, Send)
	two := deliver(t, s, "two", 2, true, Send)
	check := func(id uint16, wantQoS byte, wantReleased, wantOK bool) {
		t.Helper()
		if qos, released, ok := s.InFlight(id); qos != wantQoS || released != wantReleased || ok != wantOK {
			t.Errorf("InFlight(%d) = %d, %v, %v; want %d, %v, %v", id, qos, released, ok, wantQoS, wantReleased, wantOK)
		}
	}
	check(one.PacketID, 1, false, true)
	check(two.PacketID, 2, false, true)
	check(999, 0, false, false)
	s.Pubrec(two.PacketID, false)
	check(two.PacketID, 2, true, true)
	s.Puback(one.PacketID)
	s.Pubcomp(two.PacketID)
	check(one.PacketID, 0, false, false)
	check(two.PacketID, 0, false, false)
}

// TestResumeWithinReceiveMaximum checks that a window resent after a
// reconnect goes out no faster than the new connection's Receive Maximum
// allows: the entries sent again and not acknowledged count against it,
// and each acknowledgement lets one more go.
func TestResumeWithinReceiveMaximum(t *testing.T) {
	s := New(Config{MaxInflight: 5}.Limits())
	var sent []Outbound
	for i := range 5 {
		sent = append(sent, deliver(t, s, fmt.Sprint(i), 1, true, Send))
	}
	s.SetReceiveMaximum(2)
	s.Resume(0)
	next := func() (Outbound, bool) {
		o, ok, _ := s.Next(t0, nil)
		return o, ok
	}
	for i := range 2 {
		if o, ok := next(); !ok || o.PacketID != sent[i].PacketID || !o.Dup {
			t.Fatalf("resend %d: %+v, %v; want packet %d with DUP", i, o, ok, sent[i].PacketID)
		}
	}
	if o, ok := next(); ok {
		t.Fatalf("a third resend, %d, past a Receive Maximum of 2", o.PacketID)
	}
	s.Puback(sent[0].PacketID)
	if o, ok := next(); !ok || o.PacketID != sent[2].PacketID {
		t.Fatalf("after an ack: %+v, %v; want packet %d", o, ok, sent[2].PacketID)
	}
	if _, ok := next(); ok {
		t.Fatal("two resends for one ack")
	}
	s.Puback(sent[4].PacketID) // acknowledged before it was sent again: frees nothing sent
	if o, ok := next(); ok {
		t.Fatalf("resend %d after an ack of an entry not sent again", o.PacketID)
	}
	s.Puback(sent[1].PacketID)
	if o, ok := next(); !ok || o.PacketID != sent[3].PacketID {
		t.Fatalf("after an ack: %+v, %v; want packet %d", o, ok, sent[3].PacketID)
	}
	if s.Resending() {
		t.Error("still resending with every entry sent again or acknowledged")
	}
}

// TestTakeIf checks that TakeIf takes the unacknowledged entries of the
// window and the queued messages take picks, in order, leaves the rest
// (and a QoS 2 message past PUBREC) where they were, frees the window and
// gives back the queue's bytes.
func TestTakeIf(t *testing.T) {
	s := New(Config{MaxInflight: 3}.Limits())
	var b QueueBudget
	b.Max = 1 << 20
	dl := func(topic string, qos byte, want Result) Outbound {
		t.Helper()
		o, r := s.Deliver(Outbound{Msg: msg(topic, qos), QoS: qos}, Target{Online: true, CanSend: true, Budget: &b}, t0)
		if r != want {
			t.Fatalf("Deliver(%s) = %v, want %v", topic, r, want)
		}
		return o
	}
	dl("x1", 1, Send)
	rel := dl("x2", 2, Send)
	dl("k1", 1, Send)
	dl("x3", 1, Queued)
	dl("k2", 1, Queued)
	dl("x4", 0, Queued)
	s.Pubrec(rel.PacketID, false)
	got := s.TakeIf(func(o *Outbound) bool { return o.Msg.Topic[0] == 'x' }, &b)
	var topics []string
	for _, o := range got {
		topics = append(topics, o.Msg.Topic)
		if o.PacketID != 0 || o.Dup {
			t.Errorf("%s taken with packet id %d, DUP %v", o.Msg.Topic, o.PacketID, o.Dup)
		}
	}
	if fmt.Sprint(topics) != "[x1 x3 x4]" {
		t.Errorf("took %v, want [x1 x3 x4]", topics)
	}
	if s.Inflight() != 2 || s.Queued() != 1 || s.QueuedBytes() != msg("k2", 1).Size()+EntryCost || b.Bytes() != int64(msg("k2", 1).Size()+EntryCost) {
		t.Errorf("left %d in flight, %d queued (%d bytes, budget %d); want 2, 1, k2's", s.Inflight(), s.Queued(), s.QueuedBytes(), b.Bytes())
	}
	if o, ok, _ := s.Next(t0, &b); !ok || o.Msg.Topic != "k2" {
		t.Errorf("next %+v, %v; want k2 into the freed window", o, ok)
	}
}

// done is the ok of Puback, Pubcomp or Discard.
func done(_ uint64, ok bool) bool { return ok }

// released reports whether Pubrec moved a message to its PUBREL step.
func released(o Outbound, ok bool) bool { return ok && o.Released }

// A session read back from the store sends its entries again under the
// packet ids they had: a released QoS 2 message as PUBREL, the others as
// PUBLISH in Seq order, DUP as restored; new entries follow the largest
// Seq.
func TestRestore(t *testing.T) {
	var b QueueBudget
	s := New(Config{}.Limits())
	s.Restore(Outbound{Seq: 7, QoS: 2, Released: true}, &b)
	one, two := msg("one", 1), msg("two", 2)
	s.Restore(Outbound{Seq: 9, Msg: one, QoS: 1, Dup: true}, &b)
	s.Restore(Outbound{Seq: 12, Msg: two, QoS: 2}, &b)
	if s.Inflight() != 1 || s.Queued() != 2 || b.Bytes() != int64(one.Size()+two.Size()+2*EntryCost) {
		t.Fatalf("inflight %d, queued %d, budget %d after restore", s.Inflight(), s.Queued(), b.Bytes())
	}
	s.Resume(0)
	var got []Outbound
	for {
		o, ok, _ := s.Next(t0, &b)
		if !ok {
			break
		}
		got = append(got, o)
	}
	want := []struct {
		id            uint16
		released, dup bool
	}{{PacketIDOf(7), true, false}, {PacketIDOf(9), false, true}, {PacketIDOf(12), false, false}}
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].PacketID != w.id || got[i].Released != w.released || got[i].Dup != w.dup {
			t.Errorf("entry %d: %+v, want id %d released %v dup %v", i, got[i], w.id, w.released, w.dup)
		}
	}
	if b.Bytes() != 0 {
		t.Errorf("budget holds %d bytes once the queue is sent", b.Bytes())
	}
	if o := deliver(t, s, "new", 1, true, Send); o.Seq != 13 {
		t.Errorf("new entry has Seq %d, want 13", o.Seq)
	}
}

// A held QoS 2 entry waits in the queue, with what follows it, until
// Stable passes its Seq; QoS 1 is not held.
func TestHoldUntilStable(t *testing.T) {
	s := New(Config{}.Limits())
	to := Target{Online: true, CanSend: true, Hold: true}
	one, r := s.Deliver(Outbound{Msg: msg("one", 1), QoS: 1}, to, t0)
	if r != Send {
		t.Fatalf("QoS 1 with Hold: %v, want Send", r)
	}
	two, r := s.Deliver(Outbound{Msg: msg("two", 2), QoS: 2}, to, t0)
	if r != Queued {
		t.Fatalf("QoS 2 with Hold: %v, want Queued", r)
	}
	if _, r := s.Deliver(Outbound{Msg: msg("three", 1), QoS: 1}, to, t0); r != Queued {
		t.Fatalf("QoS 1 behind a held entry: %v, want Queued", r)
	}
	if _, ok, _ := s.Next(t0, nil); ok {
		t.Fatal("a held entry was handed out before Stable")
	}
	s.Stable(one.Seq)
	if _, ok, _ := s.Next(t0, nil); ok {
		t.Fatal("Stable below the held entry's Seq let it go")
	}
	s.Stable(two.Seq)
	got, ok, _ := s.Next(t0, nil)
	if !ok || got.Msg.Topic != "two" || got.PacketID != PacketIDOf(two.Seq) {
		t.Fatalf("after Stable got %+v (ok %v), want two", got, ok)
	}
	if got, ok, _ := s.Next(t0, nil); !ok || got.Msg.Topic != "three" {
		t.Fatalf("got %+v (ok %v), want three", got, ok)
	}
}

// A PUBREC again for a message already released (after a reconnect, say)
// asks for the PUBREL again and changes nothing.
func TestPubrecAgain(t *testing.T) {
	s := New(Config{}.Limits())
	o := deliver(t, s, "two", 2, true, Send)
	if !released(s.Pubrec(o.PacketID, false)) {
		t.Fatal("first PUBREC did not release")
	}
	again, ok := s.Pubrec(o.PacketID, false)
	if !ok || !again.Released || again.Msg != nil || s.Inflight() != 1 {
		t.Fatalf("second PUBREC: %+v (ok %v), inflight %d", again, ok, s.Inflight())
	}
}

// TestLimitsCountInflight follows the windows of two sessions sharing
// their limits through every way in and out (sent, pumped from the
// queue, restored, acknowledged, refused, discarded, taken, cleared):
// Limits.Inflight is always the sum of their Inflight.
func TestLimitsCountInflight(t *testing.T) {
	lim := Config{MaxInflight: 3}.Limits()
	a, b := New(lim), New(lim)
	check := func(step string) {
		t.Helper()
		if got, want := lim.Inflight(), int64(a.Inflight()+b.Inflight()); got != want {
			t.Fatalf("%s: Limits.Inflight %d, the windows hold %d", step, got, want)
		}
	}
	a1 := deliver(t, a, "a1", 1, true, Send)
	a2 := deliver(t, a, "a2", 2, true, Send)
	a3 := deliver(t, a, "a3", 2, true, Send)
	deliver(t, a, "a4", 1, true, Queued)
	deliver(t, a, "a0", 0, true, Queued) // QoS 0 never enters the window
	b1 := deliver(t, b, "b1", 1, true, Send)
	check("sent")
	if lim.Inflight() != 4 {
		t.Fatalf("Limits.Inflight %d after four QoS 1/2 sends, want 4", lim.Inflight())
	}
	done(a.Puback(a1.PacketID))
	check("puback")
	if _, ok, _ := a.Next(t0, nil); !ok {
		t.Fatal("a4 not pumped into the freed window")
	}
	check("pumped")
	a.Pubrec(a2.PacketID, false) // released: still in flight until PUBCOMP
	check("pubrec")
	done(a.Pubcomp(a2.PacketID))
	check("pubcomp")
	a.Pubrec(a3.PacketID, true) // refused: complete
	check("refused pubrec")
	done(b.Discard(b1.PacketID))
	check("discard")
	b.Restore(Outbound{Msg: msg("r", 2), QoS: 2, Seq: 7, Released: true}, nil)
	deliver(t, b, "b2", 1, true, Send)
	check("restored")
	b.TakeIf(func(o *Outbound) bool { return o.QoS == 1 }, nil)
	check("taken")
	a.Clear(nil)
	b.Clear(nil)
	check("cleared")
	if lim.Inflight() != 0 {
		t.Fatalf("Limits.Inflight %d after every session cleared, want 0", lim.Inflight())
	}
}

// TestDropOldest: the oldest queued message goes, with its bytes, and the
// window is left alone; the next Deliver then has room.
func TestDropOldest(t *testing.T) {
	var b QueueBudget
	b.Max = 1 << 20
	s := New(Config{MaxInflight: 1, MaxQueued: 2}.Limits())
	if _, ok := s.DropOldest(&b); ok {
		t.Fatal("DropOldest on an empty queue reported a message")
	}
	deliver := func(topic string) Result {
		_, r := s.Deliver(Outbound{Msg: &Message{Topic: topic}, QoS: 1}, Target{Online: true, CanSend: true, Budget: &b}, time.Time{})
		return r
	}
	if r := deliver("w"); r != Send {
		t.Fatalf("first message: %v, want Send", r)
	}
	deliver("q1")
	deliver("q2")
	if r := deliver("q3"); r != DropFull {
		t.Fatalf("third queued message: %v, want DropFull", r)
	}
	o, ok := s.DropOldest(&b)
	if !ok || o.Msg.Topic != "q1" {
		t.Fatalf("DropOldest = %v, %v; want q1", o.Msg, ok)
	}
	if s.Queued() != 1 || s.Inflight() != 1 {
		t.Errorf("queued %d, in flight %d after the drop; want 1 and 1", s.Queued(), s.Inflight())
	}
	if r := deliver("q3"); r != Queued {
		t.Errorf("after the drop: %v, want Queued", r)
	}
	if b.Bytes() != int64(s.QueuedBytes()) {
		t.Errorf("budget holds %d, the queue %d", b.Bytes(), s.QueuedBytes())
	}
}

// TestSetLimits: a session moved to other limits takes its counts along,
// and the new bounds apply to what comes next.
func TestSetLimits(t *testing.T) {
	var b QueueBudget
	b.Max = 1 << 20
	from, to := Config{MaxInflight: 2, MaxQueued: 10}.Limits(), Config{MaxInflight: 2, MaxQueued: 1}.Limits()
	s := New(from)
	s.Subscribe(Subscription{Filter: "a/#"})
	for range 3 {
		s.Deliver(Outbound{Msg: &Message{Topic: "a"}, QoS: 1}, Target{Online: true, CanSend: true, Budget: &b}, time.Time{})
	}
	s.SetLimits(to)
	if from.Inflight() != 0 || to.Inflight() != 2 || from.SubscriptionBytes() != 0 || to.SubscriptionBytes() != s.SubscriptionBytes() {
		t.Errorf("counts after the move: from %d/%d, to %d/%d", from.Inflight(), from.SubscriptionBytes(), to.Inflight(), to.SubscriptionBytes())
	}
	if _, r := s.Deliver(Outbound{Msg: &Message{Topic: "a"}, QoS: 1}, Target{Online: true, CanSend: true, Budget: &b}, time.Time{}); r != DropFull {
		t.Errorf("a second queued message under MaxQueued 1: %v, want DropFull", r)
	}
}

// TestReserveID: a reserved packet id is one no message then takes; the
// next message gets the id after it.
func TestReserveID(t *testing.T) {
	var b QueueBudget
	b.Max = 1 << 20
	s := New(Config{MaxInflight: 10}.Limits())
	deliver := func() uint16 {
		o, r := s.Deliver(Outbound{Msg: &Message{Topic: "t"}, QoS: 1}, Target{Online: true, CanSend: true, Budget: &b}, time.Time{})
		if r != Send {
			t.Fatalf("Deliver: %v", r)
		}
		return o.PacketID
	}
	first := deliver()
	id := s.ReserveID()
	next := deliver()
	if id == first || id == next || next != id+1 {
		t.Errorf("ids: message %d, reserved %d, message %d", first, id, next)
	}
}

// Entries gives a session's entries as Restore takes them back: moved to
// another session, they are sent in the same order under the same packet
// ids, those sent before with DUP, a released QoS 2 message as PUBREL.
func TestEntriesRestoreElsewhere(t *testing.T) {
	var b QueueBudget
	b.Max = 1 << 20
	s := New(Config{MaxInflight: 2}.Limits())
	rel := deliver(t, s, "rel", 2, true, Send)
	deliver(t, s, "sent", 1, true, Send)
	deliver(t, s, "queued", 1, true, Queued)
	s.Pubrec(rel.PacketID, false)
	if _, err := s.ReceiveQoS2(42); err != nil {
		t.Fatal(err)
	}
	entries := s.Entries()
	if s.Inflight() != 2 || s.Queued() != 1 {
		t.Fatal("Entries took entries out of the session")
	}
	if ids := s.AwaitingRelIDs(); len(ids) != 1 || ids[0] != 42 {
		t.Fatalf("awaiting PUBREL %v, want [42]", ids)
	}
	moved := New(Config{}.Limits())
	for _, o := range entries {
		moved.Restore(o, &b)
	}
	moved.Resume(0)
	want := []struct {
		topic         string
		released, dup bool
	}{{"rel", true, false}, {"sent", false, true}, {"queued", false, false}}
	for i, w := range want {
		o, ok, _ := moved.Next(t0, &b)
		topic := w.topic // a released entry keeps no message
		if o.Msg != nil {
			topic = o.Msg.Topic
		}
		if !ok || topic != w.topic || o.Released != w.released || o.Dup != w.dup || o.PacketID != PacketIDOf(entries[i].Seq) {
			t.Fatalf("entry %d: %+v (ok %v), want %s released %v dup %v", i, o, ok, w.topic, w.released, w.dup)
		}
	}
}

// TestResumeGivesUpAfterMaxSends: an entry is counted as sent when it
// enters the window and at each Resume; once sent maxSends times the next
// Resume completes it and returns it instead of sending it again, and the
// window goes on with what is behind it. A released QoS 2 entry (its
// client has the message) and, with maxSends 0, every entry stay.
func TestResumeGivesUpAfterMaxSends(t *testing.T) {
	s := New(Config{MaxInflight: 2}.Limits())
	poison := deliver(t, s, "poison", 1, true, Send)
	kept := deliver(t, s, "kept", 2, true, Send)
	if _, ok := s.Pubrec(kept.PacketID, false); !ok {
		t.Fatal("PUBREC refused")
	}
	deliver(t, s, "next", 1, true, Queued)
	for i := 2; i <= 3; i++ {
		if gave := s.Resume(3); len(gave) != 0 {
			t.Fatalf("Resume %d gave up %v", i, gave)
		}
	}
	if gave := s.Resume(0); len(gave) != 0 {
		t.Fatalf("Resume(0) gave up %v", gave)
	}
	gave := s.Resume(3)
	if len(gave) != 1 || gave[0].Msg.Topic != "poison" || gave[0].Seq != poison.Seq || gave[0].Sends != 4 {
		t.Fatalf("gave up %+v: want the poison message, sent 4 times", gave)
	}
	var order []string
	for {
		o, ok, _ := s.Next(t0, nil)
		if !ok {
			break
		}
		if o.Released {
			order = append(order, "PUBREL")
		} else {
			order = append(order, o.Msg.Topic)
		}
	}
	if len(order) != 2 || order[0] != "PUBREL" || order[1] != "next" {
		t.Errorf("sent after giving up: %v, want the PUBREL of kept, then next", order)
	}
}

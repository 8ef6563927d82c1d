package session

// A session's state read out to move it to another node or connection
// (Entries, AwaitingRelIDs), and put back from the store (Restore).

// Restore puts back an entry the broker read from its store, called in
// Seq order before the session's client connects: a QoS 2 message past
// PUBREC into the window, where Resume has its PUBREL sent again, and
// anything else into the queue, where it keeps its Seq (and so its packet
// id) and its DUP flag. The session's limits are not applied: what was
// kept is given back, though the limits may have been lowered since. b
// is the budget Deliver is given, which counts what is queued.
func (s *Session) Restore(o Outbound, b *QueueBudget) {
	s.seq = max(s.seq, o.Seq+1)
	o.held = false
	if o.Released {
		o.PacketID = PacketIDOf(o.Seq)
		s.queues().inflight.push(o)
		s.live++
		s.lim.inflight.Add(1)
		return
	}
	o.PacketID, o.resend = 0, false
	size, cost := o.Msg.Size(), o.cost()
	if b != nil {
		held := int64(cost)
		if o.Msg.queued.Add(1) == 1 {
			held += int64(size)
		}
		b.bytes.Add(held)
	}
	s.queues().pending.push(o)
	s.q.pendingBytes += size + cost
}

// Entries returns copies of the session's entries as Restore takes them
// back, in Seq order: the window's first (each sent before, so with DUP
// set unless its PUBREL is what is outstanding), then the queued ones.
// The session keeps them: the caller moving the session elsewhere clears
// it after.
func (s *Session) Entries() []Outbound {
	if s.q == nil {
		return nil
	}
	out := make([]Outbound, 0, s.q.inflight.len()+s.q.pending.len())
	s.q.inflight.each(func(e *Outbound) {
		o := *e
		o.Dup = !o.Released
		o.resend, o.held = false, false
		out = append(out, o)
	})
	s.q.pending.each(func(e *Outbound) {
		o := *e
		o.resend, o.held = false, false
		out = append(out, o)
	})
	return out
}

// AwaitingRelIDs returns the inbound QoS 2 packet ids waiting for PUBREL.
func (s *Session) AwaitingRelIDs() []uint16 {
	ids := make([]uint16, 0, s.AwaitingRel())
	for id := range s.awaitingRels() {
		ids = append(ids, id)
	}
	return ids
}

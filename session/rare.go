package session

// rare is the part of a Session that an idle online client does not use:
// inbound QoS 2, a cluster's stamps, many subscriptions, an offline spell.
type rare struct {
	awaitingRel map[uint16]*Forward // nil: nothing to send again
	stamps      *stamps
	// subIndex finds a filter's place in subs once there are more than
	// subIndexMin: a client with thousands of subscriptions must not make
	// each SUBSCRIBE scan them all.
	subIndex map[string]int
	leftAt   int64 // unix nanos its client last left; 0: not known
}

// more returns the rare part, allocating it on first use.
func (s *Session) more() *rare {
	if s.rare == nil {
		s.rare = new(rare)
	}
	return s.rare
}

// ReceiveQoS2 records an inbound QoS 2 packet id. isNew is false for an id
// already awaiting PUBREL: the message must not be routed again.
func (s *Session) ReceiveQoS2(id uint16) (isNew bool, err error) {
	r := s.more()
	if _, dup := r.awaitingRel[id]; dup {
		return false, nil
	}
	if len(r.awaitingRel) >= int(s.lim.maxAwaitingRel) {
		return false, ErrAwaitingRelFull
	}
	if r.awaitingRel == nil {
		r.awaitingRel = make(map[uint16]*Forward)
	}
	r.awaitingRel[id] = nil
	return true, nil
}

// Pubrel releases an inbound QoS 2 packet id; it reports whether the id
// was awaiting release.
func (s *Session) Pubrel(id uint16) bool {
	r := s.rare
	if r == nil {
		return false
	}
	if _, ok := r.awaitingRel[id]; !ok {
		return false
	}
	delete(r.awaitingRel, id)
	return true
}

// AwaitingRel reports how many inbound QoS 2 ids wait for PUBREL.
func (s *Session) AwaitingRel() int { return len(s.awaitingRels()) }

// awaitingRels returns the ids awaiting PUBREL; nil when none ever did.
func (s *Session) awaitingRels() map[uint16]*Forward {
	if s.rare == nil {
		return nil
	}
	return s.rare.awaitingRel
}

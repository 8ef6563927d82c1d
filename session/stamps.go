package session

// Exactly once between the nodes of a cluster. A QoS 2 message a client
// publishes on one node is stamped there (Stamp), kept with its packet
// id (a Forward) until every node it went to has confirmed it, and sent
// again under the same stamp when its publisher sends the packet id
// again before that: to a node that may or may not have it. Each
// session remembers the stamps of the messages it took (Seen, Remember),
// for a while, so that the second copy is not delivered twice.

// Stamp identifies a QoS 2 message among a cluster's nodes (as
// persistence.Stamp): the node that took it and a counter there. The
// zero Stamp is none.
type Stamp struct{ Node, Seq uint64 }

// IsZero reports whether s is no stamp.
func (s Stamp) IsZero() bool { return s == Stamp{} }

// Forward is an inbound QoS 2 message not yet confirmed by the nodes it
// went to: sent again, under Stamp, when its packet id comes again.
type Forward struct {
	Stamp Stamp
	Msg   *Message
}

// MaxStamps bounds the stamps a session remembers: past it, the oldest
// is forgotten first (Remember reports it), and a copy of its message
// sent again after that would be delivered twice.
const MaxStamps = 1024

// stamps are the stamps a session remembers, each until its expiry, in
// the order they came (expiries grow with it but for those restored).
type stamps struct {
	at    map[Stamp]int64 // to its expiry
	order []SeenStamp     // a queue from head
	head  int
}

// SeenStamp is a stamp a session remembers, until Expiry (unix nanos).
type SeenStamp struct {
	Stamp  Stamp
	Expiry int64
}

// Seen reports whether the session took the message of st and still
// remembers it at now (unix nanos).
func (s *Session) Seen(st Stamp, now int64) bool {
	if s.rare == nil || s.rare.stamps == nil {
		return false
	}
	expiry, ok := s.rare.stamps.at[st]
	return ok && expiry > now
}

// Remember has the session remember st until expiry; now is the time
// (unix nanos), before which expired stamps are forgotten. It reports
// whether an unexpired stamp had to be forgotten to stay within
// MaxStamps.
func (s *Session) Remember(st Stamp, expiry, now int64) (evicted bool) {
	r := s.more()
	if r.stamps == nil {
		r.stamps = &stamps{at: make(map[Stamp]int64)}
	}
	ss := r.stamps
	for ss.head < len(ss.order) {
		e := ss.order[ss.head]
		if e.Expiry > now && len(ss.at) < MaxStamps {
			break
		}
		if cur, ok := ss.at[e.Stamp]; ok && cur == e.Expiry {
			delete(ss.at, e.Stamp)
			evicted = evicted || e.Expiry > now
		}
		ss.head++
	}
	if ss.head > len(ss.order)/2 {
		ss.order = append(ss.order[:0], ss.order[ss.head:]...)
		ss.head = 0
	}
	ss.at[st] = expiry
	ss.order = append(ss.order, SeenStamp{st, expiry})
	return evicted
}

// Forget has the session forget st, remembered until expiry: the unit
// that was to store the message it came with failed, so a copy sent
// again must be taken, not passed over as one it holds. A stamp
// remembered again since, with another expiry, stays.
func (s *Session) Forget(st Stamp, expiry int64) {
	if r := s.rare; r != nil && r.stamps != nil && r.stamps.at[st] == expiry {
		delete(r.stamps.at, st)
	}
}

// Stamps returns the stamps the session remembers at now (unix nanos),
// to move it elsewhere.
func (s *Session) Stamps(now int64) []SeenStamp {
	if s.rare == nil || s.rare.stamps == nil {
		return nil
	}
	out := make([]SeenStamp, 0, len(s.rare.stamps.at))
	for st, expiry := range s.rare.stamps.at {
		if expiry > now {
			out = append(out, SeenStamp{st, expiry})
		}
	}
	return out
}

// SetForward makes the awaiting-rel id's message f, still to be
// confirmed by other nodes (nil: confirmed, or never sent). It does
// nothing for an id not awaiting PUBREL.
func (s *Session) SetForward(id uint16, f *Forward) {
	if _, ok := s.awaitingRels()[id]; ok {
		s.rare.awaitingRel[id] = f
	}
}

// ForwardOf returns the awaiting-rel id's message still to be confirmed,
// or nil.
func (s *Session) ForwardOf(id uint16) *Forward { return s.awaitingRels()[id] }

// Forwards calls f for each awaiting-rel id whose message is still to be
// confirmed.
func (s *Session) Forwards(f func(id uint16, fw *Forward)) {
	for id, fw := range s.awaitingRels() {
		if fw != nil {
			f(id, fw)
		}
	}
}

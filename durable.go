package mqttd

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"mqttd/packets"
	"mqttd/persistence"
	"mqttd/persistence/bolt"
	"mqttd/session"
)

// Durable state: every change of a session that outlives its connection
// (client.stored) and of the retained store becomes a unit in the
// Committer's log, added under the lock that orders that change in memory
// (the session's, or retainMu), so that the store sees each session's
// changes in the order they were made. A reader's units are committed
// together at the end of its read, and the acknowledgements they cover
// (PUBACK, PUBREC, PUBREL, PUBCOMP, SUBACK, UNSUBACK) are held until then
// (heldAnswers); later acknowledgements of the same connection wait
// behind them, which keeps [MQTT-4.6.0-2] order, and everything else
// (PINGRESP, deliveries) passes. Nothing is written for clean sessions.

// StoreFile is the name of the bbolt file the broker keeps in DataDir.
const StoreFile = "mqttd.db"

// commitDelay is how long a commit that would store outbound entries
// waits for their subscribers to acknowledge them first: an entry put and
// acknowledged before its commit is never written, and its publisher's
// PUBACK needs no fsync (Committer.SetDelay). A loopback round trip to an
// online subscriber takes a small part of it.
const commitDelay = 300 * time.Microsecond

// maxHeld bounds the acknowledgements a connection has waiting for a
// commit: a client that publishes past it waits for the commit, so that
// one ignoring flow control cannot make the broker hold without bound.
const maxHeld = 1024

// maxWaitingOps bounds the operations waiting for a commit (about 250
// bytes each, and the messages they hold): past it a reader that added
// some waits for the commit before it answers another message, or reads
// more, as when the disk is slower than what QoS 0 retained messages ask
// of it, which no acknowledgement holds back.
const maxWaitingOps = 16 << 10

// durable is the broker's side of its store.
type durable struct {
	store  persistence.Store
	commit *persistence.Committer
	// own is set when the broker opened the store and closes it.
	own    bool
	msgIDs atomic.Uint64 // the last message id given (session.Message.StoreID)
}

// openStore opens the store Options asks for: Options.Store, or the bbolt
// file in DataDir; neither means nothing is kept.
func openStore(o Options) (*durable, error) {
	if o.Store != nil {
		return &durable{store: o.Store}, nil
	}
	if o.DataDir == "" {
		return nil, nil
	}
	d, _ := parseDurability(o.Durability)
	path := filepath.Join(o.DataDir, StoreFile)
	st, err := bolt.Open(path, bolt.Options{Durability: d})
	if err != nil && o.MoveAsideBadStore && errors.Is(err, bolt.ErrCorrupt) {
		aside, merr := bolt.MoveAside(path)
		if merr != nil {
			return nil, fmt.Errorf("%w; and %w", err, merr)
		}
		o.Logger.Warn().Err(err).Str("moved_to", aside).Msg("the store could not be read: moved aside, starting empty")
		st, err = bolt.Open(path, bolt.Options{Durability: d})
	}
	if err != nil {
		return nil, err
	}
	return &durable{store: st, own: true}, nil
}

// parseDurability reads Options.Durability.
func parseDurability(s string) (bolt.Durability, bool) {
	switch s {
	case "", "sync":
		return bolt.Sync, true
	case "interval":
		return bolt.Interval, true
	case "none":
		return bolt.None, true
	}
	return 0, false
}

// checkedStore counts and logs what the store does, and its failures.
type checkedStore struct {
	persistence.Store
	s *Server
}

// Apply applies b, counting the commit and logging a failure.
func (cs checkedStore) Apply(b *persistence.Batch) error {
	start := time.Now()
	err := cs.Store.Apply(b)
	took := time.Since(start)
	cs.s.storeHealth.record(err)
	st := &cs.s.stats
	st.storeCommits.Add(1)
	st.storeOps.Add(uint64(b.Len()))
	st.storeCommitNanos.Add(uint64(took))
	st.storeCommitSeconds.observe(&storeCommitSecondsBounds, took.Seconds())
	st.storeCommitOps.observe(&storeCommitOpsBounds, float64(b.Len()))
	if err != nil {
		st.storeErrors.Add(1)
		if !rateLimited(&cs.s.storeWarned) {
			cs.s.log.Error().Err(err).Int("ops", b.Len()).
				Msg("store commit failed: what it held is not acknowledged (logged at most every 10 s; mqttd_store_errors_total counts them all)")
		}
	}
	return err
}

// add appends a unit. owner is the connection whose reader adds it, or
// nil: then the unit is committed at once. A reader's units are committed
// at the end of its read, and the next answer it sends waits for the
// units that it covers: those that are what the answer acknowledges (a
// message routed, a subscription made). Others (deletes of what its
// client acknowledged) need not hold anything back.
func (d *durable) add(b *persistence.Batch, owner *conn, covers bool) {
	if owner == nil {
		d.commit.Add(b, nil)
		d.commit.Flush()
		return
	}
	owner.holdAnswers()
	if !covers {
		d.track(owner, d.commit.Add(b, nil), false)
		return
	}
	d.track(owner, d.commit.Add(b, owner), true)
}

// holdAnswers makes sure the reader's connection has its heldAnswers
// before it adds a unit: once added, the unit may be voided (Voided) from
// another goroutine, which reads it.
func (c *conn) holdAnswers() {
	if c.held == nil {
		c.held = new(heldAnswers)
	}
}

// track records a unit owner's reader added, for it to be committed at
// the end of the read and, if it covers the next answer, for that answer
// to wait for it, unless it is voided first.
func (d *durable) track(owner *conn, ticket uint64, covers bool) {
	h := owner.held
	h.added = ticket
	if covers {
		h.last = ticket
		h.mu.Lock()
		if i := slices.Index(h.early, ticket); i >= 0 {
			h.early = slices.Delete(h.early, i, i+1)
		} else {
			h.pending = append(h.pending, ticket)
		}
		h.mu.Unlock()
	}
}

// stored is the form a message is kept in.
func (d *durable) stored(m *session.Message) *persistence.Message {
	pm := &persistence.Message{
		ID:      m.StoreID(&d.msgIDs),
		Topic:   m.Topic,
		Payload: m.Payload,
		QoS:     m.QoS,
		Retain:  m.Retain,
		Origin:  m.Origin,
	}
	if m.Properties != nil {
		pm.Properties = *m.Properties
	}
	pm.Expiry = m.Expiry
	return pm
}

// outboundOf is the stored form of a session entry.
func outboundOf(o session.Outbound, msgID uint64) persistence.Outbound {
	po := persistence.Outbound{Seq: o.Seq, MessageID: msgID, QoS: o.QoS, Retain: o.Retain, SubIDs: o.SubIDs, Released: o.Released}
	if o.Released {
		po.PacketID = session.PacketIDOf(o.Seq)
	}
	return po
}

// deliveredLocked writes an entry a stored session took (sent or
// queued); pm is the message's stored form when the caller has it. then,
// if not nil, is called once it is stored. The caller holds cl.mu.
func (d *durable) deliveredLocked(cl *client, o session.Outbound, pm *persistence.Message, owner *conn, then func()) {
	if pm == nil {
		pm = d.stored(o.Msg)
	}
	ops := [2]persistence.Op{
		{Kind: persistence.OpPutMessage, Message: pm}, // kept once: a message already stored stays as it is
		{Kind: persistence.OpPutOutbound, SessionID: cl.id, Outbound: outboundOf(o, pm.ID)},
	}
	b := persistence.Batch{Ops: ops[:]}
	if then == nil {
		d.add(&b, owner, true)
		return
	}
	if owner == nil {
		d.commit.AddThen(&b, nil, then)
		d.commit.Flush()
		return
	}
	owner.holdAnswers()
	d.track(owner, d.commit.AddThen(&b, owner, then), true)
}

// stableThen is what lets a held QoS 2 entry of cl go once it is stored
// (session.Target.Hold): it runs on the committer's goroutine.
func (s *Server) stableThen(cl *client, seq uint64) func() {
	return func() {
		cl.mu.Lock()
		cl.sess.Stable(seq)
		tc := cl.conn
		cl.mu.Unlock()
		if tc != nil {
			tc.pumpFrom(nil, nil)
		}
	}
}

// removedLocked deletes entry seq of a stored session: acknowledged,
// expired, discarded or handed to another session. The caller holds cl.mu.
func (d *durable) removedLocked(cl *client, seq uint64, owner *conn) {
	ops := [1]persistence.Op{{Kind: persistence.OpDeleteOutbound, SessionID: cl.id, Seq: seq}}
	d.add(&persistence.Batch{Ops: ops[:]}, owner, false)
}

// handedLocked records that an entry of cl went to another member of its
// share group. Unlike an acknowledgement it cancels nothing waiting: the
// publisher's answer still waits for the entry to be stored here, until
// the other member's copy is. The caller holds cl.mu.
func (d *durable) handedLocked(cl *client, seq uint64) {
	ops := [1]persistence.Op{{Kind: persistence.OpDeleteOutbound, SessionID: cl.id, Seq: seq, Handed: true}}
	d.add(&persistence.Batch{Ops: ops[:]}, nil, false)
}

// releasedLocked records that a stored session's QoS 2 entry got its
// PUBREC: after a restart its PUBREL is sent, not the PUBLISH, which the
// client would take for a new message. The caller holds cl.mu.
func (d *durable) releasedLocked(cl *client, o session.Outbound, owner *conn) {
	pm := d.stored(o.Msg)
	o.Released = true
	ops := [2]persistence.Op{
		// Put again in case it is not stored: the store keeps the first.
		{Kind: persistence.OpPutMessage, Message: pm},
		{Kind: persistence.OpPutOutbound, SessionID: cl.id, Outbound: outboundOf(o, pm.ID)},
	}
	d.add(&persistence.Batch{Ops: ops[:]}, owner, true)
}

// sessionLocked writes a stored session's record, as connection c (its
// latest) and expiry make it. The caller holds cl.mu.
func (d *durable) sessionLocked(cl *client, c *conn, expiry uint32, owner *conn) {
	d.oneLocked(persistence.Op{Kind: persistence.OpPutSession, SessionID: cl.id, Session: persistence.Session{
		ID: cl.id, Username: c.info.Username, Version: byte(c.version),
		Expiry: expiry, ExpireAt: cl.sess.ExpireAt(), Listener: c.info.Listener,
	}}, owner)
}

// oneLocked adds a unit of one operation on a stored session. The caller
// holds cl.mu.
func (d *durable) oneLocked(op persistence.Op, owner *conn) {
	ops := [1]persistence.Op{op}
	d.add(&persistence.Batch{Ops: ops[:]}, owner, true)
}

// heldAnswers are a connection's acknowledgements waiting for a commit.
// The tickets are the reader's own; the queue and the failures are shared
// with the committer's goroutine under mu. Allocated on the connection's
// first durable change, so that connections of clean sessions carry only
// the pointer.
type heldAnswers struct {
	added    uint64 // the ticket of the last unit the reader added
	last     uint64 // the ticket of the last unit an answer is to cover
	answered uint64 // the last ticket an answer covers
	waited   uint64 // the last ticket the reader waited for

	mu sync.Mutex
	// queue[head:] are the answers held, oldest first: released from the
	// head without moving the rest.
	queue    []heldAnswer
	head     int
	failures []storeFailure
	// pending are the tickets of the covering units neither applied nor
	// voided yet, in the order added; early are those voided before the
	// reader tracked them. applied is the ticket up to which every unit
	// is applied: a unit voided is told after its commit may have been
	// made (empty), and is then nothing to wait for.
	pending []uint64
	early   []uint64
	applied uint64
}

// pendingIn reports whether a covering unit in (from, to] still waits.
// The caller holds h.mu.
func (h *heldAnswers) pendingIn(from, to uint64) bool {
	for _, t := range h.pending {
		if t > from && t <= to {
			return true
		}
		if t > to {
			break
		}
	}
	return false
}

// heldAnswer is an answer that covers the units (from, to]; to is 0 for
// one held only to keep its place behind another. An acknowledgement
// without properties, the usual one, is held as its fields, not as a
// packet on the heap: p is then nil.
type heldAnswer struct {
	p        packets.Packet
	ack      packets.Type
	id       uint16
	code     packets.ReasonCode
	from, to uint64
}

// packet returns the answer as a packet.
func (e *heldAnswer) packet() packets.Packet {
	if e.p != nil {
		return e.p
	}
	a := packets.Ack{Type: e.ack, PacketID: e.id, ReasonCode: e.code}
	return a.Packet()
}

// appendTo appends the answer's frame for version v.
func (e *heldAnswer) appendTo(b []byte, v packets.Version) []byte {
	if e.p != nil {
		b, _ = e.p.Append(b, v)
		return b
	}
	a := packets.Ack{Type: e.ack, PacketID: e.id, ReasonCode: e.code}
	b, _ = a.Append(b, v)
	return b
}

// held reports how many answers are held. The caller holds h.mu.
func (h *heldAnswers) held() int { return len(h.queue) - h.head }

// push holds e behind the others. The caller holds h.mu.
func (h *heldAnswers) push(e heldAnswer) {
	if h.head > 0 && len(h.queue) == cap(h.queue) {
		n := copy(h.queue, h.queue[h.head:])
		clear(h.queue[n:])
		h.queue, h.head = h.queue[:n], 0
	}
	h.queue = append(h.queue, e)
}

type storeFailure struct {
	ticket uint64
	err    error
}

// StoreFailed is told by the Committer when a unit this connection's
// reader added failed; the answer covering it is changed when released.
func (c *conn) StoreFailed(ticket uint64, err error) {
	h := c.held
	h.mu.Lock()
	h.failures = append(h.failures, storeFailure{ticket, err})
	h.mu.Unlock()
}

// answer sends an acknowledgement, or holds it until the units it covers
// are committed, or until the acknowledgements held before it are sent.
func (c *conn) answer(p packets.Packet) { c.answerEither(p, nil) }

// answerAck is answer for an acknowledgement, which becomes a packet on
// the heap only when it carries properties and must wait: answering a
// QoS 1 PUBLISH allocates nothing.
func (c *conn) answerAck(a *packets.Ack) { c.answerEither(nil, a) }

// answerEither is answer of p, or else of a.
func (c *conn) answerEither(p packets.Packet, a *packets.Ack) {
	h := c.held
	if h == nil {
		c.sendEither(p, a)
		return
	}
	h.mu.Lock()
	queue, from, to := false, uint64(0), uint64(0)
	switch {
	case h.last > h.answered && (h.held() > 0 || h.pendingIn(h.answered, h.last)):
		queue, from, to = true, h.answered, h.last
		h.answered = h.last
	case h.last > h.answered: // its units were voided: nothing to wait for
		h.answered = h.last
	case h.held() > 0:
		queue = true
	}
	switch {
	case !queue:
		c.sendEither(p, a) // under mu: in order with a release's frames
	case p == nil && a.Properties.IsZero():
		h.push(heldAnswer{ack: a.Type, id: a.PacketID, code: a.ReasonCode, from: from, to: to})
	case p == nil:
		h.push(heldAnswer{p: a.Packet(), from: from, to: to})
	default:
		h.push(heldAnswer{p: p, from: from, to: to})
	}
	full := h.held() >= maxHeld
	h.mu.Unlock()
	// A message fanned out to many stored sessions adds an operation for
	// each: counted per answer, not per read, so that the messages of one
	// read cannot add millions.
	if !full && queue && c.srv.dur.commit.Waiting() > maxWaitingOps {
		full = true
		c.srv.stats.storeBackpressure.Add(1)
	}
	if full {
		c.commitHeld(true)
	}
}

// commitHeld asks for the commit of the units the reader added, at the
// end of a read, and releases the answers they cover once it is done;
// with wait, it waits for that.
func (c *conn) commitHeld(wait bool) {
	h := c.held
	if h == nil || h.added <= h.waited {
		return
	}
	t := h.added
	h.waited = t
	if !wait && c.srv.dur.commit.Waiting() > maxWaitingOps {
		wait = true
		c.srv.stats.storeBackpressure.Add(1)
	}
	if !wait {
		c.srv.dur.commit.Wait(t, func() { c.releaseHeld(t) })
		return
	}
	ch := make(chan struct{})
	c.srv.dur.commit.Wait(t, func() {
		c.releaseHeld(t)
		close(ch)
	})
	<-ch
}

// releaseHeld sends the answers whose units are committed, up to ticket
// t, and those held only behind them. An answer whose unit failed is
// changed: a 5.0 PUBACK or PUBREC says so with its reason code (0x97 for
// a full disk, 0x80 otherwise), a SUBACK refuses its filters with 0x80;
// anything else, and anything for 3.1.1, which has no way to say it,
// closes the connection, unacknowledged.
func (c *conn) releaseHeld(t uint64) {
	c.releaseWith(t, func(h *heldAnswers) {
		n := 0
		for n < len(h.pending) && h.pending[n] <= t {
			n++
		}
		h.pending = slices.Delete(h.pending, 0, n)
		h.applied = max(h.applied, t)
		h.early = slices.DeleteFunc(h.early, func(e uint64) bool { return e <= t })
	})
}

// Voided is told by the Committer when every operation of a unit this
// connection's reader added was cancelled before a commit took it (the
// subscribers acknowledged what it stored for them): the answers that
// wait only for it are sent at once.
func (c *conn) Voided(ticket uint64) {
	c.releaseWith(0, func(h *heldAnswers) {
		if i := slices.Index(h.pending, ticket); i >= 0 {
			h.pending = slices.Delete(h.pending, i, i+1)
		} else if ticket > h.applied {
			h.early = append(h.early, ticket)
		}
	})
}

// releaseWith updates the pending units (settle, under h.mu) and sends the
// answers at the head of the queue that no longer wait for any; t is the
// ticket up to which every unit is applied, whose failures are then
// forgotten.
func (c *conn) releaseWith(t uint64, settle func(h *heldAnswers)) {
	h := c.held
	var refusedQoS2 []uint16
	var fatal error
	h.mu.Lock()
	settle(h)
	start, n := h.head, h.head
	for n < len(h.queue) && (h.queue[n].to == 0 || !h.pendingIn(h.queue[n].from, h.queue[n].to)) {
		e := &h.queue[n]
		if err := h.failedIn(e.from, e.to); err != nil {
			var ok bool
			if ok, e.p = c.refuseStored(e.packet(), err); !ok {
				fatal = err
				break
			}
			c.srv.stats.storeRefused.Add(1)
			if rec, isRec := e.p.(*packets.Pubrec); isRec {
				refusedQoS2 = append(refusedQoS2, rec.PacketID)
			}
		}
		n++
	}
	if sent := h.queue[start:n]; len(sent) > 0 {
		c.enqueue(woken, func(b []byte) []byte {
			for i := range sent {
				b = sent[i].appendTo(b, c.version)
			}
			return b
		})
	}
	if fatal != nil {
		n = len(h.queue) // nothing after the one that failed is sent
	}
	clear(h.queue[start:n])
	if n == len(h.queue) {
		h.queue, n = h.queue[:0], 0
	}
	h.head = n
	kept := h.failures[:0]
	for _, f := range h.failures {
		if f.ticket > t {
			kept = append(kept, f)
		}
	}
	clear(h.failures[len(kept):])
	h.failures = kept
	h.mu.Unlock()
	if fatal != nil {
		c.srv.stats.storeRefused.Add(1)
		// Not on the committer's goroutine: telling a 5.0 client may wait
		// for its outbox to drain.
		c.srv.writers.Add(1)
		go func() {
			defer c.srv.writers.Done()
			c.sendDisconnectAsync(packets.UnspecifiedError)
			c.closeWith(closing(CloseStoreError, fmt.Errorf("not acknowledged: %w", fatal)))
		}()
		return
	}
	if len(refusedQoS2) > 0 {
		// Refused, the packet id is free again [MQTT-4.3.3-9]: the client
		// may use it for a new message.
		c.cl.mu.Lock()
		for _, id := range refusedQoS2 {
			c.cl.sess.Pubrel(id)
		}
		c.cl.mu.Unlock()
	}
}

// failedIn returns the error of a unit in (from, to], if one failed. The
// caller holds h.mu.
func (h *heldAnswers) failedIn(from, to uint64) error {
	for _, f := range h.failures {
		if f.ticket > from && f.ticket <= to {
			return f.err
		}
	}
	return nil
}

// refuseStored turns an answer whose unit failed into a refusal, when
// the protocol has one; ok is false when the connection must be closed
// instead.
func (c *conn) refuseStored(p packets.Packet, err error) (ok bool, refused packets.Packet) {
	code := packets.UnspecifiedError
	why := "the broker could not store it"
	if errors.Is(err, syscall.ENOSPC) {
		code, why = packets.QuotaExceeded, "the broker's disk is full"
	}
	switch p := p.(type) {
	case *packets.Puback:
		if c.version == packets.V5 {
			return true, &packets.Puback{PacketID: p.PacketID, ReasonCode: code, Properties: c.ackProblem(verdict{code, why})}
		}
	case *packets.Pubrec:
		if c.version == packets.V5 {
			return true, &packets.Pubrec{PacketID: p.PacketID, ReasonCode: code, Properties: c.ackProblem(verdict{code, why})}
		}
	case *packets.Suback:
		codes := make([]packets.ReasonCode, len(p.ReasonCodes))
		for i := range codes {
			codes[i] = packets.SubackFailure // 0x80 in every version
		}
		return true, &packets.Suback{PacketID: p.PacketID, ReasonCodes: codes}
	}
	return false, nil
}

// claimSession decides whether c may have the session its client id
// names: not another username's when other_user_session is refuse (ok
// false); a fresh one (fresh) for a clean start, or instead of another
// username's under replace. A persistent session that is not resumed has
// its record stored before the CONNACK, so that a crash just after it
// cannot leave the client counting on a session the broker forgot; it is
// added under the registry lock with the decision, so that it reaches the
// store before anything a later claimant of the id (which attach orders
// under the same lock) stores, and a fresh one deletes what the id held
// in the same transaction, so that no crash leaves the newcomer the old
// session's contents.
func (s *Server) claimSession(c *conn, cleanStart bool) (fresh, ok bool) {
	id := c.info.ClientID
	fresh = cleanStart
	s.mu.Lock()
	old := s.clients[id]
	if old != nil && old.owner() != c.info.Username {
		if s.opts.Auth.OtherUserSession != OtherUserReplace {
			s.mu.Unlock()
			return false, false
		}
		fresh = true // never the other user's session
	}
	if s.dur == nil || c.expiry == 0 {
		s.mu.Unlock()
		return fresh, true
	}
	if old != nil && !fresh {
		old.mu.Lock()
		resumed := old.stored
		old.mu.Unlock()
		if resumed {
			s.mu.Unlock()
			return fresh, true
		}
	}
	var ops [2]persistence.Op
	b := persistence.Batch{Ops: ops[:0]}
	if old != nil {
		b.DeleteSession(id)
	}
	b.PutSession(persistence.Session{ID: id, Username: c.info.Username, Version: byte(c.version), Expiry: c.expiry,
		Listener: c.info.Listener})
	t := s.dur.commit.Add(&b, nil)
	s.mu.Unlock()
	done := make(chan struct{})
	s.dur.commit.Wait(t, func() { close(done) })
	<-done
	return fresh, true
}

// forgetNewSession takes out the record claimSession stored for a
// session the broker then had no room for (attach refuses only when there
// was no session of that id).
func (s *Server) forgetNewSession(c *conn) {
	if s.dur == nil || c.expiry == 0 {
		return
	}
	var ops [1]persistence.Op
	b := persistence.Batch{Ops: ops[:0]}
	b.DeleteSession(c.info.ClientID)
	s.dur.add(&b, nil, false)
}

// storeSessionLocked keeps a persistent session in the store as its
// client connects (the record says it is online: no expiry running), or
// takes out one that now ends with its connection. willDropped says a
// will that waited for its delay is dropped: the client is back in time.
// The caller holds cl.mu.
func (s *Server) storeSessionLocked(c *conn, cl *client, persistent, willDropped bool) {
	if s.dur == nil {
		return
	}
	if !persistent {
		if cl.stored {
			cl.stored = false
			s.dur.oneLocked(persistence.Op{Kind: persistence.OpDeleteSession, SessionID: cl.id}, nil)
		}
		return
	}
	if willDropped && cl.stored {
		s.dur.oneLocked(persistence.Op{Kind: persistence.OpDeleteWill, SessionID: cl.id}, nil)
	}
	cl.stored = true
	s.dur.sessionLocked(cl, c, c.expiry, nil)
}

package mqttd

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"

	"mqttd/packets"
	"mqttd/persistence"
)

// Answers held until their commit: the acknowledgements (PUBACK, PUBREC,
// PUBREL, PUBCOMP, SUBACK, UNSUBACK) of what a reader added to the store
// wait until it is committed, and the connection's later acknowledgements
// wait behind them ([MQTT-4.6.0-2]); a failed unit turns its answer into
// a refusal.

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

// holdAnswers makes sure the reader's connection has its heldAnswers
// before it adds a unit: once added, the unit may be voided (Voided) from
// another goroutine, which reads it.
func (c *conn) holdAnswers() {
	if c.held == nil {
		c.held = new(heldAnswers)
	}
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
	// remote are the tickets of messages sent to other nodes that have
	// not confirmed them yet (cluster_confirm.go), in the order sent:
	// increasing, as pending.
	remote []uint64
	// freeing is set while a refused PUBREC, at the head of the queue,
	// waits for its packet id's deletion to be stored (freeRefused).
	freeing bool
}

// pendingIn reports whether a covering unit in (from, to] still waits.
// The caller holds h.mu.
func (h *heldAnswers) pendingIn(from, to uint64) bool {
	for _, t := range h.remote {
		if t > from && t <= to {
			return true
		}
		if t > to {
			break
		}
	}
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

// answerSuback answers a SUBSCRIBE with codes. Unless it must wait behind
// held answers, the SUBACK is encoded into the outbox without a packet on
// the heap: one of 320 bytes was garbage at every connect of a
// subscribing client, left as holes among the connections' live objects.
func (c *conn) answerSuback(id uint16, codes []packets.ReasonCode) {
	if c.held == nil {
		c.enqueue(deferred, func(b []byte) []byte {
			b, err := packets.AppendSuback(b, c.version, id, codes)
			if err != nil {
				c.fields(c.srv.log.Error()).Err(err).Msg("cannot encode SUBACK")
			}
			return b
		})
		return
	}
	c.answer(&packets.Suback{PacketID: id, ReasonCodes: codes})
}

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
	var refusedQoS2, unstored []uint16
	var fatal error
	h.mu.Lock()
	settle(h)
	start, n := h.head, h.head
	for !h.freeing && n < len(h.queue) && (h.queue[n].to == 0 || !h.pendingIn(h.queue[n].from, h.queue[n].to)) {
		e := &h.queue[n]
		if err := h.failedIn(e.from, e.to); err != nil {
			ok, refused := c.refuseStored(e.packet(), err)
			if !ok {
				fatal = err
				unstored = h.unstoredQoS2(n)
				break
			}
			e.p = refused
			c.srv.stats.storeRefused.Add(1)
			if rec, isRec := e.p.(*packets.Pubrec); isRec {
				// Held, now covering nothing, until the deletion of its
				// id is stored: a node that crashed before that, the
				// refusal sent, would read the id back taken, and take
				// the client's next message with it for this one.
				refusedQoS2 = append(refusedQoS2, rec.PacketID)
				e.from, e.to = 0, 0
				h.freeing = true
				break
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
		if len(unstored) > 0 {
			c.freeRefused(unstored, false)
		}
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
		c.freeRefused(refusedQoS2, true)
	}
}

// freeRefused lets go of the packet ids of refused QoS 2 messages: free
// again [MQTT-4.3.3-9], the client may use them for new messages, which
// a stored id would make taken for the refused ones sent again once the
// session is read back. With held, the refusal waits at the head of the
// answers (heldAnswers.freeing) and is sent once the deletions are
// stored, or have failed. Apart, and not inlined, so that the operation
// it stores takes room on the stack only for the call: in releaseWith's
// frame it made every idle TLS and WebSocket reader's stack 8 KiB
// (TestReaderStacksStay4KiB).
//
//go:noinline
func (c *conn) freeRefused(ids []uint16, held bool) {
	var then func()
	if held {
		then = func() { c.releaseWith(0, func(h *heldAnswers) { h.freeing = false }) }
	}
	c.cl.mu.Lock()
	n := 0
	for _, id := range ids {
		if c.cl.sess.Pubrel(id) && c.cl.stored {
			ids[n] = id
			n++
		}
	}
	for i, id := range ids[:n] {
		ops := [1]persistence.Op{persistence.DeleteAwaitingRel(c.cl.id, id)}
		b := persistence.Batch{Ops: ops[:]}
		if i == n-1 && then != nil {
			c.srv.dur.commit.AddThen(&b, nil, then)
			then = nil
		} else {
			c.srv.dur.commit.Add(&b, nil)
		}
	}
	c.cl.mu.Unlock()
	c.srv.dur.commit.Flush()
	if then != nil { // nothing to delete
		then()
	}
}

// unstoredQoS2 returns the packet ids of the PUBRECs from the queue's
// entry n on whose units failed to be stored here (not those only
// another node did not confirm: their Forward stays, for the DUP to be
// routed again under its stamp). The connection closes over the first,
// a 3.1.1 client's refusal, and these ids are let go of, so that the
// client's DUP of each is routed as the new message it is, not taken for
// one the broker holds: its deliveries here failed with the id (and
// left their sessions, failedDelivery). The caller holds h.mu.
//
//go:noinline
func (h *heldAnswers) unstoredQoS2(n int) []uint16 {
	var ids []uint16
	for i := n; i < len(h.queue); i++ {
		e := &h.queue[i]
		rec, ok := e.packet().(*packets.Pubrec)
		if !ok {
			continue
		}
		for _, f := range h.failures {
			if f.ticket > e.from && f.ticket <= e.to && !errors.Is(f.err, errNotConfirmed) {
				ids = append(ids, rec.PacketID)
				break
			}
		}
	}
	return ids
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

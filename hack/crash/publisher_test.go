package crash

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"mqttd/packets"
)

// errFinished ends a publisher that was told to finish and has nothing in
// flight any more.
var errFinished = errors.New("finished")

// pubMsg is one message a publisher has sent and not yet seen completed.
type pubMsg struct {
	seq int
	id  uint16
	rec bool // QoS 2: PUBREC received, PUBREL is what to send again
}

// publisher sends numbered messages at one QoS to one topic, as a
// persistent client does: its in-flight messages live in the client, not
// in the connection, so after a broker restart it reconnects with clean
// session 0 and sends them again, a PUBLISH with DUP for those not yet
// received (QoS 1, and QoS 2 without PUBREC) and a PUBREL for QoS 2
// messages the broker had answered with PUBREC [MQTT-4.4.0-1].
//
// It keeps its in-flight messages even when the broker answers with
// session present 0 (a 5.0 client would drop them [MQTT-3.2.2-4]): a
// forgetful broker then acknowledges what it has lost, and the loss shows
// up in the test as an acknowledged message that never arrives.
//
// Everything but limit and more belongs to the publisher's goroutine
// until done is closed.
type publisher struct {
	peer
	qos    byte
	topic  string
	window int
	limit  atomic.Int64  // messages it may send in all, raised by grant
	more   chan struct{} // wakes it after a grant
	finish chan struct{} // closed: send nothing new, complete what is in flight
	done   chan struct{} // closed when run returns

	sent      int          // messages 0..sent-1 were sent at least once
	acked     map[int]bool // PUBACK (QoS 1) or PUBCOMP (QoS 2) received
	recs      int          // QoS 2: PUBRECs received for messages not yet completed
	inflight  map[uint16]*pubMsg
	nextID    uint16
	protoErrs []string
	err       error
	// history tells, per QoS 2 message, what happened to it on the wire,
	// for the message of a test that finds it lost or doubled.
	history map[int][]string
}

func newPublisher(p peer, qos byte, window int) *publisher {
	return &publisher{
		peer: p, qos: qos, topic: "crash/" + p.id, window: window,
		more: make(chan struct{}, 1), finish: make(chan struct{}), done: make(chan struct{}),
		acked: map[int]bool{}, inflight: map[uint16]*pubMsg{}, history: map[int][]string{},
	}
}

// grant lets the publisher send n more messages.
func (p *publisher) grant(n int) {
	p.limit.Add(int64(n))
	select {
	case p.more <- struct{}{}:
	default:
	}
}

// payload is what message seq of publisher id carries: enough to know,
// on receipt, which message it is.
func payload(id string, seq int) string { return id + "/" + strconv.Itoa(seq) }

// parsePayload reverses payload.
func parsePayload(s string) (id string, seq int, ok bool) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return "", 0, false
	}
	seq, err := strconv.Atoi(s[i+1:])
	return s[:i], seq, err == nil && seq >= 0
}

// run publishes until finished and drained, aborted, or failed.
func (p *publisher) run() {
	defer close(p.done)
	for {
		c, _, err := p.connect()
		if err != nil {
			if !errors.Is(err, errAborted) {
				p.err = err
			}
			return
		}
		err = p.session(c)
		switch {
		case errors.Is(err, errFinished), errors.Is(err, errAborted):
			return
		case err != nil && !isConnLoss(err):
			p.err = err
			return
		}
		// The connection ended (the broker was killed): reconnect.
	}
}

// errConnLost marks a connection that ended under the client.
var errConnLost = errors.New("connection lost")

func isConnLoss(err error) bool { return errors.Is(err, errConnLost) }

// session serves one connection: it first resends what is in flight, in
// the order it was first sent, then publishes new messages as the window
// and the limit allow.
func (p *publisher) session(c *conn) error {
	defer c.close(false)
	pending := make([]*pubMsg, 0, len(p.inflight))
	for _, m := range p.inflight {
		pending = append(pending, m)
	}
	slices.SortFunc(pending, func(a, b *pubMsg) int { return a.seq - b.seq })
	for _, m := range pending {
		if err := p.resend(c, m); err != nil {
			return fmt.Errorf("%w: %v", errConnLost, err)
		}
	}
	// A publisher told to finish before this connection sends nothing new
	// on it.
	finish, finishing := p.finish, false
	select {
	case <-finish:
		finish, finishing = nil, true
	default:
	}
	deadline := time.NewTimer(time.Until(p.deadline))
	defer deadline.Stop()
	for {
		if finishing && len(p.inflight) == 0 {
			c.close(true)
			return errFinished
		}
		for !finishing && len(p.inflight) < p.window && int64(p.sent) < p.limit.Load() {
			m := &pubMsg{seq: p.sent, id: p.freeID()}
			p.inflight[m.id] = m
			p.sent++
			p.note(m, "id %d sent", m.id)
			if err := c.send(p.publish(m, false)); err != nil {
				return fmt.Errorf("%w: %v", errConnLost, err)
			}
		}
		select {
		case pk, ok := <-c.in:
			if !ok {
				return fmt.Errorf("%w: %v", errConnLost, c.err)
			}
			if err := p.handle(c, pk); err != nil {
				return fmt.Errorf("%w: %v", errConnLost, err)
			}
		case <-p.more:
		case <-finish:
			finishing, finish = true, nil
		case <-p.abort:
			return errAborted
		case <-deadline.C:
			return fmt.Errorf("%s: still %d messages in flight at the deadline", p.id, len(p.inflight))
		}
	}
}

// resend sends one in-flight message again after a reconnect.
func (p *publisher) resend(c *conn, m *pubMsg) error {
	if m.rec {
		p.note(m, "PUBREL resent")
		return c.send(&packets.Pubrel{PacketID: m.id})
	}
	p.note(m, "DUP resent")
	return c.send(p.publish(m, true))
}

// note adds one event to a QoS 2 message's history, naming the connection.
func (p *publisher) note(m *pubMsg, format string, args ...any) {
	if p.qos == 2 {
		p.history[m.seq] = append(p.history[m.seq], fmt.Sprintf("conn %d: ", p.connects)+fmt.Sprintf(format, args...))
	}
}

// story is what happened to QoS 2 message seq, oldest first.
func (p *publisher) story(seq int) string { return strings.Join(p.history[seq], "; ") }

func (p *publisher) publish(m *pubMsg, dup bool) *packets.Publish {
	return &packets.Publish{Dup: dup, QoS: p.qos, Topic: p.topic, PacketID: m.id, Payload: []byte(payload(p.id, m.seq))}
}

// freeID returns a packet id not used by any message in flight. The loop
// ends within window+1 steps: at most window ids are in flight.
func (p *publisher) freeID() uint16 {
	for {
		p.nextID++
		if p.nextID == 0 {
			p.nextID = 1
		}
		if p.inflight[p.nextID] == nil {
			return p.nextID
		}
	}
}

// handle takes one packet from the broker; an error is a write that failed.
func (p *publisher) handle(c *conn, pk packets.Packet) error {
	id := ackID(pk)
	m := p.inflight[id]
	switch {
	case pk.Type() == packets.TypePuback && p.qos == 1 && m != nil:
		p.complete(m)
	case pk.Type() == packets.TypePubrec && p.qos == 2 && m != nil:
		if !m.rec {
			m.rec = true
			p.recs++
			p.note(m, "PUBREC")
		}
		return c.send(&packets.Pubrel{PacketID: id})
	case pk.Type() == packets.TypePubcomp && p.qos == 2 && m != nil && m.rec:
		p.note(m, "PUBCOMP")
		p.recs--
		p.complete(m)
	default:
		p.protoErr("unexpected %s (packet id %d, in flight: %v)", pk.Type(), id, m != nil)
	}
	return nil
}

func (p *publisher) complete(m *pubMsg) {
	p.acked[m.seq] = true
	delete(p.inflight, m.id)
}

// protoErr records a protocol violation by the broker, the first 20.
func (p *publisher) protoErr(format string, args ...any) {
	if len(p.protoErrs) < 20 {
		p.protoErrs = append(p.protoErrs, p.id+": "+fmt.Sprintf(format, args...))
	}
}

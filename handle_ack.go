package mqttd

import (
	"fmt"

	"mqttd/packets"
	"mqttd/persistence"
)

// The acknowledgements a client sends: PUBACK and PUBCOMP complete a
// message the broker sent, PUBREC moves it to PUBREL, and PUBREL
// releases a QoS 2 message the client published [MQTT-4.3].

// handleAck acts on a PUBACK, PUBREC, PUBREL or PUBCOMP.
func (c *conn) handleAck(a *packets.Ack) error {
	switch a.Type {
	case packets.TypePubrec:
		return c.handlePubrec(a)
	case packets.TypePubrel:
		c.handlePubrel(a)
		return nil
	}
	return c.ack(a.Type, a.PacketID)
}

func (c *conn) handlePubrec(p *packets.Ack) error {
	cl := c.cl
	cl.mu.Lock()
	o, ok := cl.sess.Pubrec(p.PacketID, p.ReasonCode >= 0x80)
	if ok && cl.stored {
		switch {
		case o.Released && o.Msg != nil:
			// The PUBREL waits for this: sent before it is stored, a crash
			// would have the PUBLISH sent again, a new message to a client
			// that completed the first.
			c.srv.dur.releasedLocked(cl, o, c)
		case !o.Released:
			c.srv.dur.removedLocked(cl, o.Seq, c)
		}
		// Released before (a PUBREC again after a reconnect): stored so.
	}
	cl.mu.Unlock()
	release := ok && o.Released
	if !ok {
		if err := c.wrongAck(p.Type, p.PacketID); err != nil {
			return err
		}
	}
	if release {
		c.answerAck(&packets.Ack{Type: packets.TypePubrel, PacketID: p.PacketID})
	} else if !ok && p.ReasonCode < 0x80 && c.version == packets.V5 {
		c.answerAck(&packets.Ack{Type: packets.TypePubrel, PacketID: p.PacketID, ReasonCode: packets.PacketIDNotFound})
	}
	c.pumpDue = true
	return nil
}

// handlePubrel always answers with PUBCOMP; for an unknown id 5.0 says
// so with 0x92 (§4.3.3).
func (c *conn) handlePubrel(p *packets.Ack) {
	cl := c.cl
	cl.mu.Lock()
	found := c.pubrelLocked(p.PacketID)
	cl.mu.Unlock()
	code := packets.Success
	if !found && c.version == packets.V5 {
		code = packets.PacketIDNotFound
	}
	c.answerAck(&packets.Ack{Type: packets.TypePubcomp, PacketID: p.PacketID, ReasonCode: code})
}

// pubrelLocked releases an inbound QoS 2 packet id, and reports whether
// it was awaiting release. The caller holds the client's lock.
func (c *conn) pubrelLocked(id uint16) bool {
	cl := c.cl
	if !cl.sess.Pubrel(id) {
		return false
	}
	if cl.stored {
		// The PUBCOMP waits for this: sent before it is stored, a crash
		// would keep the id, and the client's next message under it
		// would be taken for this one again and dropped.
		c.srv.dur.oneLocked(persistence.DeleteAwaitingRel(cl.id, id), c)
	}
	return true
}

// ack applies a PUBACK or PUBCOMP to the session and refills the window.
func (c *conn) ack(t packets.Type, id uint16) error {
	c.cl.mu.Lock()
	ok := c.completeLocked(t, id)
	c.cl.mu.Unlock()
	if !ok {
		if err := c.wrongAck(t, id); err != nil {
			return err
		}
		c.fields(c.srv.log.Debug()).Stringer("type", t).Uint16("packet_id", id).Msg("acknowledgement for a packet id not in flight ignored")
		return nil
	}
	c.pumpDue = true
	return nil
}

// completeLocked completes the message in flight a PUBACK (t) or PUBCOMP
// acknowledges, under the client's lock, and has the store forget it; it
// reports false, changing nothing, when id is not such a message.
func (c *conn) completeLocked(t packets.Type, id uint16) bool {
	cl := c.cl
	var seq uint64
	var ok bool
	if t == packets.TypePuback {
		seq, ok = cl.sess.Puback(id)
	} else {
		seq, ok = cl.sess.Pubcomp(id)
	}
	if ok && cl.stored {
		c.srv.dur.removedLocked(cl, seq, c)
	}
	if ok {
		if b := cl.bridge.Load(); b != nil {
			b.stats.forwardedOut.Add(1)
		}
	}
	return ok
}

// wrongAck is a protocol error for an acknowledgement of the wrong kind
// for the message in flight under id: PUBACK for QoS 2, PUBREC for QoS 1,
// PUBCOMP for QoS 1 or before PUBREC (§4.3). One for an id not in flight
// is no error: it may be late, from before a reconnect. Asked only of an
// acknowledgement that completed nothing, so the common path takes the
// session lock once.
func (c *conn) wrongAck(t packets.Type, id uint16) error {
	cl := c.cl
	cl.mu.Lock()
	qos, released, ok := cl.sess.InFlight(id)
	cl.mu.Unlock()
	if !ok {
		return nil
	}
	switch {
	case t == packets.TypePuback && qos == 2, t == packets.TypePubrec && qos == 1,
		t == packets.TypePubcomp && (qos == 1 || !released):
		return c.protocolError("§4.3", fmt.Sprintf("%s for packet id %d, a QoS %d message in flight (released %v)", t, id, qos, released))
	}
	return nil
}

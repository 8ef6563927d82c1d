package mqttd

import (
	"errors"
	"time"

	"mqttd/packets"
	"mqttd/session"
)

// send queues a packet the reader answers with (CONNACK, PUBACK, SUBACK,
// ...). It is not bounded by the outbox limit, since dropping an answer
// would break the protocol, and it does not wake a writer: the reader
// flushes once its buffered input is handled.
func (c *conn) send(p packets.Packet) {
	b, ok := c.out.begin(false)
	if !ok {
		return
	}
	b, err := p.Append(b, c.version)
	if err != nil {
		c.fields(c.srv.log.Error()).Err(err).Stringer("type", p.Type()).Msg("cannot encode packet")
	}
	c.out.end(b, false)
}

// sendNow queues p and writes everything queued from the reader goroutine
// itself; used right before the reader closes the connection.
func (c *conn) sendNow(p packets.Packet) {
	c.send(p)
	c.flushDeferred()
}

// flushDeferred writes the frames the reader queued without a wake, on
// the reader's own goroutine, unless a writer is already running.
func (c *conn) flushDeferred() {
	if c.out.claimDeferred() {
		c.writeLoop()
	}
}

// wake starts a writer goroutine for frames queued by another goroutine.
func (c *conn) wake(start bool) {
	if start {
		go c.writeLoop()
	}
}

// writeLoop is the connection's writer while it holds the outbox's writing
// role: it writes everything pending, one write per batch, then refills
// the outbox from the session queue, until nothing is left.
func (c *conn) writeLoop() { c.writeWithin(c.srv.opts.Limits.WriteTimeout) }

// writeWithin is writeLoop with each write bounded by timeout.
func (c *conn) writeWithin(timeout time.Duration) {
	for {
		f, ok := c.out.take()
		if !ok {
			return
		}
		c.nc.SetWriteDeadline(time.Now().Add(timeout))
		n, err := c.nc.Write(f.b)
		c.out.written(f)
		c.srv.metrics.bytesSent.Add(float64(n))
		if err != nil {
			c.closeWith(writeError(err))
			continue
		}
		c.pump()
	}
}

var errSlowConsumer = errors.New("client did not read for the write timeout: slow consumer")

func writeError(err error) error {
	if isTimeout(err) {
		return errSlowConsumer
	}
	return err
}

// pump moves queued messages into the outbox of the client's current
// connection while it has room and the session's window allows: after a
// write drained an outbox, and after an acknowledgement freed the window.
// The acknowledgement may come late on a connection already taken over;
// the window it freed is then filled on the new one.
func (c *conn) pump() {
	cl := c.cl
	if cl == nil {
		return
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	target := cl.conn
	if target == nil || cl.sess.Queued() == 0 {
		return
	}
	now := time.Now()
	for target.out.room() {
		o, ok, expired := cl.sess.Next(now)
		if expired > 0 {
			c.srv.metrics.droppedExpired.Add(float64(expired))
		}
		if !ok {
			return
		}
		// Frames for this connection wait for its own flush; another
		// connection's writer is woken.
		target.writeOutboundLocked(o, target != c)
	}
}

// writeOutboundLocked encodes one session entry (a PUBLISH, or a PUBREL
// for a released QoS 2 message) into the outbox. The caller holds the
// client's lock, so entries reach the wire in session order.
func (c *conn) writeOutboundLocked(o session.Outbound, wake bool) {
	b, ok := c.out.begin(false)
	if !ok {
		return
	}
	if o.Released {
		b, _ = (&packets.Pubrel{PacketID: o.PacketID}).Append(b, c.version)
	} else {
		b = c.appendPublish(b, o)
		c.srv.metrics.messagesSent.Inc()
	}
	c.wake(c.out.end(b, wake))
}

// appendPublish encodes a delivery for this connection's version.
func (c *conn) appendPublish(b []byte, o session.Outbound) []byte {
	p := packets.Publish{
		Dup:      o.Dup,
		QoS:      o.QoS,
		Retain:   o.Retain,
		Topic:    o.Msg.Topic,
		PacketID: o.PacketID,
		Payload:  o.Msg.Payload,
	}
	if c.version == packets.V5 {
		p.Properties = forwardProperties(o.Msg, o.SubIDs, time.Now())
	}
	b, err := p.Append(b, c.version)
	if err != nil {
		c.fields(c.srv.log.Error()).Err(err).Msg("cannot encode PUBLISH")
	}
	return b
}

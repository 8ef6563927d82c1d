package crash

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"time"

	"mqttd/packets"
)

// ioTimeout bounds every single network operation of the test clients: a
// broker that stops answering shows up as an error, never as a hung test.
const ioTimeout = 5 * time.Second

// conn is one MQTT connection of a test client. A reader goroutine decodes
// what the broker sends into in, which is closed when the connection ends
// (err then says why); only the owning client goroutine writes.
type conn struct {
	nc  net.Conn
	v   packets.Version
	in  chan packets.Packet
	err error // set before in is closed
	buf []byte
}

// dial connects to addr and sends CONNECT; it returns once the CONNACK
// accepted the connection, with the CONNACK's session present flag.
func dial(addr string, v packets.Version, c *packets.Connect) (*conn, bool, error) {
	nc, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		return nil, false, err
	}
	return connectOver(nc, v, c)
}

// refusedError is a CONNACK that refused the connection.
type refusedError struct{ code byte }

func (e *refusedError) Error() string { return fmt.Sprintf("CONNACK refused: code 0x%02x", e.code) }

// connectOver is dial on an open connection nc, which it closes on error.
func connectOver(nc net.Conn, v packets.Version, c *packets.Connect) (*conn, bool, error) {
	cn := &conn{nc: nc, v: v, in: make(chan packets.Packet, 256)}
	if err := cn.send(c); err != nil {
		nc.Close()
		return nil, false, err
	}
	br := bufio.NewReader(nc)
	nc.SetReadDeadline(time.Now().Add(ioTimeout))
	p, err := packets.ReadPacket(br, v, 0)
	if err != nil {
		nc.Close()
		return nil, false, fmt.Errorf("reading CONNACK: %w", err)
	}
	ack, ok := p.(*packets.Connack)
	if !ok {
		nc.Close()
		return nil, false, fmt.Errorf("first packet from the broker is %s, not CONNACK", p.Type())
	}
	if ack.ReasonCode != 0 {
		nc.Close()
		return nil, false, &refusedError{byte(ack.ReasonCode)}
	}
	// The clients idle with keepalive 0, so reads wait as long as needed;
	// the tests' own deadlines bound them.
	nc.SetReadDeadline(time.Time{})
	go cn.read(br)
	return cn, ack.SessionPresent, nil
}

// read decodes packets into c.in until the connection ends.
func (c *conn) read(br *bufio.Reader) {
	defer close(c.in)
	for {
		p, err := packets.ReadPacket(br, c.v, 0)
		if err != nil {
			c.err = err
			return
		}
		c.in <- p
	}
}

// send encodes p and writes it, bounded by ioTimeout.
func (c *conn) send(p packets.Packet) error {
	var err error
	c.buf, err = p.Append(c.buf[:0], c.v)
	if err != nil {
		return err
	}
	c.nc.SetWriteDeadline(time.Now().Add(ioTimeout))
	_, err = c.nc.Write(c.buf)
	return err
}

// close ends the connection, with a DISCONNECT first when polite (a
// DISCONNECT tells the broker to drop the will; it keeps the session).
func (c *conn) close(polite bool) {
	if polite {
		c.send(&packets.Disconnect{})
	}
	c.nc.Close()
	for range c.in {
		// Drain so that the reader goroutine can finish.
	}
}

// next returns the next packet from the broker within timeout.
func (c *conn) next(timeout time.Duration) (packets.Packet, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case p, ok := <-c.in:
		if !ok {
			return nil, fmt.Errorf("connection ended: %w", c.err)
		}
		return p, nil
	case <-t.C:
		return nil, errors.New("no packet from the broker within " + timeout.String())
	}
}

// connectPacket is a CONNECT for clientID; clean is Clean Session (3.1.1)
// or Clean Start (5.0), and a 5.0 session that is not clean is kept for a
// day, as a 3.1.1 one is by default.
func connectPacket(v packets.Version, clientID string, clean bool) *packets.Connect {
	c := &packets.Connect{ClientID: clientID, CleanStart: clean}
	if v == packets.V5 && !clean {
		c.Properties.SessionExpiry = 86400
		c.Properties.Set(packets.PropSessionExpiry)
	}
	return c
}

// subscribe sends one SUBSCRIBE and waits for its SUBACK, answering
// nothing else: it is for clients with no message traffic yet.
func (c *conn) subscribe(id uint16, filter string, qos byte) error {
	err := c.send(&packets.Subscribe{PacketID: id, Subscriptions: []packets.Subscription{{Filter: filter, Options: packets.SubOptions{QoS: qos}}}})
	if err != nil {
		return err
	}
	p, err := c.next(ioTimeout)
	if err != nil {
		return err
	}
	ack, ok := p.(*packets.Suback)
	if !ok || ack.PacketID != id || len(ack.ReasonCodes) != 1 || ack.ReasonCodes[0] > 2 {
		return fmt.Errorf("SUBSCRIBE %q: answer %#v", filter, p)
	}
	return nil
}

// publishSync publishes one message and waits for the end of its flow
// (PUBACK, or PUBREC then PUBCOMP); it is for clients that receive
// nothing else meanwhile.
func (c *conn) publishSync(p *packets.Publish) error {
	if err := c.send(p); err != nil || p.QoS == 0 {
		return err
	}
	want := packets.TypePuback
	if p.QoS == 2 {
		want = packets.TypePubrec
	}
	for {
		got, err := c.next(ioTimeout)
		if err != nil {
			return fmt.Errorf("PUBLISH %s: %w", p.Topic, err)
		}
		if got.Type() != want || ackID(got) != p.PacketID {
			return fmt.Errorf("PUBLISH %s id %d: got %s, want %s", p.Topic, p.PacketID, got.Type(), want)
		}
		if want != packets.TypePubrec {
			return nil
		}
		if err := c.send(&packets.Pubrel{PacketID: p.PacketID}); err != nil {
			return err
		}
		want = packets.TypePubcomp
	}
}

// ackID returns the packet id of an acknowledgement, 0 for other packets.
func ackID(p packets.Packet) uint16 {
	switch a := p.(type) {
	case *packets.Puback:
		return a.PacketID
	case *packets.Pubrec:
		return a.PacketID
	case *packets.Pubrel:
		return a.PacketID
	case *packets.Pubcomp:
		return a.PacketID
	}
	return 0
}

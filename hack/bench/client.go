package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// client is one MQTT connection: a frame reader and a buffered writer over
// the socket, each used by at most one goroutine at a time.
type client struct {
	conn net.Conn
	fr   *frameReader
	w    *bufio.Writer
	// sessionPresent is the CONNACK's flag: the broker had kept a session.
	sessionPresent bool
}

// dialOptions says how to open a client connection.
type dialOptions struct {
	addr      string
	transport transport
	local     net.IP // source address; nil lets the kernel choose
	clientID  string
	keepalive uint16
	// persistent keeps the session (clean session 0).
	persistent bool
	bufSize    int
	deadline   time.Time // bounds the dial and, after the handshake, every read and write
}

// dial connects, sends CONNECT and waits for a successful CONNACK.
func dial(o dialOptions) (*client, error) {
	d := net.Dialer{Deadline: o.deadline}
	if o.local != nil {
		d.LocalAddr = &net.TCPAddr{IP: o.local}
	}
	conn, err := d.Dial("tcp", o.addr)
	if err != nil {
		return nil, err
	}
	if o.transport.poll {
		pc, err := polling(conn)
		if err != nil {
			conn.Close()
			return nil, err
		}
		conn = pc
	}
	if conn, err = o.transport.open(conn, o.addr, o.deadline); err != nil {
		return nil, err
	}
	c := &client{
		conn: conn,
		fr:   newFrameReader(conn, o.bufSize),
		w:    bufio.NewWriterSize(conn, o.bufSize),
	}
	if err := conn.SetDeadline(o.deadline); err != nil {
		conn.Close()
		return nil, err
	}
	if err := c.connect(o.clientID, o.keepalive, o.persistent); err != nil {
		conn.Close()
		return nil, fmt.Errorf("client %s: %w", o.clientID, err)
	}
	return c, nil
}

func (c *client) connect(clientID string, keepalive uint16, persistent bool) error {
	if _, err := c.w.Write(appendConnect(c.w.AvailableBuffer(), clientID, keepalive, persistent)); err != nil {
		return err
	}
	if err := c.w.Flush(); err != nil {
		return err
	}
	fr, err := c.fr.next()
	if err != nil {
		return fmt.Errorf("waiting for CONNACK: %w", err)
	}
	if fr.typ != typeConnack || len(fr.body) != 2 {
		return fmt.Errorf("expected CONNACK, got packet type %d", fr.typ)
	}
	if fr.body[1] != 0 {
		return fmt.Errorf("CONNACK refused with return code %d", fr.body[1])
	}
	c.sessionPresent = fr.body[0]&1 == 1
	return nil
}

// subscribe subscribes to one filter and waits for its SUBACK; it must be
// called before anything can be published to the client.
func (c *client) subscribe(filter string, qos byte) error {
	const id = 1
	if _, err := c.w.Write(appendSubscribe(c.w.AvailableBuffer(), id, filter, qos)); err != nil {
		return err
	}
	if err := c.w.Flush(); err != nil {
		return err
	}
	fr, err := c.fr.next()
	if err != nil {
		return fmt.Errorf("waiting for SUBACK: %w", err)
	}
	if fr.typ != typeSuback || len(fr.body) != 3 {
		return fmt.Errorf("expected SUBACK, got packet type %d", fr.typ)
	}
	if got, _ := packetID(fr); got != id {
		return fmt.Errorf("SUBACK for packet id %d, sent %d", got, id)
	}
	if fr.body[2] != qos {
		return fmt.Errorf("subscription to %q granted return code %#x, asked QoS %d", filter, fr.body[2], qos)
	}
	return nil
}

// disconnect sends DISCONNECT (best effort: the broker may already be gone)
// and closes the socket.
func (c *client) disconnect() {
	_ = c.conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.conn.Write([]byte{typeDisconnect << 4, 0})
	c.conn.Close()
}

// isStop reports whether err is how a read ends when the scenario stops the
// connection on purpose (deadline passed or socket closed).
func isStop(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed)
}

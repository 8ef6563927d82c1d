package mqttd

import (
	"io"
	"time"
)

// After the server's DISCONNECT for something the client sent (0x93, a
// protocol error), the client may still be sending: PUBRELs for the
// PUBRECs it is reading, say. Closing a socket with input unread, or
// receiving more after the close, makes the kernel reset the connection,
// and a client reset before it read the DISCONNECT never learns why (Paho's
// test_flow_control2). So the reader ends the sending side after the
// DISCONNECT and reads, dropping it, what the client still sends until it
// closes too, for at most lingerTime and lingerBytes; only then is the
// connection closed [MQTT-3.14.4-2].

const (
	// lingerTime bounds how long a connection is kept after the server's
	// DISCONNECT for the client to read it.
	lingerTime = time.Second
	// lingerBytes bounds what is read and dropped meanwhile.
	lingerBytes = 64 << 10
	// maxLingering bounds the connections lingering at once: each holds
	// a goroutine and, on the Linux engine, a thread blocked in poll(2),
	// and clients that break the protocol on purpose must not make the
	// broker hold a thread each (the runtime aborts past 10,000). Past it
	// a connection is closed at once, and its client may see a reset.
	maxLingering = 64
)

// lingerNetConn is lingerInput for a connection read by its own
// goroutine (TLS, WebSocket), on that goroutine.
func (c *conn) lingerNetConn(deadline time.Time) {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	c.nc.SetReadDeadline(deadline)
	io.CopyN(io.Discard, c.nc, lingerBytes)
}

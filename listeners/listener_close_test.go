package listeners_test

import (
	"net"
	"testing"
	"time"

	"mqttd/listeners"
)

// TestCloseEndsHandshakes checks that Close does not leave a connection
// waiting for its handshake timeout.
func TestCloseEndsHandshakes(t *testing.T) {
	p := newPKI(t)
	l, err := listeners.Listen(listeners.Config{Type: listeners.TLS, Address: "127.0.0.1:0", TLS: p.tlsConfig(false),
		HandshakeTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Whether the listener has taken the connection from the backlog yet
	// or not, Close ends it.
	l.Close()
	closedByServer(t, c)
}

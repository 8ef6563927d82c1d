package listeners_test

import (
	"crypto/tls"
	"net"
	"testing"

	"github.com/gorilla/websocket"

	"mqttd/listeners"
)

// TestPeerClosed: PeerClosed sees through a TLS and a WebSocket
// connection to the socket, telling an open peer from one that closed.
func TestPeerClosed(t *testing.T) {
	pki := newPKI(t)
	for _, typ := range []string{listeners.TCP, listeners.TLS, listeners.WS} {
		t.Run(typ, func(t *testing.T) {
			l := listen(t, listeners.Config{Type: typ, TLS: pki.tlsConfig(false)})
			ch := acceptOne(l)
			addr := l.Addr().String()
			var client interface{ Close() error }
			var err error
			switch typ {
			case listeners.TCP:
				client, err = net.Dial("tcp", addr)
			case listeners.TLS:
				client, err = tls.Dial("tcp", addr, pki.clientTLS())
			case listeners.WS:
				client, _, err = (&websocket.Dialer{Subprotocols: []string{"mqtt"}}).Dial("ws://"+addr+"/mqtt", nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			sc := accepted(t, ch)
			if listeners.PeerClosed(sc) {
				t.Fatal("PeerClosed with the client open")
			}
			client.Close()
			waitFor(t, "PeerClosed to see the client's close", func() bool { return listeners.PeerClosed(sc) })
		})
	}
}

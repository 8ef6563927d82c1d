package mqttd_test

import (
	"crypto/tls"
	"net"
	"testing"

	"mqttd/listeners"
)

// TestSpecOverTransports runs the spec checklist's rows over TLS and
// WebSocket: the rows' plain TCP clients are relayed through a client of
// the transport, so the broker reads them from a real TLS or WebSocket
// connection.
func TestSpecOverTransports(t *testing.T) {
	cert, key := writeServerCert(t)
	tlsClient := &tls.Config{RootCAs: certPool(t, cert)}
	for _, typ := range []string{listeners.TLS, listeners.WS} {
		t.Run(typ, func(t *testing.T) {
			testSpecRows(t, wrapListener(func(plain net.Listener) net.Listener {
				return newRelayListener(t, plain, listeners.Config{Type: typ, Address: "127.0.0.1:0",
					TLS: listeners.TLSConfig{CertFile: cert, KeyFile: key}}, tlsClient)
			}))
		})
	}
}

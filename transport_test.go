package mqttd_test

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gorilla/websocket"

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

// relayListener hands the broker the server side of a TLS or WebSocket
// connection for each plain connection the test's clients make; a
// client of that transport relays the bytes both ways.
type relayListener struct {
	net.Listener // the plain one the clients dial
	inner        *listeners.Listener
	dial         func() (net.Conn, error)
}

func newRelayListener(t *testing.T, plain net.Listener, cfg listeners.Config, tc *tls.Config) *relayListener {
	t.Helper()
	inner, err := listeners.Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	addr := inner.Addr().String()
	r := &relayListener{Listener: plain, inner: inner}
	if cfg.Type == listeners.TLS {
		r.dial = func() (net.Conn, error) { return tls.Dial("tcp", addr, tc) }
	} else {
		r.dial = func() (net.Conn, error) {
			ws, _, err := (&websocket.Dialer{Subprotocols: []string{"mqtt"}}).Dial("ws://"+addr+"/mqtt", nil)
			if err != nil {
				return nil, err
			}
			return &wsClient{ws: ws}, nil
		}
	}
	return r
}

// Accept relays the next plain connection through a new client of the
// transport and returns the server side of that client's connection.
func (r *relayListener) Accept() (net.Conn, error) {
	pc, err := r.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc, err := r.dial()
	if err != nil {
		pc.Close()
		return nil, err
	}
	sc, err := r.inner.Accept()
	if err != nil {
		pc.Close()
		cc.Close()
		return nil, err
	}
	go relay(pc, cc)
	go relay(cc, pc)
	return sc, nil
}

// Close closes both listeners.
func (r *relayListener) Close() error {
	return errors.Join(r.inner.Close(), r.Listener.Close())
}

// relay copies src to dst until either ends, then closes both, so a
// close on one side reaches the other.
func relay(dst, src net.Conn) {
	io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// wsClient is a WebSocket client as a byte stream: each Write is one
// binary message, Read reads the messages one after another.
type wsClient struct {
	ws *websocket.Conn
	r  io.Reader
}

func (c *wsClient) Read(b []byte) (int, error) {
	for {
		if c.r == nil {
			_, r, err := c.ws.NextReader()
			if err != nil {
				return 0, err
			}
			c.r = r
		}
		n, err := c.r.Read(b)
		if errors.Is(err, io.EOF) {
			c.r = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
}

func (c *wsClient) Write(b []byte) (int, error) {
	if err := c.ws.WriteMessage(websocket.BinaryMessage, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (c *wsClient) Close() error                       { return c.ws.Close() }
func (c *wsClient) LocalAddr() net.Addr                { return c.ws.LocalAddr() }
func (c *wsClient) RemoteAddr() net.Addr               { return c.ws.RemoteAddr() }
func (c *wsClient) SetDeadline(t time.Time) error      { return c.ws.NetConn().SetDeadline(t) }
func (c *wsClient) SetReadDeadline(t time.Time) error  { return c.ws.SetReadDeadline(t) }
func (c *wsClient) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }

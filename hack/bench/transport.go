package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// transport is how clients reach the broker: tcp, tls, ws or wss.
type transport struct {
	kind string
	tls  *tls.Config // tls and wss
	poll bool        // read the sockets by polling (-poll)
}

// newTransport builds the transport of -transport and -cafile for the
// broker at addr. Without a CA file a TLS client does not verify the
// broker: this is a load generator for a broker on the same machine or
// network.
func newTransport(kind, caFile, addr string) (transport, error) {
	t := transport{kind: kind}
	switch kind {
	case "tcp", "ws":
		return t, nil
	case "tls", "wss":
	default:
		return t, fmt.Errorf("-transport %q: want tcp, tls, ws or wss", kind)
	}
	host, _, _ := net.SplitHostPort(addr)
	t.tls = &tls.Config{InsecureSkipVerify: caFile == "", ServerName: host}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return t, err
		}
		t.tls.RootCAs = x509.NewCertPool()
		if !t.tls.RootCAs.AppendCertsFromPEM(pem) {
			return t, fmt.Errorf("-cafile %s: no PEM certificate in it", caFile)
		}
	}
	return t, nil
}

// open runs the transport's handshake over a dialled socket to addr:
// TLS, or the WebSocket upgrade at /mqtt. It closes conn when that fails.
func (t transport) open(conn net.Conn, addr string, deadline time.Time) (net.Conn, error) {
	switch t.kind {
	case "tls":
		tc := tls.Client(conn, t.tls)
		conn.SetDeadline(deadline)
		if err := tc.Handshake(); err != nil {
			conn.Close()
			return nil, err
		}
		return tc, nil
	case "ws", "wss":
		d := websocket.Dialer{
			NetDial:          func(string, string) (net.Conn, error) { return conn, nil },
			TLSClientConfig:  t.tls,
			Subprotocols:     []string{"mqtt"},
			HandshakeTimeout: time.Until(deadline),
			ReadBufferSize:   512,
			// Each Write goes out as one frame: FlashMQ 1.26 closes a
			// connection that sends a continuation frame, which gorilla
			// writes for a message larger than its buffer. The pool holds
			// the buffer only while a message is written, so an idle
			// client does not keep 64 KiB.
			WriteBufferSize: wsWriteBuffer,
			WriteBufferPool: wsWritePool,
		}
		ws, _, err := d.Dial(t.kind+"://"+addr+"/mqtt", nil)
		if err != nil {
			conn.Close()
			return nil, err
		}
		return &wsStream{Conn: ws.NetConn(), ws: ws}, nil
	}
	return conn, nil
}

// wsWriteBuffer is the largest message sent as one frame: the throughput
// clients' writes are at most bufSize.
const wsWriteBuffer = bufSize

var wsWritePool = &sync.Pool{}

// wsStream is a WebSocket as a byte stream: each Write is one binary
// message, and Read reads the messages one after another. Deadlines and
// addresses are the socket's.
type wsStream struct {
	net.Conn
	ws *websocket.Conn
	r  io.Reader
}

func (s *wsStream) Read(b []byte) (int, error) {
	for {
		if s.r == nil {
			_, r, err := s.ws.NextReader()
			if err != nil {
				return 0, err
			}
			s.r = r
		}
		n, err := s.r.Read(b)
		if errors.Is(err, io.EOF) {
			s.r = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
}

func (s *wsStream) Write(b []byte) (int, error) {
	if err := s.ws.WriteMessage(websocket.BinaryMessage, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

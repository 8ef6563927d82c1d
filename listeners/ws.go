package listeners

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Subprotocols a WebSocket client may ask for: MQTT 3.1.1 and 5.0 name
// "mqtt" [MQTT-6.0.0-3]; MQTT 3.1 clients say "mqttv3.1".
var subprotocols = []string{"mqtt", "mqttv3.1"}

// maxHeaderBytes bounds the HTTP request of an upgrade.
const maxHeaderBytes = 8 << 10

// readBufferSize is a WebSocket connection's read buffer: room for a
// frame header and a control frame (125 bytes), and a small packet.
const readBufferSize = 512

// writeBuffers is the write buffer of every WebSocket connection, taken
// only while a message is written: an idle connection holds none.
var writeBuffers websocket.BufferPool = &sync.Pool{}

// serveWeb serves the WebSocket upgrade on inner; upgraded connections go
// to Accept.
func (l *Listener) serveWeb(inner net.Listener) {
	if l.cfg.Path == "" {
		l.cfg.Path = DefaultPath
	}
	up := &websocket.Upgrader{
		HandshakeTimeout: l.cfg.HandshakeTimeout,
		Subprotocols:     subprotocols,
		// The handler has checked the origin (originRefusal), with an
		// answer and a log line that say why.
		CheckOrigin:     func(*http.Request) bool { return true },
		WriteBufferPool: writeBuffers,
		// The HTTP server's 4 KiB read buffer would otherwise stay with
		// the connection for its life; the engine reads through a buffer
		// of its own, and a payload larger than this one is read past it.
		ReadBufferSize: readBufferSize,
		Error: func(w http.ResponseWriter, r *http.Request, status int, reason error) {
			l.refuse(RefusedHandshake, &l.failWarned).Str("remote", r.RemoteAddr).Str("origin", r.Header.Get("Origin")).Int("status", status).
				Err(reason).Msg("WebSocket upgrade refused (logged at most every 10 s)")
			http.Error(w, http.StatusText(status), status)
		},
	}
	mux := http.NewServeMux()
	mux.HandleFunc(l.cfg.Path, func(w http.ResponseWriter, r *http.Request) {
		if why := l.originRefusal(r); why != "" {
			l.refuseOrigin(w, r, why)
			return
		}
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return // answered by up.Error
		}
		upgraded(ws.NetConn())
		ws.SetReadLimit(l.cfg.MaxMessageSize)
		l.hand(&wsConn{ws: ws, remote: l.clientAddr(r, ws.RemoteAddr()), limit: l.cfg.MaxMessageSize})
	})
	l.web = &http.Server{
		Handler: mux,
		// The upgrade request, and for wss the TLS handshake before it,
		// must be done within the timeout.
		ReadHeaderTimeout: l.cfg.HandshakeTimeout,
		ReadTimeout:       l.cfg.HandshakeTimeout,
		WriteTimeout:      l.cfg.HandshakeTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		// What the server logs are failed TLS handshakes (wss) and
		// the like: warnings, rate-limited like the listener's own.
		ErrorLog: log.New(webLog{l}, "", 0),
	}
	// One request per connection: this port serves upgrades, not pages,
	// and a kept-alive connection would be held for nothing.
	l.web.SetKeepAlivesEnabled(false)
	go func() {
		err := l.web.Serve(inner)
		if !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			l.failed <- err
		}
	}()
}

// upgraded uncounts a connection from the pending ones once its upgrade
// is done; nc is the hijacked connection, a *pendingConn or, for wss, the
// *tls.Conn over one.
func upgraded(nc net.Conn) {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	if pc, ok := nc.(*pendingConn); ok {
		pc.settled()
	}
}

// webLog turns the WebSocket server's log lines into the listener's
// rate-limited warnings.
type webLog struct{ l *Listener }

func (w webLog) Write(b []byte) (int, error) {
	w.l.refuse(RefusedHandshake, &w.l.failWarned).Str("detail", strings.TrimSpace(string(b))).
		Msg("connection closed before MQTT (logged at most every 10 s)")
	return len(b), nil
}

// clientAddr is the client's address: the socket's peer, or, when that is
// a trusted proxy, the last address in X-Forwarded-For that is not one.
func (l *Listener) clientAddr(r *http.Request, peer net.Addr) net.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil || !l.trusted(ap.Addr()) {
		return peer
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			return peer
		}
		if !l.trusted(a) || i == 0 {
			return net.TCPAddrFromAddrPort(netip.AddrPortFrom(a, 0))
		}
	}
	return peer
}

// trusted reports whether a is in ProxyTrusted.
func (l *Listener) trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range l.cfg.ProxyTrusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// wsConn carries MQTT over a WebSocket, accepted by a Listener or opened
// by Dial: Read returns the bytes of binary messages one after another,
// so a packet may span messages and a message may hold several packets;
// each Write is one binary message.
type wsConn struct {
	ws     *websocket.Conn
	remote net.Addr
	// limit is MaxMessageSize, for the error that says it was passed; 0
	// for a dialed connection, which sets no limit: Read streams each
	// message, and the MQTT reader above bounds the packets.
	limit int64
	r     io.Reader // the message being read
}

// OnReadWait has hook called whenever a read is about to wait for the
// client (see tlsConn.OnReadWait).
func (c *wsConn) OnReadWait(hook func()) bool { return onReadWait(c.ws.NetConn(), hook) }

// Read reads from the current message, moving to the next when it ends.
// A text message, or one over MaxMessageSize, is an error that ends the
// connection; a close from the peer is io.EOF.
func (c *wsConn) Read(b []byte) (int, error) {
	for {
		if c.r == nil {
			t, r, err := c.ws.NextReader()
			if err != nil {
				var ce *websocket.CloseError
				if errors.As(err, &ce) && (ce.Code == websocket.CloseNormalClosure || ce.Code == websocket.CloseGoingAway) {
					return 0, io.EOF
				}
				return 0, err
			}
			if t != websocket.BinaryMessage {
				return 0, errors.New("WebSocket text message: MQTT needs binary messages")
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
		if errors.Is(err, websocket.ErrReadLimit) {
			err = fmt.Errorf("WebSocket message larger than %d bytes: %w", c.limit, err)
		}
		return n, err
	}
}

// Write sends b as one binary message.
func (c *wsConn) Write(b []byte) (int, error) {
	if err := c.ws.WriteMessage(websocket.BinaryMessage, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Close closes the connection without a close message: the engine closes
// from goroutines (idle wheel, shutdown) that must not wait on a peer.
func (c *wsConn) Close() error { return c.ws.Close() }

// CloseWrite tells the peer nothing more will be sent, with a close frame
// (1000), while what it still sends can be read: the WebSocket form of a
// TCP half-close.
func (c *wsConn) CloseWrite() error {
	return c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
		time.Now().Add(time.Second))
}

// LocalAddr returns the socket's local address: the listener's, for an
// accepted connection.
func (c *wsConn) LocalAddr() net.Addr { return c.ws.LocalAddr() }

// RemoteAddr returns the peer's address: for an accepted connection, the
// client's (see clientAddr).
func (c *wsConn) RemoteAddr() net.Addr { return c.remote }

// SetDeadline sets both deadlines.
func (c *wsConn) SetDeadline(t time.Time) error {
	c.ws.SetReadDeadline(t)
	return c.ws.SetWriteDeadline(t)
}

// SetReadDeadline sets the read deadline. A read that times out leaves the
// WebSocket unusable, which is fine: the engine closes on every timeout.
func (c *wsConn) SetReadDeadline(t time.Time) error { return c.ws.SetReadDeadline(t) }

// SetWriteDeadline sets the write deadline.
func (c *wsConn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }

// SetKeepAliveConfig sets TCP keepalive on the socket under the WebSocket.
func (c *wsConn) SetKeepAliveConfig(kc net.KeepAliveConfig) error {
	return setKeepAlive(c.ws.NetConn(), kc)
}

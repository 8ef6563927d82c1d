package listeners_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"mqttd/listeners"
)

// A 3.1.1 CONNECT (client id "w", keepalive 60), its CONNACK, a SUBSCRIBE
// to "a" (QoS 0) and a PUBLISH to "a" of "hi".
var (
	connectPacket   = []byte{0x10, 0x0d, 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 60, 0, 1, 'w'}
	connackPacket   = []byte{0x20, 0x02, 0, 0}
	subscribePacket = []byte{0x82, 0x06, 0, 1, 0, 1, 'a', 0}
	subackPacket    = []byte{0x90, 0x03, 0, 1, 0}
	publishPacket   = []byte{0x30, 0x05, 0, 1, 'a', 'h', 'i'}
)

func TestWebSocketPaho(t *testing.T) {
	_, addr := startBroker(t, listeners.Config{Type: listeners.WS})
	pahoRoundTrip(t, "ws://"+addr+"/mqtt", nil)
}

func TestWSSPaho(t *testing.T) {
	p := newPKI(t)
	_, addr := startBroker(t, listeners.Config{Type: listeners.WSS, TLS: p.tlsConfig(true)})
	pahoRoundTrip(t, "wss://"+addr+"/mqtt", p.clientTLS(p.client))
}

// dialWS opens a WebSocket to a broker's ws listener offering mqtt.
func dialWS(t *testing.T, url string, header http.Header) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{"mqtt"}, HandshakeTimeout: 10 * time.Second}
	ws, resp, err := d.Dial(url, header)
	if err != nil {
		t.Fatalf("dial %s: %v (%v)", url, err, resp)
	}
	t.Cleanup(func() { ws.Close() })
	if ws.Subprotocol() != "mqtt" {
		t.Fatalf("subprotocol %q, want mqtt", ws.Subprotocol())
	}
	return ws
}

// readBytes reads n bytes from ws, across as many messages as they take.
func readBytes(t *testing.T, ws *websocket.Conn, n int) []byte {
	t.Helper()
	ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	var got []byte
	for len(got) < n {
		typ, b, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("read after %d bytes: %v", len(got), err)
		}
		if typ != websocket.BinaryMessage {
			t.Fatalf("message of type %d, want binary", typ)
		}
		got = append(got, b...)
	}
	return got
}

// TestWebSocketFraming sends a CONNECT one byte per message, then a
// SUBSCRIBE and a PUBLISH in one message, and gets the answers.
func TestWebSocketFraming(t *testing.T) {
	_, addr := startBroker(t, listeners.Config{Type: listeners.WS})
	ws := dialWS(t, "ws://"+addr+"/mqtt", nil)
	for _, b := range connectPacket {
		if err := ws.WriteMessage(websocket.BinaryMessage, []byte{b}); err != nil {
			t.Fatal(err)
		}
	}
	if got := readBytes(t, ws, len(connackPacket)); !bytes.Equal(got, connackPacket) {
		t.Fatalf("CONNACK % x", got)
	}
	if err := ws.WriteMessage(websocket.BinaryMessage, append(append([]byte(nil), subscribePacket...), publishPacket...)); err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte(nil), subackPacket...), publishPacket...)
	if got := readBytes(t, ws, len(want)); !bytes.Equal(got, want) {
		t.Fatalf("got % x, want SUBACK then PUBLISH % x", got, want)
	}
}

// closed checks that the broker closes ws: its next read fails, and not
// for want of time.
func closed(t *testing.T, ws *websocket.Conn) error {
	t.Helper()
	ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, _, err := ws.ReadMessage()
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the connection stayed open")
		}
		return err
	}
}

func TestWebSocketTextMessageCloses(t *testing.T) {
	_, addr := startBroker(t, listeners.Config{Type: listeners.WS})
	ws := dialWS(t, "ws://"+addr+"/mqtt", nil)
	if err := ws.WriteMessage(websocket.TextMessage, connectPacket); err != nil {
		t.Fatal(err)
	}
	closed(t, ws)
}

func TestWebSocketOversizedMessageCloses(t *testing.T) {
	_, addr := startBroker(t, listeners.Config{Type: listeners.WS, MaxMessageSize: 1024})
	ws := dialWS(t, "ws://"+addr+"/mqtt", nil)
	if err := ws.WriteMessage(websocket.BinaryMessage, connectPacket); err != nil {
		t.Fatal(err)
	}
	readBytes(t, ws, len(connackPacket))
	big := append([]byte{0x30, 0x83, 0x08, 0, 1, 'a'}, make([]byte, 1024)...)
	if err := ws.WriteMessage(websocket.BinaryMessage, big); err != nil {
		t.Fatal(err)
	}
	if err := closed(t, ws); !websocket.IsCloseError(err, websocket.CloseMessageTooBig) {
		t.Fatalf("closed with %v, want close 1009 (message too big)", err)
	}
}

func TestWebSocketOtherPathAndPlainHTTP(t *testing.T) {
	l := listen(t, listeners.Config{Type: listeners.WS, Path: "/broker"})
	d := websocket.Dialer{Subprotocols: []string{"mqtt"}}
	if _, resp, err := d.Dial("ws://"+l.Addr().String()+"/mqtt", nil); err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("wrong path: %v %v", resp, err)
	}
	resp, err := http.Get("http://" + l.Addr().String() + "/broker")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("plain GET: status %d, want 400", resp.StatusCode)
	}
	ch := acceptOne(l)
	ws, _, err := d.Dial("ws://"+l.Addr().String()+"/broker", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	accepted(t, ch)
}

// TestWebSocketForwardedFor checks that the client address comes from
// X-Forwarded-For only when the connection is from a trusted proxy.
func TestWebSocketForwardedFor(t *testing.T) {
	for _, tc := range []struct {
		name    string
		trusted []netip.Prefix
		xff     string
		want    string
	}{
		{"untrusted peer", nil, "203.0.113.7", "127.0.0.1"},
		{"trusted proxy", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, "203.0.113.7", "203.0.113.7"},
		{"chain through trusted proxies", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")},
			"198.51.100.1, 203.0.113.7, 10.1.2.3", "203.0.113.7"},
		{"garbage", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, "not-an-ip", "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := listen(t, listeners.Config{Type: listeners.WS, ProxyTrusted: tc.trusted})
			ch := acceptOne(l)
			dialWS(t, "ws://"+l.Addr().String()+"/mqtt", http.Header{"X-Forwarded-For": {tc.xff}})
			c := accepted(t, ch)
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			if host != tc.want {
				t.Fatalf("RemoteAddr %s, want %s", c.RemoteAddr(), tc.want)
			}
		})
	}
}

// TestWebSocketUpgradeTimeout checks that a client that connects and
// sends no upgrade request is closed after the timeout.
func TestWebSocketUpgradeTimeout(t *testing.T) {
	l := listen(t, listeners.Config{Type: listeners.WS, HandshakeTimeout: 100 * time.Millisecond})
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("GET /mqtt HTTP/1.1\r\n")) // and never the rest
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 512)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue // an error response is allowed before the close
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the silent client was not closed")
		}
		return
	}
}

// TestWSSIdentity checks that a wss connection reports its client
// certificate's CN.
func TestWSSIdentity(t *testing.T) {
	p := newPKI(t)
	l := listen(t, listeners.Config{Type: listeners.WSS, TLS: p.tlsConfig(true)})
	ch := acceptOne(l)
	d := websocket.Dialer{Subprotocols: []string{"mqtt"}, TLSClientConfig: p.clientTLS(p.client)}
	ws, _, err := d.Dial("wss://"+l.Addr().String()+"/mqtt", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if cn := listeners.PeerCommonName(accepted(t, ch)); cn != "device-1" {
		t.Fatalf("PeerCommonName %q", cn)
	}
	// No client certificate: the TLS handshake refuses it.
	d.TLSClientConfig = &tls.Config{RootCAs: p.pool}
	if ws, _, err := d.Dial("wss://"+l.Addr().String()+"/mqtt", nil); err == nil {
		ws.Close()
		t.Fatal("wss without a client certificate was upgraded")
	}
}

// TestWebSocketBehindProxyProtocol upgrades a connection that starts with
// a PROXY header, and checks that Close then returns.
func TestWebSocketBehindProxyProtocol(t *testing.T) {
	l, err := listeners.Listen(listeners.Config{Type: listeners.WS, Address: "127.0.0.1:0", ProxyProtocol: true, ProxyTrusted: loopback})
	if err != nil {
		t.Fatal(err)
	}
	ch := acceptOne(l)
	raw := dialSend(t, l.Addr().String(), []byte("PROXY TCP4 203.0.113.7 10.0.0.1 12345 8083\r\n"))
	d := websocket.Dialer{Subprotocols: []string{"mqtt"}, NetDial: func(string, string) (net.Conn, error) { return raw, nil }}
	ws, _, err := d.Dial("ws://"+l.Addr().String()+"/mqtt", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if got := accepted(t, ch).RemoteAddr().String(); got != "203.0.113.7:12345" {
		t.Fatalf("RemoteAddr %s", got)
	}
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
}

// TestWSSHandshakeFailureLogged checks that a wss client refused at the
// TLS handshake leaves a log line saying so.
func TestWSSHandshakeFailureLogged(t *testing.T) {
	p := newPKI(t)
	var logs syncBuffer
	l := listen(t, listeners.Config{Type: listeners.WSS, TLS: p.tlsConfig(true), Logger: zerolog.New(&logs)})
	d := websocket.Dialer{Subprotocols: []string{"mqtt"}, TLSClientConfig: p.clientTLS()}
	if ws, _, err := d.Dial("wss://"+l.Addr().String()+"/mqtt", nil); err == nil {
		ws.Close()
		t.Fatal("upgraded without a client certificate")
	}
	waitFor(t, "the log line", func() bool { return strings.Contains(logs.String(), "TLS handshake error") })
}

// syncBuffer collects log lines written from the listener's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

package listeners_test

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"mqttd/listeners"
)

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// dialSend dials addr and writes b.
func dialSend(t *testing.T, addr string, b []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	return c
}

// closedByServer checks that the server closes c without a word.
func closedByServer(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := c.Read(make([]byte, 64))
	var ne net.Error
	if n > 0 || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection not closed: read %d bytes, %v", n, err)
	}
}

func TestProxyProtocol(t *testing.T) {
	l := listen(t, listeners.Config{Type: listeners.TCP, ProxyProtocol: true, ProxyTrusted: loopback})
	addr := l.Addr().String()
	for _, tc := range []struct {
		name, header, want string
	}{
		{"v1", "PROXY TCP4 203.0.113.7 10.0.0.1 12345 1883\r\n", "203.0.113.7:12345"},
		{"v2", string([]byte{'\r', '\n', '\r', '\n', 0, '\r', '\n', 'Q', 'U', 'I', 'T', '\n', 0x21, 0x11, 0, 12,
			198, 51, 100, 9, 10, 0, 0, 1, 0x30, 0x39, 0x07, 0x5b}), "198.51.100.9:12345"},
		{"v1 UNKNOWN keeps the socket's address", "PROXY UNKNOWN\r\n", "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := acceptOne(l)
			dialSend(t, addr, append([]byte(tc.header), 0x10))
			c := accepted(t, ch)
			got := c.RemoteAddr().String()
			if tc.want == "127.0.0.1" { // the socket's, whatever its port
				got, _, _ = net.SplitHostPort(got)
			}
			if got != tc.want {
				t.Fatalf("RemoteAddr %s, want %s", c.RemoteAddr(), tc.want)
			}
			// The engine's poller reads the socket itself: the wrapper
			// must expose it, with the client's bytes still in it.
			if _, ok := c.(syscall.Conn); !ok {
				t.Fatal("the connection hides its socket")
			}
			b := make([]byte, 1)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(c, b); err != nil || b[0] != 0x10 {
				t.Fatalf("first byte after the header: % x, %v", b, err)
			}
		})
	}
	t.Run("trusted source without a header", func(t *testing.T) {
		closedByServer(t, dialSend(t, addr, []byte{0x10, 0x0d, 0, 4, 'M', 'Q', 'T', 'T'}))
	})
}

// TestProxyProtocolUntrusted checks that a source outside proxy_trusted
// that sends a PROXY header is closed, and one that does not is served
// with its own address.
func TestProxyProtocolUntrusted(t *testing.T) {
	l := listen(t, listeners.Config{Type: listeners.TCP, ProxyProtocol: true,
		ProxyTrusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	addr := l.Addr().String()
	ch := acceptOne(l)
	closedByServer(t, dialSend(t, addr, []byte("PROXY TCP4 203.0.113.7 10.0.0.1 12345 1883\r\n")))
	closedByServer(t, dialSend(t, addr, []byte("\r\n\r\n\x00\r\nQUIT\n")))
	dialSend(t, addr, []byte{0x10})
	c := accepted(t, ch)
	b := make([]byte, 1)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, b); err != nil || b[0] != 0x10 {
		t.Fatalf("accepted the wrong connection: first byte % x, %v", b, err)
	}
	if host, _, _ := net.SplitHostPort(c.RemoteAddr().String()); host != "127.0.0.1" {
		t.Fatalf("RemoteAddr %s", c.RemoteAddr())
	}
}

// TestProxyProtocolTLS sends a PROXY header before the TLS handshake.
func TestProxyProtocolTLS(t *testing.T) {
	p := newPKI(t)
	l := listen(t, listeners.Config{Type: listeners.TLS, TLS: p.tlsConfig(false), ProxyProtocol: true, ProxyTrusted: loopback})
	ch := acceptOne(l)
	raw := dialSend(t, l.Addr().String(), []byte("PROXY TCP6 2001:db8::7 2001:db8::1 4000 8883\r\n"))
	cfg := p.clientTLS()
	cfg.ServerName = "127.0.0.1"
	tc := tls.Client(raw, cfg)
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if got := accepted(t, ch).RemoteAddr().String(); got != "[2001:db8::7]:4000" {
		t.Fatalf("RemoteAddr %s", got)
	}
}

func TestMaxConnections(t *testing.T) {
	l := listen(t, listeners.Config{Type: listeners.TCP, MaxConnections: 1})
	addr := l.Addr().String()
	ch := acceptOne(l)
	dialSend(t, addr, []byte{0x10})
	first := accepted(t, ch)
	ch = acceptOne(l)
	closedByServer(t, dialSend(t, addr, []byte{0x10}))
	first.Close()
	dialSend(t, addr, []byte{0x10})
	accepted(t, ch)
}

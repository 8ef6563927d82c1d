package listeners_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"mqttd/internal/testutil"
	"mqttd/listeners"
)

// dialCtx is the context of a dial expected to succeed or fail at once.
func dialCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// dial dials scheme://addr (path /mqtt for WebSockets) and closes the
// connection at the end of the test.
func dial(t *testing.T, scheme, addr string, tc *tls.Config) net.Conn {
	t.Helper()
	nc, err := listeners.Dial(dialCtx(t), scheme, addr, "/mqtt", tc)
	if err != nil {
		t.Fatalf("Dial %s %s: %v", scheme, addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// exchange checks that what client writes arrives at server and what
// server writes back arrives at client.
func exchange(t *testing.T, client, server net.Conn) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	client.SetDeadline(deadline)
	server.SetDeadline(deadline)
	for _, dir := range []struct {
		from, to net.Conn
		msg      string
	}{{client, server, "ping from the dialer"}, {server, client, "pong from the listener"}} {
		if _, err := dir.from.Write([]byte(dir.msg)); err != nil {
			t.Fatalf("write %q: %v", dir.msg, err)
		}
		got := make([]byte, len(dir.msg))
		if _, err := io.ReadFull(dir.to, got); err != nil || string(got) != dir.msg {
			t.Fatalf("read %q, %v; want %q", got, err, dir.msg)
		}
	}
}

// selfSignedFiles writes testutil's self-signed certificate for 127.0.0.1
// and returns its files.
func selfSignedFiles(t *testing.T, cn string) (certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	testutil.WriteSelfSigned(t, certFile, keyFile, cn)
	return certFile, keyFile
}

// clientTLS is ClientTLS, failing the test on an error.
func clientTLS(t *testing.T, caFile, certFile, keyFile, serverName string, alpn []string, insecure bool) *tls.Config {
	t.Helper()
	tc, err := listeners.ClientTLS(caFile, certFile, keyFile, serverName, alpn, insecure)
	if err != nil {
		t.Fatalf("ClientTLS: %v", err)
	}
	return tc
}

// TestDialRoundTrip dials a Listener of each type and checks that bytes
// go both ways, and that TCP and TLS give the connection types Detach and
// the bridge rely on.
func TestDialRoundTrip(t *testing.T) {
	certFile, keyFile := selfSignedFiles(t, "broker")
	server := listeners.TLSConfig{CertFile: certFile, KeyFile: keyFile}
	tc := clientTLS(t, certFile, "", "", "", nil, false)
	for _, typ := range []string{listeners.TCP, listeners.TLS, listeners.WS, listeners.WSS} {
		t.Run(typ, func(t *testing.T) {
			l := listen(t, listeners.Config{Type: typ, TLS: server})
			ch := acceptOne(l)
			nc := dial(t, typ, l.Addr().String(), tc)
			exchange(t, nc, accepted(t, ch))
			switch typ {
			case listeners.TCP:
				if _, ok := nc.(*net.TCPConn); !ok {
					t.Errorf("tcp dial gave a %T, want *net.TCPConn", nc)
				}
			case listeners.TLS:
				if _, ok := nc.(*tls.Conn); !ok {
					t.Errorf("tls dial gave a %T, want *tls.Conn", nc)
				}
			}
		})
	}
}

// dialRefused dials and, when the handshake passes (TLS 1.3 clients
// finish first), writes and reads, and returns the error that ends it.
func dialRefused(t *testing.T, scheme, addr string, tc *tls.Config) error {
	t.Helper()
	nc, err := listeners.Dial(dialCtx(t), scheme, addr, "/mqtt", tc)
	if err != nil {
		return err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	nc.Write(connectPacket)
	_, err = nc.Read(make([]byte, 16))
	if err == nil {
		t.Fatal("the listener let in a client it should have refused")
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the connection was neither answered nor closed")
	}
	return err
}

// TestDialVerifiesServer checks that TLS and WSS dials refuse a server
// whose certificate the CA file did not sign, or (without a CA file) the
// system's roots, and that insecure lets it in.
func TestDialVerifiesServer(t *testing.T) {
	certFile, keyFile := selfSignedFiles(t, "broker")
	otherCA, _ := selfSignedFiles(t, "other CA")
	server := listeners.TLSConfig{CertFile: certFile, KeyFile: keyFile}
	for _, typ := range []string{listeners.TLS, listeners.WSS} {
		t.Run(typ, func(t *testing.T) {
			addr := listen(t, listeners.Config{Type: typ, TLS: server}).Addr().String()
			for name, tc := range map[string]*tls.Config{
				"another CA":   clientTLS(t, otherCA, "", "", "", nil, false),
				"system roots": clientTLS(t, "", "", "", "", nil, false),
			} {
				_, err := listeners.Dial(dialCtx(t), typ, addr, "/mqtt", tc)
				var ve *tls.CertificateVerificationError
				if !errors.As(err, &ve) {
					t.Fatalf("%s: Dial returned %v, want a certificate verification error", name, err)
				}
				if !strings.Contains(err.Error(), typ+"://"+addr) {
					t.Errorf("%s: error %q does not name %s://%s", name, err, typ, addr)
				}
			}
			nc := dial(t, typ, addr, clientTLS(t, "", "", "", "", nil, true))
			nc.Close()
		})
	}
}

// TestDialClientCertificate checks mutual TLS against a listener that
// requires a client certificate: the one given is shown and verified, a
// dial without one is refused, and one from a CA the server does not
// name is still shown (and refused as such, not as missing).
func TestDialClientCertificate(t *testing.T) {
	p := newPKI(t)
	for _, typ := range []string{listeners.TLS, listeners.WSS} {
		t.Run(typ, func(t *testing.T) {
			l := listen(t, listeners.Config{Type: typ, TLS: p.tlsConfig(true)})
			addr := l.Addr().String()
			ch := acceptOne(l)
			nc := dial(t, typ, addr, clientTLS(t, p.File, p.clientCert, p.clientKey, "", nil, false))
			sc := accepted(t, ch)
			exchange(t, nc, sc)
			if cn := listeners.PeerCommonName(sc); cn != "device-1" {
				t.Errorf("the listener saw client certificate %q, want device-1", cn)
			}
			for _, tc := range []struct {
				name, cert, key, want string
			}{
				{"none", "", "", "certificate required"},
				{"another CA's", p.strangerCert, p.strangerKey, "unknown certificate authority"},
			} {
				err := dialRefused(t, typ, addr, clientTLS(t, p.File, tc.cert, tc.key, "", nil, false))
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("client certificate %s: refused with %v, want %q", tc.name, err, tc.want)
				}
			}
		})
	}
}

// TestDialServerName checks that the name sent (SNI) is serverName, or
// the dialed host when it is empty, and that it is the name verified.
func TestDialServerName(t *testing.T) {
	p := newPKI(t)
	l := listen(t, listeners.Config{Type: listeners.TLS, TLS: p.tlsConfig(false)})
	_, port, _ := net.SplitHostPort(l.Addr().String())
	for _, tc := range []struct{ host, serverName, want string }{
		{"127.0.0.1", "mqtt.test", "mqtt.test"},
		{"localhost", "", "localhost"},
	} {
		ch := acceptOne(l)
		dial(t, listeners.TLS, net.JoinHostPort(tc.host, port), clientTLS(t, p.File, "", "", tc.serverName, nil, false))
		sc, ok := accepted(t, ch).(interface{ ConnectionState() tls.ConnectionState })
		if !ok {
			t.Fatal("the listener's TLS connection has no ConnectionState")
		}
		if got := sc.ConnectionState().ServerName; got != tc.want {
			t.Errorf("dial %s with server name %q: the listener saw %q, want %q", tc.host, tc.serverName, got, tc.want)
		}
	}
	_, err := listeners.Dial(dialCtx(t), listeners.TLS, l.Addr().String(), "", clientTLS(t, p.File, "", "", "other.test", nil, false))
	if err == nil || !strings.Contains(err.Error(), "other.test") {
		t.Errorf("server name other.test, certificate for mqtt.test: Dial returned %v, want a verification error naming other.test", err)
	}
}

// TestDialALPN checks that the protocols given are offered and the one
// the server picks is negotiated.
func TestDialALPN(t *testing.T) {
	p := newPKI(t)
	cert := loadPair(t, p.serverCert, p.serverKey)
	offered := make(chan []string, 1)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			offered <- slices.Clone(hello.SupportedProtos)
			return &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"x-amzn-mqtt-ca"}}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan net.Conn, 1)
	go func() { // the server's side of the handshake, which Dial waits for
		c, err := ln.Accept()
		if err == nil && c.(*tls.Conn).Handshake() != nil {
			c.Close()
			c = nil
		}
		ch <- c
	}()
	alpn := []string{"mqtt", "x-amzn-mqtt-ca"}
	nc := dial(t, listeners.TLS, ln.Addr().String(), clientTLS(t, p.File, "", "", "", alpn, false))
	exchange(t, nc, accepted(t, ch))
	if got := <-offered; !slices.Equal(got, alpn) {
		t.Errorf("the server was offered %q, want %q", got, alpn)
	}
	if got := nc.(*tls.Conn).ConnectionState().NegotiatedProtocol; got != "x-amzn-mqtt-ca" {
		t.Errorf("negotiated %q, want x-amzn-mqtt-ca", got)
	}
}

// TestDialErrors checks that a dial that fails says where it went and
// why: a refused connection, a refused upgrade with its HTTP status, an
// unknown scheme.
func TestDialErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	for _, typ := range []string{listeners.TCP, listeners.TLS, listeners.WS, listeners.WSS} {
		_, err := listeners.Dial(dialCtx(t), typ, closed, "", nil)
		if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), typ+"://"+closed) {
			t.Errorf("%s to a closed port: %v, want connection refused naming %s://%s", typ, err, typ, closed)
		}
	}

	addr := listen(t, listeners.Config{Type: listeners.WS}).Addr().String()
	_, err = listeners.Dial(dialCtx(t), listeners.WS, addr, "/elsewhere", nil)
	if !errors.Is(err, websocket.ErrBadHandshake) || !strings.Contains(err.Error(), "HTTP 404") ||
		!strings.Contains(err.Error(), "ws://"+addr+"/elsewhere") {
		t.Errorf("ws to a wrong path: %v, want the upgrade refused with HTTP 404, naming the URL", err)
	}

	if _, err := listeners.Dial(dialCtx(t), "mqtt", addr, "", nil); err == nil || !strings.Contains(err.Error(), "unknown scheme") {
		t.Errorf("scheme mqtt: %v, want unknown scheme", err)
	}
}

// silentServer accepts connections and never answers them; heard gets a
// value when a client's first byte (of its ClientHello or upgrade
// request) has come, and the client waits for an answer.
func silentServer(t *testing.T) (addr string, heard <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{}, 16)
	done := make(chan struct{})
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
			if _, err := c.Read(make([]byte, 1)); err == nil {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
		<-done
	})
	return ln.Addr().String(), ch
}

// TestDialSilentServer checks that a TLS or WebSocket dial to a server
// that accepts and never answers the handshake ends when its context
// does: at the deadline, or when cancelled.
func TestDialSilentServer(t *testing.T) {
	tc := &tls.Config{InsecureSkipVerify: true}
	for _, typ := range []string{listeners.TLS, listeners.WS, listeners.WSS} {
		for _, how := range []string{"deadline", "cancel"} {
			t.Run(typ+" "+how, func(t *testing.T) {
				addr, heard := silentServer(t)
				var ctx context.Context
				var cancel context.CancelFunc
				if how == "deadline" {
					ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
				} else {
					ctx, cancel = context.WithCancel(context.Background())
				}
				defer cancel()
				result := make(chan error, 1)
				go func() {
					nc, err := listeners.Dial(ctx, typ, addr, "", tc)
					if nc != nil {
						nc.Close()
					}
					result <- err
				}()
				if how == "cancel" {
					select {
					case <-heard:
					case <-time.After(10 * time.Second):
						t.Fatal("the dial's handshake did not start within 10 s")
					}
					cancel()
				}
				var err error
				select {
				case err = <-result:
				case <-time.After(10 * time.Second):
					t.Fatalf("Dial still waiting 10 s after its context's %s", how)
				}
				want := context.Canceled
				if how == "deadline" {
					want = context.DeadlineExceeded
				}
				var ne net.Error
				if !errors.Is(err, want) && !(how == "deadline" && errors.As(err, &ne) && ne.Timeout()) {
					t.Fatalf("Dial returned %v, want %v", err, want)
				}
			})
		}
	}
}

// TestClientTLS checks the settings ClientTLS makes and that its errors
// name the file.
func TestClientTLS(t *testing.T) {
	certFile, keyFile := selfSignedFiles(t, "broker")
	tc := clientTLS(t, certFile, certFile, keyFile, "mqtt.test", []string{"mqtt"}, false)
	if tc.MinVersion != tls.VersionTLS12 || tc.ServerName != "mqtt.test" || !slices.Equal(tc.NextProtos, []string{"mqtt"}) ||
		tc.InsecureSkipVerify || tc.RootCAs == nil || tc.GetClientCertificate == nil {
		t.Errorf("ClientTLS gave MinVersion %#x, ServerName %q, NextProtos %q, InsecureSkipVerify %v, RootCAs %v, a client certificate %v",
			tc.MinVersion, tc.ServerName, tc.NextProtos, tc.InsecureSkipVerify, tc.RootCAs != nil, tc.GetClientCertificate != nil)
	}
	if tc := clientTLS(t, "", "", "", "", nil, true); tc.RootCAs != nil || tc.GetClientCertificate != nil || !tc.InsecureSkipVerify {
		t.Errorf("ClientTLS with no files, insecure: RootCAs %v, a client certificate %v, InsecureSkipVerify %v",
			tc.RootCAs != nil, tc.GetClientCertificate != nil, tc.InsecureSkipVerify)
	}

	missing := filepath.Join(t.TempDir(), "missing.pem")
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("no certificate here\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, ca, cert, key, want string }{
		{"missing CA file", missing, "", "", missing},
		{"CA file without PEM", notPEM, "", "", notPEM},
		{"certificate without key", "", certFile, "", certFile},
		{"key without certificate", "", "", keyFile, keyFile},
		{"unreadable key", "", certFile, notPEM, notPEM},
	} {
		_, err := listeners.ClientTLS(tc.ca, tc.cert, tc.key, "", nil, false)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}

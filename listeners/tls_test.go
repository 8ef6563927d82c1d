package listeners_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"mqttd/internal/testutil"
	"mqttd/listeners"
)

func TestTLSPaho(t *testing.T) {
	p := newPKI(t)
	for _, mutual := range []bool{false, true} {
		name := map[bool]string{false: "server auth", true: "mutual"}[mutual]
		t.Run(name, func(t *testing.T) {
			_, addr := startBroker(t, listeners.Config{Type: listeners.TLS, TLS: p.tlsConfig(mutual)})
			pahoRoundTrip(t, "ssl://"+addr, p.clientTLS(p.client))
		})
	}
}

// TestTLSIdentity checks that the verified client certificate's CN is
// what the connection reports, for authentication to use.
func TestTLSIdentity(t *testing.T) {
	p := newPKI(t)
	l := listen(t, listeners.Config{Type: listeners.TLS, TLS: p.tlsConfig(true)})
	ch := acceptOne(l)
	c, err := tls.Dial("tcp", l.Addr().String(), p.clientTLS(p.client))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc := accepted(t, ch)
	if cn := listeners.PeerCommonName(sc); cn != "device-1" {
		t.Fatalf("PeerCommonName = %q, want device-1", cn)
	}
}

// refused checks that a TLS client with cfg cannot talk to addr: the
// handshake fails, or (TLS 1.3, where the client finishes first) the
// server's alert ends the connection at the first read.
func refused(t *testing.T, addr string, cfg *tls.Config) error {
	t.Helper()
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	// A CONNECT: were the client let in, the broker would answer it.
	c.Write([]byte{0x10, 0x0d, 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 60, 0, 1, 'x'})
	_, err = c.Read(make([]byte, 16))
	if err == nil {
		t.Fatal("the broker answered a client it should have refused")
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the connection was neither answered nor closed")
	}
	return err
}

func TestTLSRefusedHandshakes(t *testing.T) {
	p := newPKI(t)
	_, addr := startBroker(t, listeners.Config{Type: listeners.TLS, TLS: p.tlsConfig(true)})
	for _, tc := range []struct {
		name string
		cfg  *tls.Config
		want string
	}{
		{"no client certificate", p.clientTLS(), "certificate required"},
		{"expired client certificate", p.clientTLS(p.expired), "expired certificate"},
		// Go's client offers only certificates from the CAs the server
		// names: this one is shown regardless.
		{"client certificate from another CA", &tls.Config{RootCAs: p.pool,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &p.stranger, nil }},
			"unknown certificate authority"},
		{"TLS 1.1", &tls.Config{RootCAs: p.pool, Certificates: []tls.Certificate{p.client},
			MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}, "protocol version"},
		{"TLS 1.2 without a certificate", &tls.Config{RootCAs: p.pool, MaxVersion: tls.VersionTLS12}, "handshake failure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := refused(t, addr, tc.cfg)
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("refused with %v, want %q", err, tc.want)
			}
		})
	}
}

func TestTLSMinVersion13(t *testing.T) {
	p := newPKI(t)
	c := p.tlsConfig(false)
	c.MinVersion = tls.VersionTLS13
	_, addr := startBroker(t, listeners.Config{Type: listeners.TLS, TLS: c})
	err := refused(t, addr, &tls.Config{RootCAs: p.pool, MaxVersion: tls.VersionTLS12})
	if !strings.Contains(err.Error(), "protocol version") {
		t.Fatalf("TLS 1.2 client refused with %v", err)
	}
	pahoRoundTrip(t, "ssl://"+addr, p.clientTLS())
}

func TestTLSRefusesOldMinVersion(t *testing.T) {
	p := newPKI(t)
	c := p.tlsConfig(false)
	c.MinVersion = tls.VersionTLS11
	if _, err := listeners.Listen(listeners.Config{Type: listeners.TLS, Address: "127.0.0.1:0", TLS: c}); err == nil {
		t.Fatal("a listener accepting TLS 1.1 was opened")
	}
}

// TestTLSHandshakeTimeout checks that a client that connects and never
// starts its handshake is closed after the timeout.
func TestTLSHandshakeTimeout(t *testing.T) {
	p := newPKI(t)
	l := listen(t, listeners.Config{Type: listeners.TLS, TLS: p.tlsConfig(false), HandshakeTimeout: 100 * time.Millisecond})
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("silent client: read %v, want EOF (closed by the listener)", err)
	}
}

// TestTLSReload checks that Reload swaps the certificate for new
// handshakes, keeps open connections, and keeps the old certificate when
// the new files are bad.
func TestTLSReload(t *testing.T) {
	p := newPKI(t)
	l := listen(t, listeners.Config{Type: listeners.TLS, TLS: p.tlsConfig(false)})
	addr := l.Addr().String()
	serverCN := func() string {
		t.Helper()
		ch := acceptOne(l)
		c, err := tls.Dial("tcp", addr, p.clientTLS())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		accepted(t, ch)
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	// An open connection, to check it survives the reload.
	ch := acceptOne(l)
	old, err := tls.Dial("tcp", addr, p.clientTLS())
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	oldServer := accepted(t, ch)
	if cn := serverCN(); cn != "server" {
		t.Fatalf("CN before reload %q", cn)
	}

	// A certificate whose file is cut short: kept the old one.
	good, _ := os.ReadFile(p.serverCert)
	os.WriteFile(p.serverCert, good[:len(good)/2], 0o600)
	if err := l.Reload(); err == nil || !strings.Contains(err.Error(), "kept the previous certificates") {
		t.Fatalf("Reload of a bad file: %v", err)
	}
	if cn := serverCN(); cn != "server" {
		t.Fatalf("CN after a bad reload %q", cn)
	}

	// A new certificate (say, renewed): new handshakes get it.
	cert, key := p.Issue(t, "renewed", time.Now().Add(time.Hour), true)
	os.Rename(cert, p.serverCert)
	os.Rename(key, p.serverKey)
	if err := l.Reload(); err != nil {
		t.Fatal(err)
	}
	if cn := serverCN(); cn != "renewed" {
		t.Fatalf("CN after reload %q, want renewed", cn)
	}
	// The connection from before still carries bytes both ways.
	go oldServer.Write([]byte("still here"))
	buf := make([]byte, 10)
	old.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(old, buf); err != nil || string(buf) != "still here" {
		t.Fatalf("open connection after reload: %q, %v", buf, err)
	}
}

// TestMosquittoClientsTLS runs mosquitto_sub and mosquitto_pub with
// client certificates against a mutual-TLS listener.
func TestMosquittoClientsTLS(t *testing.T) {
	pubBin, subBin := needTool(t, "mosquitto_pub"), needTool(t, "mosquitto_sub")
	p := newPKI(t)
	srv, addr := startBroker(t, listeners.Config{Type: listeners.TLS, TLS: p.tlsConfig(true)})
	host, port, _ := strings.Cut(addr, ":")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tlsArgs := []string{"-h", host, "-p", port, "--cafile", p.File, "--cert", p.clientCert, "--key", p.clientKey}
	sub := exec.CommandContext(ctx, subBin, append(tlsArgs, "-t", "tls/#", "-C", "1", "-v", "-i", "mosq-sub")...)
	out, err := sub.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	sub.Stderr = os.Stderr
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	defer sub.Wait()
	waitFor(t, "mosquitto_sub to subscribe", func() bool { return srv.Stats().Subscriptions == 1 })
	pub := exec.CommandContext(ctx, pubBin, append(tlsArgs, "-t", "tls/x", "-m", "over mTLS", "-q", "1")...)
	if msg, err := pub.CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_pub: %v\n%s", err, msg)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "tls/x over mTLS\n" {
		t.Fatalf("mosquitto_sub printed %q (%v)", line, err)
	}
	// Without a client certificate mosquitto_pub is refused.
	pub = exec.CommandContext(ctx, pubBin, "-h", host, "-p", port, "--cafile", p.File, "-t", "tls/x", "-m", "x")
	if msg, err := pub.CombinedOutput(); err == nil {
		t.Fatalf("mosquitto_pub without a certificate succeeded:\n%s", msg)
	}
}

// needTool returns the path of a Debian-packaged client, skipping outside
// CI when it is absent; CI installs it (.ci/run).
func needTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s missing in CI: .ci/run must install mosquitto-clients", name)
		}
		t.Skipf("%s not installed (apt-get install mosquitto-clients)", name)
	}
	return path
}

// TestTLSCipherSuites checks that a TLS 1.2 client is held to the
// configured cipher suites.
func TestTLSCipherSuites(t *testing.T) {
	p := newPKI(t)
	c := p.tlsConfig(false)
	c.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256}
	_, addr := startBroker(t, listeners.Config{Type: listeners.TLS, TLS: c})
	other := &tls.Config{RootCAs: p.pool, MaxVersion: tls.VersionTLS12,
		CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}}
	if err := refused(t, addr, other); !strings.Contains(err.Error(), "handshake failure") {
		t.Fatalf("a client without the suite: %v", err)
	}
	same := &tls.Config{RootCAs: p.pool, MaxVersion: tls.VersionTLS12, CipherSuites: c.CipherSuites}
	conn, err := tls.Dial("tcp", addr, same)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got := conn.ConnectionState().CipherSuite; got != c.CipherSuites[0] {
		t.Fatalf("cipher suite %s", tls.CipherSuiteName(got))
	}
}

// TestTLSChainFromClientCAFile: a certificate file holding only the
// server's certificate, issued by an intermediate CA, is served with the
// intermediate taken from the client CA file, as Mosquitto completes its
// chain from cafile: a client that trusts only the root connects. A CA
// file without the intermediate leaves the chain short, and the listener
// says so when it starts.
func TestTLSChainFromClientCAFile(t *testing.T) {
	root := testutil.NewCA(t, "test root")
	inter := root.SubCA(t, "test intermediate")
	certFile, keyFile := inter.Issue(t, "server", time.Now().Add(time.Hour), true)
	bundle := filepath.Join(t.TempDir(), "cafile.pem")
	rootPEM, err := os.ReadFile(root.File)
	if err != nil {
		t.Fatal(err)
	}
	interPEM, err := os.ReadFile(inter.File)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bundle, append(rootPEM, interPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	dial := func(caFile string) (*tls.Conn, *syncBuffer, error) {
		var logs syncBuffer
		_, addr := startBroker(t, listeners.Config{Type: listeners.TLS, Logger: zerolog.New(&logs),
			TLS: listeners.TLSConfig{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile}})
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: root.Pool(), ServerName: "127.0.0.1"})
		return c, &logs, err
	}

	c, logs, err := dial(bundle)
	if err != nil {
		t.Fatalf("a client trusting the root, the intermediate in the CA file: %v", err)
	}
	chain := c.ConnectionState().PeerCertificates
	c.Close()
	if len(chain) != 2 || chain[1].Subject.CommonName != "test intermediate" {
		t.Fatalf("served %d certificates, want the server's and the intermediate", len(chain))
	}
	if strings.Contains(logs.String(), "chain") {
		t.Fatalf("a complete chain was warned about: %s", logs.String())
	}

	_, logs, err = dial(root.File)
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("the intermediate missing everywhere: %v, want an unknown authority", err)
	}
	if w := logs.String(); !strings.Contains(w, "test intermediate") || !strings.Contains(w, "cannot verify") {
		t.Fatalf("no warning of the short chain naming its last certificate: %q", w)
	}
}

package listeners_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"mqttd"
	"mqttd/internal/testutil"
	"mqttd/listeners"
)

// waitFor polls cond until it holds, failing the test after 10 s.
var waitFor = testutil.WaitFor

// listen opens a listener on 127.0.0.1 port 0 (for types with an
// address) and closes it at the end of the test.
func listen(t testing.TB, cfg listeners.Config) *listeners.Listener {
	t.Helper()
	if cfg.Type != listeners.Unix && cfg.Address == "" {
		cfg.Address = "127.0.0.1:0"
	}
	l, err := listeners.Listen(cfg)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// startBroker serves a broker on a listener cfg describes and returns the
// broker and the listener's address.
func startBroker(t testing.TB, cfg listeners.Config) (*mqttd.Server, string) {
	t.Helper()
	srv, err := mqttd.New(mqttd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := listen(t, cfg)
	if err := srv.AddListener(cfg.Type, l); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, mqttd.ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	})
	return srv, l.Addr().String()
}

// acceptOne accepts one connection from l in a goroutine; the channel
// gets it, or nil when Accept failed.
func acceptOne(l net.Listener) <-chan net.Conn {
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			ch <- nil
			return
		}
		ch <- c
	}()
	return ch
}

// accepted waits for acceptOne's connection and closes it at the end.
func accepted(t *testing.T, ch <-chan net.Conn) net.Conn {
	t.Helper()
	select {
	case c := <-ch:
		if c == nil {
			t.Fatal("Accept failed")
		}
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("nothing accepted within 10 s")
	}
	return nil
}

// pkiFiles are PEM files made for a test.
type pkiFiles struct {
	dir                       string
	caFile                    string
	serverCert, serverKey     string
	clientCert, clientKey     string // CN device-1, signed by the CA
	expiredCert, expiredKey   string // signed by the CA, expired
	strangerCert, strangerKey string // signed by another CA
	ca                        *x509.Certificate
	caKey                     *ecdsa.PrivateKey
	pool                      *x509.CertPool // has the CA
	client, expired, stranger tls.Certificate
	serial                    atomic.Int64
}

// newPKI makes a CA, a server certificate for 127.0.0.1 and client
// certificates, in t.TempDir().
func newPKI(t testing.TB) *pkiFiles {
	t.Helper()
	p := &pkiFiles{dir: t.TempDir()}
	p.ca, p.caKey = selfSigned(t, "test CA")
	p.caFile = p.write(t, "ca.pem", pemBlock("CERTIFICATE", p.ca.Raw))
	p.pool = x509.NewCertPool()
	p.pool.AddCert(p.ca)
	p.serverCert, p.serverKey = p.issue(t, "server", p.ca, p.caKey, time.Now().Add(time.Hour), true)
	p.clientCert, p.clientKey = p.issue(t, "device-1", p.ca, p.caKey, time.Now().Add(time.Hour), false)
	p.expiredCert, p.expiredKey = p.issue(t, "expired", p.ca, p.caKey, time.Now().Add(-time.Hour), false)
	other, otherKey := selfSigned(t, "other CA")
	p.strangerCert, p.strangerKey = p.issue(t, "stranger", other, otherKey, time.Now().Add(time.Hour), false)
	p.client = loadPair(t, p.clientCert, p.clientKey)
	p.expired = loadPair(t, p.expiredCert, p.expiredKey)
	p.stranger = loadPair(t, p.strangerCert, p.strangerKey)
	return p
}

func selfSigned(t testing.TB, cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// issue signs a certificate for cn valid until notAfter and writes it and
// its key; a server certificate is for 127.0.0.1, localhost and
// mqtt.test (the names the SNI tests dial).
func (p *pkiFiles) issue(t testing.TB, cn string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, notAfter time.Time, server bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(100 + p.serial.Add(1)), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost", "mqtt.test"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, cn+".pem", pemBlock("CERTIFICATE", der)), p.write(t, cn+".key", pemBlock("EC PRIVATE KEY", kder))
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func (p *pkiFiles) write(t testing.TB, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func loadPair(t testing.TB, certFile, keyFile string) tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tlsConfig is the listener TLS config for p's server certificate.
func (p *pkiFiles) tlsConfig(mutual bool) listeners.TLSConfig {
	c := listeners.TLSConfig{CertFile: p.serverCert, KeyFile: p.serverKey}
	if mutual {
		c.ClientCAFile, c.RequireClientCert = p.caFile, true
	}
	return c
}

// clientTLS is a client config trusting p's CA and showing certs.
func (p *pkiFiles) clientTLS(certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: p.pool, Certificates: certs}
}

// pahoRoundTrip connects two paho clients to url, subscribes with one and
// publishes with the other, and checks the message arrives.
func pahoRoundTrip(t *testing.T, url string, tc *tls.Config) {
	t.Helper()
	got := make(chan string, 1)
	connect := func(id string) paho.Client {
		t.Helper()
		o := paho.NewClientOptions().AddBroker(url).SetClientID(id).SetTLSConfig(tc).
			SetAutoReconnect(false).SetConnectTimeout(10 * time.Second)
		c := paho.NewClient(o)
		if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("connect %s to %s: %v", id, url, tok.Error())
		}
		t.Cleanup(func() { c.Disconnect(100) })
		return c
	}
	sub := connect("sub")
	tok := sub.Subscribe("t/#", 1, func(_ paho.Client, m paho.Message) {
		select {
		case got <- string(m.Payload()):
		default:
		}
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	pub := connect("pub")
	if tok := pub.Publish("t/1", 1, false, "hello over "+url); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}
	select {
	case m := <-got:
		if m != "hello over "+url {
			t.Fatalf("got %q", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no message within 10 s")
	}
}

func x509Pool(t testing.TB, pem []byte) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("no certificate in the CA file")
	}
	return pool
}

package listeners_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
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
	*testutil.CA
	serverCert, serverKey     string
	clientCert, clientKey     string         // CN device-1, signed by the CA
	expiredCert, expiredKey   string         // signed by the CA, expired
	strangerCert, strangerKey string         // signed by another CA
	pool                      *x509.CertPool // has the CA
	client, expired, stranger tls.Certificate
}

// newPKI makes a CA, a server certificate for 127.0.0.1 and client
// certificates, in t.TempDir().
func newPKI(t testing.TB) *pkiFiles {
	t.Helper()
	p := &pkiFiles{CA: testutil.NewCA(t, "test CA")}
	p.pool = p.Pool()
	p.serverCert, p.serverKey = p.Issue(t, "server", time.Now().Add(time.Hour), true)
	p.clientCert, p.clientKey = p.Issue(t, "device-1", time.Now().Add(time.Hour), false)
	p.expiredCert, p.expiredKey = p.Issue(t, "expired", time.Now().Add(-time.Hour), false)
	p.strangerCert, p.strangerKey = testutil.NewCA(t, "other CA").Issue(t, "stranger", time.Now().Add(time.Hour), false)
	p.client = loadPair(t, p.clientCert, p.clientKey)
	p.expired = loadPair(t, p.expiredCert, p.expiredKey)
	p.stranger = loadPair(t, p.strangerCert, p.strangerKey)
	return p
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
		c.ClientCAFile, c.RequireClientCert = p.File, true
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

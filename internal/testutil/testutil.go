// Package testutil holds what the tests of every package share: waiting
// for a condition with a deadline, measuring the heap, and certificates
// for TLS listeners. Only tests import it; of mqttd it imports only
// internal/freeport.
package testutil

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"mqttd/internal/freeport"
)

// FreePort is a loopback port nothing listens on now, below the kernel's
// ephemeral range (freeport.Pick), for a program that must be told its
// port before it starts.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// WaitFor polls cond every 2 ms until it holds, failing the test after
// 10 s with what it waited for. Call it from the test's goroutine.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	WaitWithin(t, 10*time.Second, what, cond)
}

// WaitWithin is WaitFor failing after within, for what takes longer
// than 10 s on a loaded machine (a JetStream cluster electing its
// leaders).
func WaitWithin(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(within)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// HeapInUse is the live heap and the goroutine stacks after two full
// collections.
func HeapInUse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc + ms.StackInuse
}

// WriteSelfSigned writes to certFile and keyFile a self-signed certificate
// for 127.0.0.1 with common name cn, valid for an hour either side of now,
// which clients take as their CA, and its key.
func WriteSelfSigned(t testing.TB, certFile, keyFile, cn string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// CertPool is a pool of the certificates in the PEM file certFile: a
// client's CA for WriteSelfSigned's.
func CertPool(t testing.TB, certFile string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("no certificate in %s", certFile)
	}
	return pool
}

// LockedBuffer collects what a broker or a child process writes, from
// any goroutine, while the test reads it.
type LockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TCPPair returns both ends of a TCP connection on loopback, closed when
// the test ends.
func TCPPair(t testing.TB) (server, client net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = l.Accept()
	if err != nil {
		client.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		server.Close()
		client.Close()
	})
	return server, client
}

// Broker is what ServeAt runs: an *mqttd.Server (testutil cannot import
// the broker, whose own tests import testutil).
type Broker interface {
	AddListener(name string, l net.Listener) error
	Serve() error
	Shutdown(ctx context.Context) error
}

// ServeAt serves b on a listener at addr until stop, which the test's end
// calls too; a second call does nothing.
func ServeAt(t testing.TB, b Broker, addr string) (stop func()) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AddListener("test", l); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- b.Serve() }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := b.Shutdown(ctx); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
			<-served
		})
	}
	t.Cleanup(stop)
	return stop
}

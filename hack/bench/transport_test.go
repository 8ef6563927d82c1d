package main

import (
	"bytes"
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
	"path/filepath"
	"testing"
	"time"

	"mqttd"
)

// TestTransports opens idle clients over each -transport against an
// mqttd listening on all of them.
func TestTransports(t *testing.T) {
	cert, key := writeCert(t)
	srv, err := mqttd.New(mqttd.Options{Listeners: []mqttd.ListenerConfig{
		{Address: "127.0.0.1:0"},
		{Type: "tls", Address: "127.0.0.1:0", CertFile: cert, KeyFile: key},
		{Type: "ws", Address: "127.0.0.1:0"},
		{Type: "wss", Address: "127.0.0.1:0", CertFile: cert, KeyFile: key},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	for i, kind := range []string{"tcp", "tls", "ws", "wss"} {
		t.Run(kind, func(t *testing.T) {
			addr := srv.Addrs()[i].String()
			tr, err := newTransport(kind, cert, addr)
			if err != nil {
				t.Fatal(err)
			}
			r, err := conns(config{addr: addr, transport: tr, conns: 20, timeout: 10 * time.Second, log: &bytes.Buffer{}})
			if err != nil {
				t.Fatal(err)
			}
			if c, _ := r.num("connected"); c != 20 {
				t.Errorf("connected=%v of 20", c)
			}
		})
	}
	if _, err := newTransport("quic", "", "127.0.0.1:1"); err == nil {
		t.Error("-transport quic accepted")
	}
}

// writeCert writes a self-signed certificate for 127.0.0.1 and its key.
func writeCert(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	return certFile, keyFile
}

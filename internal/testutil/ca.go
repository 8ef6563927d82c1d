package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority made for a test: it issues server and
// client certificates and may sign CRLs.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// File is its certificate, PEM, in the test's temporary directory.
	File   string
	dir    string
	serial atomic.Int64
}

// NewCA makes a CA named cn, valid from two hours ago for an hour.
func NewCA(t testing.TB, cn string) *CA { return newCA(t, cn, nil) }

// SubCA makes an intermediate CA named cn that ca signs; its File holds
// its certificate alone.
func (ca *CA) SubCA(t testing.TB, cn string) *CA { return newCA(t, cn, ca) }

// newCA makes a CA named cn that parent signs, or a root when parent is
// nil.
func newCA(t testing.TB, cn string, parent *CA) *CA {
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
	signer, signerKey := tmpl, key
	if parent != nil {
		tmpl.SerialNumber = big.NewInt(100 + parent.serial.Add(1))
		signer, signerKey = parent.Cert, parent.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Cert: cert, Key: key, dir: t.TempDir()}
	ca.File = ca.WritePEM(t, "ca.pem", "CERTIFICATE", der)
	return ca
}

// Issue signs a certificate for cn valid until notAfter and writes it and
// its key to files: a server certificate is for 127.0.0.1, localhost and
// mqtt.test, a client certificate for client authentication.
func (ca *CA) Issue(t testing.TB, cn string, notAfter time.Time, server bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(100 + ca.serial.Add(1)), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost", "mqtt.test"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return ca.WritePEM(t, cn+".pem", "CERTIFICATE", der), ca.WritePEM(t, cn+".key", "EC PRIVATE KEY", kder)
}

// IssuePair is Issue for a client certificate, loaded.
func (ca *CA) IssuePair(t testing.TB, cn string) tls.Certificate {
	t.Helper()
	certFile, keyFile := ca.Issue(t, cn, time.Now().Add(time.Hour), false)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// Pool is a certificate pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return pool
}

// WritePEM writes der as a PEM block of typ to the file name in the CA's
// directory, and returns its path.
func (ca *CA) WritePEM(t testing.TB, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(ca.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

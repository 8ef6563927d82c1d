package listeners_test

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mqttd/internal/testutil"
	"mqttd/listeners"
)

// crlCA is a client CA that may sign CRLs, with two client certificates.
type crlCA struct {
	*testutil.CA
	good, revoked tls.Certificate
	crls          int64
}

func newCRLCA(t *testing.T, name string) *crlCA {
	t.Helper()
	ca := &crlCA{CA: testutil.NewCA(t, name)}
	ca.good = ca.IssuePair(t, name+"-good")
	ca.revoked = ca.IssuePair(t, name+"-revoked")
	return ca
}

// writeCRL writes a PEM CRL signed by ca listing certs and returns its path.
func (ca *crlCA) writeCRL(t *testing.T, p *pkiFiles, name string, certs ...tls.Certificate) string {
	t.Helper()
	ca.crls++
	tmpl := &x509.RevocationList{Number: big.NewInt(ca.crls), ThisUpdate: time.Now().Add(-time.Minute),
		NextUpdate: time.Now().Add(time.Hour)}
	for _, c := range certs {
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries,
			x509.RevocationListEntry{SerialNumber: leaf.SerialNumber, RevocationTime: time.Now()})
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, ca.Cert, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	return p.WritePEM(t, name, "X509 CRL", der) // in p's directory: a second list may replace the first
}

// TestTLSCRL checks crl_file on a mutual-TLS listener: a client
// certificate the CRL lists is refused at the handshake, others are let
// in; Reload reads the list again, so a certificate revoked since is
// refused from the next handshake; a list no client CA signed is
// refused, and a bad list on reload keeps the one in force.
func TestTLSCRL(t *testing.T) {
	p := newPKI(t)
	ca := newCRLCA(t, "devices CA")
	crl := ca.writeCRL(t, p, "devices.crl", ca.revoked)
	cfg := listeners.TLSConfig{CertFile: p.serverCert, KeyFile: p.serverKey, ClientCAFile: ca.File,
		RequireClientCert: true, CRLFile: crl}
	l := listen(t, listeners.Config{Type: listeners.TLS, TLS: cfg})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	addr := l.Addr().String()
	handshake := func(cert tls.Certificate) error {
		t.Helper()
		c, err := tls.Dial("tcp", addr, p.clientTLS(cert))
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		// TLS 1.3: the server's verdict on the client certificate comes
		// with the first read.
		_, err = c.Read(make([]byte, 1))
		if err != nil && strings.Contains(err.Error(), "EOF") {
			return nil // accepted, then closed by the accept loop
		}
		return err
	}
	if err := handshake(ca.good); err != nil {
		t.Fatalf("certificate not in the CRL refused: %v", err)
	}
	if err := handshake(ca.revoked); err == nil || !strings.Contains(err.Error(), "bad certificate") {
		t.Fatalf("revoked certificate: %v, want a bad certificate alert", err)
	}

	ca.writeCRL(t, p, "devices.crl", ca.revoked, ca.good)
	if err := l.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := handshake(ca.good); err == nil {
		t.Fatal("certificate revoked by the reloaded CRL let in")
	}

	other := newCRLCA(t, "other CA")
	other.writeCRL(t, p, "devices.crl")
	if err := l.Reload(); err == nil || !strings.Contains(err.Error(), "not signed by a CA of the client CA file") {
		t.Fatalf("Reload of a CRL from another CA: %v", err)
	}
	if err := handshake(ca.good); err == nil {
		t.Fatal("a refused CRL replaced the one in force")
	}
	cfg.CRLFile = filepath.Join(filepath.Dir(p.File), "other.crl")
	other.writeCRL(t, p, "other.crl")
	if _, err := listeners.Listen(listeners.Config{Type: listeners.TLS, Address: "127.0.0.1:0", TLS: cfg}); err == nil {
		t.Fatal("listener opened with a CRL no client CA signed")
	}
}

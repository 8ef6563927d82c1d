package listeners

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
)

// TLSConfig holds the keys and policy of a TLS or WSS listener.
type TLSConfig struct {
	// CertFile and KeyFile are the server's certificate chain and key, PEM.
	CertFile, KeyFile string
	// ClientCAFile holds the CAs (PEM) whose client certificates are
	// accepted; empty asks clients for none.
	ClientCAFile string
	// RequireClientCert refuses clients without a certificate signed by
	// ClientCAFile (mutual TLS); without it a certificate is verified
	// when a client offers one.
	RequireClientCert bool
	// CRLFile is a certificate revocation list (PEM or DER) issued by
	// one of the ClientCAFile CAs, Mosquitto's crlfile: a client
	// certificate it lists is refused at the handshake. Read again by
	// Reload; a list whose next update has passed still applies (it is
	// not a reason to refuse everyone). Empty: no list.
	CRLFile string
	// MinVersion is tls.VersionTLS12 (the default, for 0) or
	// tls.VersionTLS13; older versions are refused.
	MinVersion uint16
	// CipherSuites are the TLS 1.2 cipher suites offered, by id; nil means
	// Go's defaults. TLS 1.3's suites are not configurable.
	CipherSuites []uint16
}

// certStore holds a listener's current tls.Config: Reload swaps it, and
// each handshake takes the one current when its ClientHello arrives, so
// connections open over the old certificate are not touched.
type certStore struct {
	cfg TLSConfig
	// unchained says why the chain sent may not verify, when the CA
	// file could not complete it (completeChain); set by a load that
	// succeeded, read by its caller.
	unchained string
	cur       atomic.Pointer[tls.Config]
	outer     *tls.Config // what handshakes start with: it hands them cur
}

func newCertStore(cfg TLSConfig) (*certStore, error) {
	if cfg.MinVersion == 0 {
		cfg.MinVersion = tls.VersionTLS12
	}
	if cfg.MinVersion < tls.VersionTLS12 {
		return nil, errors.New("TLS versions before 1.2 are refused")
	}
	cs := &certStore{cfg: cfg}
	conf, err := cs.load()
	if err != nil {
		return nil, err
	}
	cs.cur.Store(conf)
	cs.outer = &tls.Config{
		MinVersion: cfg.MinVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return cs.cur.Load(), nil
		},
	}
	return cs, nil
}

// load builds a tls.Config from the files as they are now.
func (cs *certStore) load() (*tls.Config, error) {
	c := cs.cfg
	pair, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("certificate %s, key %s: %w", c.CertFile, c.KeyFile, err)
	}
	conf := &tls.Config{
		MinVersion:   c.MinVersion,
		CipherSuites: c.CipherSuites,
	}
	unchained := ""
	if c.ClientCAFile != "" {
		pem, err := os.ReadFile(c.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("client CA: %w", err)
		}
		if last := completeChain(&pair, pem); last != nil {
			unchained = fmt.Sprintf("certificate %s: the chain it sends ends at %q, whose issuer %q is not in %s: clients that trust only a root cannot verify it",
				c.CertFile, last.Subject, last.Issuer, c.ClientCAFile)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client CA %s: no PEM certificate in it", c.ClientCAFile)
		}
		conf.ClientCAs = pool
		conf.ClientAuth = tls.VerifyClientCertIfGiven
		if c.CRLFile != "" {
			revoked, err := loadCRL(c.CRLFile, pem)
			if err != nil {
				return nil, err
			}
			conf.VerifyConnection = revoked.check
		}
	} else if c.CRLFile != "" {
		return nil, fmt.Errorf("CRL %s: no client CA to check it with", c.CRLFile)
	}
	if c.RequireClientCert {
		conf.ClientAuth = tls.RequireAndVerifyClientCert
	}
	conf.Certificates = []tls.Certificate{pair}
	cs.unchained = unchained
	return conf, nil
}

// completeChain appends to pair's chain the CA certificates of caPEM
// that its file left out, up to the root (not sent: the client has it),
// as Mosquitto builds the chain it sends from its cafile with OpenSSL: a
// certificate file holding only the server's own certificate, which
// Mosquitto served with its intermediates, would otherwise fail every
// client that trusts only the root. It returns nil once the chain
// reaches a self-signed certificate or one signed by a root of caPEM,
// else the certificate whose issuer is missing.
func completeChain(pair *tls.Certificate, caPEM []byte) (short *x509.Certificate) {
	var cas []*x509.Certificate
	for rest := caPEM; len(rest) > 0; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if ca, err := x509.ParseCertificate(b.Bytes); err == nil && b.Type == "CERTIFICATE" {
			cas = append(cas, ca)
		}
	}
	last, err := x509.ParseCertificate(pair.Certificate[len(pair.Certificate)-1])
	if err != nil {
		return nil
	}
	// Each step adds a certificate of cas: a loop of cross-signed CAs
	// ends when they are used up.
	for range len(cas) + 1 {
		if selfSigned(last) {
			return nil
		}
		var issuer *x509.Certificate
		for _, ca := range cas {
			if bytes.Equal(ca.RawSubject, last.RawIssuer) && last.CheckSignatureFrom(ca) == nil {
				issuer = ca
				break
			}
		}
		switch {
		case issuer == nil:
			return last
		case selfSigned(issuer):
			return nil
		}
		pair.Certificate = append(pair.Certificate, issuer.Raw)
		last = issuer
	}
	return last
}

func selfSigned(c *x509.Certificate) bool {
	return bytes.Equal(c.RawSubject, c.RawIssuer) && c.CheckSignatureFrom(c) == nil
}

// revokedSerials are the certificates a CRL lists, by serial number, and
// the issuer that signed the list.
type revokedSerials struct {
	issuer  []byte // the issuer's raw subject
	serials map[string]bool
}

// loadCRL reads the CRL at path, PEM or DER, and checks that one of the
// CAs in caPEM signed it: a list anyone could write would let them
// refuse any device.
func loadCRL(path string, caPEM []byte) (*revokedSerials, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CRL: %w", err)
	}
	if b, _ := pem.Decode(data); b != nil {
		if b.Type != "X509 CRL" {
			return nil, fmt.Errorf("CRL %s: PEM block %q, want X509 CRL", path, b.Type)
		}
		data = b.Bytes
	}
	crl, err := x509.ParseRevocationList(data)
	if err != nil {
		return nil, fmt.Errorf("CRL %s: %w", path, err)
	}
	signed := false
	for rest := caPEM; len(rest) > 0 && !signed; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		ca, err := x509.ParseCertificate(b.Bytes)
		signed = err == nil && crl.CheckSignatureFrom(ca) == nil
	}
	if !signed {
		return nil, fmt.Errorf("CRL %s: not signed by a CA of the client CA file", path)
	}
	r := &revokedSerials{issuer: crl.RawIssuer, serials: map[string]bool{}}
	for _, e := range crl.RevokedCertificateEntries {
		r.serials[e.SerialNumber.String()] = true
	}
	return r, nil
}

// check refuses a handshake whose verified client certificate, or an
// intermediate under the CRL's issuer, the list revokes.
func (r *revokedSerials) check(cs tls.ConnectionState) error {
	for _, chain := range cs.VerifiedChains {
		for _, cert := range chain {
			if bytes.Equal(cert.RawIssuer, r.issuer) && r.serials[cert.SerialNumber.String()] {
				return fmt.Errorf("client certificate %q (serial %s) is revoked by the CRL", cert.Subject.CommonName, cert.SerialNumber)
			}
		}
	}
	return nil
}

// reload swaps in the files as they are now, or keeps the current
// config when they do not load.
func (cs *certStore) reload() error {
	conf, err := cs.load()
	if err != nil {
		return fmt.Errorf("kept the previous certificates: %w", err)
	}
	cs.cur.Store(conf)
	return nil
}

// tlsConn is a TLS connection whose handshake is done. It passes TCP
// keepalive settings on to its socket, as the engine's probe of dead peers
// needs.
type tlsConn struct{ *tls.Conn }

// OnReadWait has hook called, on the reading goroutine, whenever a read
// finds nothing waiting on the socket and is about to wait for the
// client: the engine answers then, in one write, everything read before,
// as its poller answers once a read drains a plain TCP socket. It reports
// false, and sets nothing, where this cannot be told (not Linux).
func (c *tlsConn) OnReadWait(hook func()) bool { return onReadWait(c.Conn, hook) }

// SetKeepAliveConfig sets TCP keepalive on the socket under the TLS.
func (c *tlsConn) SetKeepAliveConfig(kc net.KeepAliveConfig) error {
	return setKeepAlive(c.NetConn(), kc)
}

// PeerCommonName returns the Common Name of the verified client
// certificate of a TLS or WSS connection from a Listener, or "" when the
// client gave none (or the connection is not TLS). It is the identity
// that use_identity_as_username-style authentication takes as user name.
func PeerCommonName(nc net.Conn) string {
	var tc *tls.Conn
	switch c := nc.(type) {
	case *tlsConn:
		tc = c.Conn
	case *wsConn:
		tc, _ = c.ws.NetConn().(*tls.Conn)
	case *tls.Conn:
		tc = c
	}
	if tc == nil {
		return ""
	}
	chains := tc.ConnectionState().VerifiedChains
	if len(chains) == 0 || len(chains[0]) == 0 {
		return ""
	}
	return chains[0][0].Subject.CommonName
}

// ServerTLS is a Listener's TLS for another server, the management HTTP
// address: the same files, policy (TLS 1.2 and later) and reload, so that
// one SIGHUP renews every certificate the broker serves.
type ServerTLS struct{ certs *certStore }

// NewServerTLS loads cfg's files; it fails as Listen does on them.
func NewServerTLS(cfg TLSConfig) (*ServerTLS, error) {
	cs, err := newCertStore(cfg)
	if err != nil {
		return nil, err
	}
	return &ServerTLS{certs: cs}, nil
}

// Config is the tls.Config to serve with (tls.NewListener): each
// handshake takes the certificates current when its ClientHello arrives.
func (s *ServerTLS) Config() *tls.Config { return s.certs.outer }

// Reload reads the files again; when they do not load the previous
// certificates stay and the error says why.
func (s *ServerTLS) Reload() error { return s.certs.reload() }

package mqttd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"

	"mqttd/bridge"
)

// dialRemote connects to a bridge's remote address.
func dialRemote(ctx context.Context, addr bridge.Address, tc *tls.Config) (net.Conn, error) {
	var d net.Dialer
	switch addr.Scheme {
	case "tcp":
		return d.DialContext(ctx, "tcp", addr.Host)
	case "tls":
		td := tls.Dialer{NetDialer: &d, Config: tc}
		return td.DialContext(ctx, "tcp", addr.Host)
	}
	return nil, fmt.Errorf("%s: not supported yet", addr)
}

// clientTLS is the client side of a bridge's TLS.
func clientTLS(c bridge.TLSConfig) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName, NextProtos: c.ALPN,
		InsecureSkipVerify: c.Insecure}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no certificate in it", c.CAFile)
		}
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

package listeners

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"time"

	"github.com/gorilla/websocket"
)

// dialer opens the TCP connection of every Dial. TCP keepalive is off: a
// bridge always has an MQTT keepalive, which finds a dead remote and
// keeps NAT mappings open, and Go's default probes every 15 s would only
// add traffic on a metered uplink.
var dialer = net.Dialer{KeepAlive: -1}

// Dial connects to a remote broker at host (host:port) over scheme: TCP,
// TLS, WS or WSS. path is the URL path of a WebSocket (escaped, as
// url.URL.EscapedPath gives it; DefaultPath when empty); tc is the client
// TLS configuration of TLS and WSS (ClientTLS), Go's defaults with TLS 1.2
// at least when nil, and when its ServerName is empty the host part of
// host is sent and verified.
//
// TCP returns the *net.TCPConn itself, so that Detach can take its
// descriptor; TLS a *tls.Conn whose handshake is done; WS and WSS a
// connection that carries the bytes written in binary messages of the
// "mqtt" subprotocol (MQTT over WebSocket, §6) and reads them back
// across message boundaries, as a WebSocket Listener's connections do.
// ctx bounds the whole dial, the TCP connect and every handshake: give it
// a deadline, as a remote that accepts and never answers would otherwise
// hold the dial until ctx is cancelled. An error names the address. TCP
// keepalive is off on the socket (see dialer); no HTTP proxy is used.
func Dial(ctx context.Context, scheme, host, path string, tc *tls.Config) (net.Conn, error) {
	where := scheme + "://" + host
	var nc net.Conn
	var err error
	switch scheme {
	case TCP:
		nc, err = dialer.DialContext(ctx, "tcp", host)
	case TLS:
		nc, err = dialTLS(ctx, host, tc)
	case WS, WSS:
		if path == "" {
			path = DefaultPath
		}
		where += path
		nc, err = dialWeb(ctx, scheme, where, host, tc)
	default:
		return nil, fmt.Errorf("%s: unknown scheme %q (want tcp, tls, ws or wss)", where, scheme)
	}
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w: %w", ctx.Err(), err)
		}
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return nc, nil
}

// clientConfig is a copy of tc (or the defaults) naming the server.
func clientConfig(tc *tls.Config, host string) (*tls.Config, error) {
	if tc == nil {
		tc = &tls.Config{MinVersion: tls.VersionTLS12}
	} else {
		tc = tc.Clone()
	}
	if tc.ServerName == "" {
		name, _, err := net.SplitHostPort(host)
		if err != nil {
			return nil, err
		}
		tc.ServerName = name
	}
	return tc, nil
}

func dialTLS(ctx context.Context, host string, tc *tls.Config) (net.Conn, error) {
	conf, err := clientConfig(tc, host)
	if err != nil {
		return nil, err
	}
	raw, err := dialer.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	c := tls.Client(raw, conf)
	if err := c.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	return c, nil
}

// longAgo is a deadline that has passed: setting it stops a read or a
// write under way.
var longAgo = time.Unix(1, 0)

// dialWeb opens a WebSocket to url. gorilla bounds the upgrade by ctx's
// deadline only, so a cancel of ctx stops it here, through the socket's
// deadline.
func dialWeb(ctx context.Context, scheme, url, host string, tc *tls.Config) (net.Conn, error) {
	d := websocket.Dialer{Subprotocols: []string{"mqtt"}}
	if scheme == WSS {
		conf, err := clientConfig(tc, host)
		if err != nil {
			return nil, err
		}
		d.TLSClientConfig = conf
	}
	stop := func() bool { return true }
	d.NetDialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err == nil {
			stop = context.AfterFunc(ctx, func() { c.SetDeadline(longAgo) })
		}
		return c, err
	}
	ws, resp, err := d.DialContext(ctx, url, nil)
	if !stop() && err == nil {
		// Cancelled as the upgrade succeeded: the deadline may be set.
		ws.Close()
		return nil, ctx.Err()
	}
	if errors.Is(err, websocket.ErrBadHandshake) && resp != nil {
		return nil, fmt.Errorf("WebSocket upgrade refused: HTTP %s: %w", resp.Status, err)
	}
	if err != nil {
		return nil, err
	}
	return &wsConn{ws: ws, remote: ws.RemoteAddr()}, nil
}

// ClientTLS builds the client side of a TLS or WSS connection to a remote
// broker, for Dial: it verifies the remote against the CAs in caFile (PEM)
// or, when caFile is empty, the system's roots; shows the client
// certificate in certFile and keyFile (PEM) when both are given; sends
// and verifies serverName (the dialed host when empty); offers the ALPN
// protocols alpn; and refuses TLS before 1.2. insecure skips verifying
// the remote's certificate: anyone on the path can then read and change
// the traffic. Errors name the file.
//
// The client certificate is shown whatever CAs the remote says it
// accepts (as Mosquitto's bridge does): Go's default would show none
// when they do not name its issuer, and the remote's refusal then says
// less than its refusal of the certificate.
func ClientTLS(caFile, certFile, keyFile, serverName string, alpn []string, insecure bool) (*tls.Config, error) {
	conf := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         serverName,
		NextProtos:         slices.Clone(alpn),
		InsecureSkipVerify: insecure,
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s: no PEM certificate in it", caFile)
		}
	}
	switch {
	case certFile != "" && keyFile != "":
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate %s, key %s: %w", certFile, keyFile, err)
		}
		conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &pair, nil
		}
	case certFile != "":
		return nil, fmt.Errorf("client certificate %s: no key file", certFile)
	case keyFile != "":
		return nil, fmt.Errorf("client key %s: no certificate file", keyFile)
	}
	return conf, nil
}

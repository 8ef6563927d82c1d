package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"mqttd/internal/testutil"

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
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	testutil.WriteSelfSigned(t, certFile, keyFile, "127.0.0.1")
	return certFile, keyFile
}

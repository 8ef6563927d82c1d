package main

import (
	"io"
	"testing"
)

// TestTLSCRLFlag checks that --tls-crl gives the tls and wss listeners of
// --listen their crl_file.
func TestTLSCRLFlag(t *testing.T) {
	f, err := parseFlags([]string{"--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-client-ca", "ca.pem",
		"--tls-crl", "devices.crl", "--listen", "tls://127.0.0.1:8883", "--listen", "tcp://127.0.0.1:1883"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Listeners[0].CRLFile; got != "devices.crl" {
		t.Errorf("tls listener crl_file %q, want devices.crl", got)
	}
	if got := cfg.Listeners[1].CRLFile; got != "" {
		t.Errorf("tcp listener crl_file %q, want none", got)
	}
}

package mqttd_test

import (
	"path/filepath"
	"strings"
	"testing"

	"mqttd"
	"mqttd/bridge"
	"mqttd/internal/testutil"
)

// TestBridgeTransports: a bridge reaches an mqttd remote over TLS,
// WebSocket and WebSocket over TLS, verifying the remote's certificate
// with its tls.ca_file, and messages cross both ways; with the wrong CA
// it stays disconnected and says why.
func TestBridgeTransports(t *testing.T) {
	cert, key := writeServerCert(t)
	remote := listenAll(t, mqttd.Options{Listeners: []mqttd.ListenerConfig{
		{Address: "127.0.0.1:0"},
		{Type: "tls", Address: "127.0.0.1:0", CertFile: cert, KeyFile: key},
		{Type: "ws", Address: "127.0.0.1:0"},
		{Type: "wss", Address: "127.0.0.1:0", CertFile: cert, KeyFile: key},
	}})
	addrs := remote.Addrs()
	raddr := addrs[0].String()
	for i, scheme := range []string{"tls", "ws", "wss"} {
		t.Run(scheme, func(t *testing.T) {
			cfg := bridgeTo(scheme+"://"+addrs[i+1].String(), "5",
				rule("sensors/#", bridge.Out, 1, "", scheme+"/"),
				rule("cmd/#", bridge.In, 1, "local/", scheme+"/"))
			cfg.ClientID = "gw-" + scheme
			cfg.TLS.CAFile = cert
			gw, gaddr := startServer(t, mqttd.Options{Bridges: []bridge.Config{cfg}})
			waitBridge(t, gw, true)
			waitRemoteSub(t, remote, cfg.ClientID, scheme+"/cmd/#")
			atRemote := bridgeCollector(t, raddr, "remote-sub-"+scheme, scheme+"/sensors/#")
			atGateway := bridgeCollector(t, gaddr, "gw-sub", "local/cmd/#")
			wait(t, pahoConnect(t, gaddr, "gw-pub", nil).Publish("sensors/t", 1, false, "out over "+scheme))
			expectMsg(t, atRemote, scheme+"/sensors/t", "out over "+scheme)
			wait(t, pahoConnect(t, raddr, "remote-pub-"+scheme, nil).Publish(scheme+"/cmd/x", 1, false, "in over "+scheme))
			expectMsg(t, atGateway, "local/cmd/x", "in over "+scheme)
			if a := gw.Bridges()[0].Address; !strings.HasPrefix(a, scheme+"://") {
				t.Errorf("bridge address %q, want %s://", a, scheme)
			}
		})
	}
	for i, scheme := range []string{"tls", "wss"} {
		t.Run("wrong CA "+scheme, func(t *testing.T) {
			dir := t.TempDir()
			otherCA := filepath.Join(dir, "other.pem")
			testutil.WriteSelfSigned(t, otherCA, filepath.Join(dir, "other.key"), "127.0.0.1")
			cfg := bridgeTo(scheme+"://"+addrs[2*i+1].String(), "5", rule("sensors/#", bridge.Out, 1, "", ""))
			cfg.ClientID = "gw-wrong-" + scheme
			cfg.TLS.CAFile = otherCA
			gw, _ := startServer(t, mqttd.Options{Bridges: []bridge.Config{cfg}})
			waitFor(t, "a few attempts", func() bool {
				st := gw.Bridges()[0]
				return st.Failures >= 3 || st.Connects > 0
			})
			st := gw.Bridges()[0]
			if st.Connected || st.Connects != 0 || !strings.Contains(st.LastError, "certificate") {
				t.Errorf("connected %v after %d connects, last error %q; want never connected, an error naming the certificate",
					st.Connected, st.Connects, st.LastError)
			}
		})
	}
}
